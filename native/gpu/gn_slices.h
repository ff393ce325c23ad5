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

}  // namespace gpu
}  // namespace mbn
