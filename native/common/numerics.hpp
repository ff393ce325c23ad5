// Numeric choices that every backend makes alike, so that a result's
// accuracy does not depend on where it was computed.
#pragma once

#include <cstdint>

namespace mbn {

// Backward computes dx in float (for float, half and bfloat16 data) when
// every feature reduces over at least this many values, else in double.
// dx = dy*k_dy + (x - mean)*k_x + k_0 has terms that cancel when M is tiny
// (with M = 2 the exact dx is 0), below float's rounding of them; from a few
// hundred values on they no longer do, and float halves the conversions and
// vector work per value.  The gradient sums stay in double throughout:
// summed in float they drift by ~5e-4 at M = 2^18, past the 1e-4 floor of
// the reduction tolerance.
constexpr std::int64_t kFloatBackpropMinCount = 256;

}  // namespace mbn
