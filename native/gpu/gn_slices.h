// Group norm's slices: the positions of channel c of sample n, the features
// of the FeatureLayout both directions walk when they reduce per (n, c) first
// (gn_planner.hpp).  Where a slice sits and which group it belongs to.
#pragma once

#include "gpu/gn_layout.hpp"
#include "gpu/nest_walk.h"

#include <cstdint>

namespace mbn {
namespace gpu {

// Where a slice sits: sample n, channel c, group g of n.
struct GnSlicePlace {
    std::int64_t n, c, g;
    std::int64_t group;  // n * G + g
};

__device__ inline GnSlicePlace slice_place(const GnSliceOrder& order, std::int64_t slice) {
    const GnGroupShape& shape = order.shape;
    GnSlicePlace s;
    if (order.channel_major)
        divide(slice, shape.samples, s.c, s.n);
    else
        divide(slice, shape.groups * shape.channels, s.n, s.c);
    std::int64_t k;
    divide(s.c, shape.channels, s.g, k);
    s.group = s.n * shape.groups + s.g;
    return s;
}

// Calls visit(k, split) once for every channel k < channels and split <
// splits of one group, spread over `threads` threads (a block, or a team
// within one; `thread` is the index among them).  The channel is the
// fastest of the two across threads and fixed per thread: the partials of
// one split lie next to each other in the scratch ([split * slices +
// slice], consecutive channels consecutive when samples are outermost), and
// a thread's loop has no division, so its loads can be in flight together.
// The order is fixed by the shape alone (deterministic sums).
template <typename Visit>
__device__ __forceinline__ void for_group_partials(std::int64_t channels, std::int64_t splits, int threads, int thread,
                                                   Visit&& visit) {
    if (channels >= threads) {
        for (std::int64_t split = 0; split < splits; ++split)
            for (std::int64_t k = thread; k < channels; k += threads) visit(k, split);
        return;
    }
    const std::int64_t rows = threads / channels;
    const std::int64_t row = thread / channels;
    const std::int64_t k = thread % channels;
    if (row >= rows) return;
#pragma unroll 4
    for (std::int64_t split = row; split < splits; split += rows) visit(k, split);
}

}  // namespace gpu
}  // namespace mbn
