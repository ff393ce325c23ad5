// Where a block of a feature-layout walk (feature_layout.hpp) works: its
// tile of features and split of their reduction, as each thread sees them,
// and how many values a split covers.
#pragma once

#include "gpu/feature_layout.hpp"
#include "gpu/hip_compat.h"
#include "gpu/norm_math.h"

#include <cstdint>

namespace mbn {
namespace gpu {

// The block's features and reduction positions, as one thread sees them.
// Thread (tx, ty) owns features feature0 .. feature0 + VF - 1 and the
// positions first, first + rows, ... below end.
struct ThreadShare {
    std::int64_t feature0;
    std::int64_t first;
    std::int64_t end;
    bool active;  // feature0 < F
};

// A block's tile of features and split of their reduction.
struct BlockPlace {
    std::int64_t tile;
    std::int64_t split;
};

// The place a block's launch index names.
__device__ __forceinline__ BlockPlace launch_place() { return BlockPlace{blockIdx.x, blockIdx.y}; }

// The place of a second pass's block: the reverse of launch order.  Blocks
// start roughly in launch order and a large grid runs in several waves, so
// the last wave of the first pass leaves its data in L2; reversed, the
// second pass's first wave reads that data again from there instead of from
// memory.
__device__ __forceinline__ BlockPlace second_pass_place() {
    const std::int64_t tiles = gridDim.x;
    const std::int64_t last = tiles * gridDim.y - 1;
    const std::int64_t index = last - (static_cast<std::int64_t>(blockIdx.y) * tiles + blockIdx.x);
    return BlockPlace{index % tiles, index / tiles};
}

template <int VF>
__device__ __forceinline__ ThreadShare thread_share(const FeatureLayout& layout, const BlockPlace& place) {
    ThreadShare s;
    s.feature0 = (place.tile * layout.tile_features + threadIdx.x) * VF;
    const std::int64_t begin = place.split * layout.chunk;
    s.first = begin + threadIdx.y;
    s.end = min64(layout.reduce.size, begin + layout.chunk);
    s.active = s.feature0 < layout.feature.size;
    return s;
}

// Values each position of the share holds: how many the share covers.
__device__ __forceinline__ double share_count(const FeatureLayout& layout, std::int64_t split) {
    const std::int64_t positions = min64(layout.chunk, layout.reduce.size - split * layout.chunk);
    return static_cast<double>(positions * layout.vector_width);
}

}  // namespace gpu
}  // namespace mbn
