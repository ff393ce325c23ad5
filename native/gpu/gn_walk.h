// Device-side addressing of the forward walk (gn_layout.hpp): which channel
// and position element e of a group is, and where it lies in x or y.
#pragma once

#include "gpu/gn_layout.hpp"
#include "gpu/hip_compat.h"
#include "gpu/nest_walk.h"

#include <cstdint>

namespace mbn {
namespace gpu {

// The element order a kernel instance is compiled for; `as_planned` reads
// it from the walk at run time (the scalar instance serves both).
enum class GnOrder { positions_fastest, channels_fastest, as_planned };

// W elements per access: consecutive positions of one channel (positions
// fastest) or W consecutive channels at one position (channels fastest).
// Vector walks need linear positions (the planner checks); the scalar walk
// also takes positions that are not.
template <int W, GnOrder O>
struct GnWalkPolicy {
    static constexpr int kWidth = W;
    static constexpr bool kLinear = W > 1;
    __device__ static bool channels_inner(const GnForwardWalk& walk) {
        return O == GnOrder::channels_fastest || (O == GnOrder::as_planned && walk.channels_inner);
    }
};

// Offset of group (n, g)'s channel 0 at position 0 in a tensor placed as `t`.
__device__ __forceinline__ std::int64_t group_base(const GnGroupShape& shape, const GnPlacement& t, std::int64_t n,
                                                   std::int64_t g) {
    return n * t.sample + g * shape.channels * t.channel;
}

// Offset of channel k (within the group) at position s, from the group's
// base; kLinear: the placement is known to have linear positions.
template <bool kLinear>
__device__ __forceinline__ std::int64_t element_offset(const GnGroupShape& shape, const GnPlacement& t,
                                                       std::int64_t k, std::int64_t s) {
    if (kLinear || t.linear) return k * t.channel + s * t.pitch;
    std::int64_t rest, d, h, w;
    divide(s, shape.width, rest, w);
    divide(rest, shape.height, d, h);
    return k * t.channel + d * t.position[0] + h * t.position[1] + w * t.position[2];
}

// Walks elements first, first + step, first + 2 step, ... of a group,
// keeping element = high * radix + low (radix: the channels when they are
// fastest, else the positions) by carries instead of a division each.
struct GnElementCursor {
    std::int64_t element;
    std::int64_t high, low;
    std::int64_t step, step_high, step_low, radix;
    bool channels_inner;

    __device__ __forceinline__ void start(const GnGroupShape& shape, bool inner, std::int64_t first,
                                          std::int64_t stride) {
        channels_inner = inner;
        radix = inner ? shape.channels : shape.positions;
        element = first;
        step = stride;
        divide(first, radix, high, low);
        divide(stride, radix, step_high, step_low);
    }
    __device__ __forceinline__ std::int64_t channel() const { return channels_inner ? low : high; }
    __device__ __forceinline__ std::int64_t position() const { return channels_inner ? high : low; }
    __device__ __forceinline__ void advance() {
        element += step;
        low += step_low;
        high += step_high;
        if (low >= radix) {
            low -= radix;
            ++high;
        }
    }
};

}  // namespace gpu
}  // namespace mbn
