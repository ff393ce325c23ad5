// Converting contiguous runs between storage types and the compute type:
// float16 and bfloat16 to and from float, float to and from double.  The
// float16 forms use the F16C instructions when the processor has them;
// every form rounds to nearest even and keeps NaN and infinities, exactly
// as half_convert.hpp does value by value.
#pragma once

#include "cpu/half_convert.hpp"

#include <cstdint>

namespace mbn::cpu {

void convert_span(const Half* in, float* out, std::int64_t n);
void convert_span(const float* in, Half* out, std::int64_t n);
void convert_span(const BFloat16* in, float* out, std::int64_t n);
void convert_span(const float* in, BFloat16* out, std::int64_t n);
void convert_span(const float* in, double* out, std::int64_t n);
void convert_span(const double* in, float* out, std::int64_t n);

}  // namespace mbn::cpu
