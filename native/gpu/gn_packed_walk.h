// Device side of GnPackedWalk (gn_layout.hpp): the slice of a vector, a
// thread's first vector and the launch's grid, shared by the slices'
// forward normalize (gn_packed_normalize.h) and backward apply
// (gn_backward_walks.h).
#pragma once

#include "gpu/gn_layout.hpp"
#include "gpu/hip_compat.h"

namespace mbn {
namespace gpu {

// The feature (n * C + c) of vector v's first lane; channels inner the
// others' follow it (W channels of one position).
__device__ __forceinline__ int packed_slice(const GnPackedWalk& walk, int v, int width) {
    if (walk.channels_inner) {
        const int n = walk.by_sample.divide(v);
        const int row_vector = v - walk.by_row.divide(v) * walk.row_vectors;
        return n * walk.channels + row_vector * width;
    }
    return walk.by_plane.divide(v);
}

// The first of the calling thread's vectors (t, t + threads, ... of its
// block's kPackedWalkBatch * walk.batches a thread).  Blocks take theirs in
// the reverse of launch order: the first launch's last reads are likeliest
// still in L2.
__device__ __forceinline__ int packed_first_vector(const GnPackedWalk& walk) {
    const int threads = static_cast<int>(blockDim.x);
    const int block = static_cast<int>(gridDim.x - 1 - blockIdx.x);
    return block * kPackedWalkBatch * walk.batches * threads + static_cast<int>(threadIdx.x);
}

// Blocks of walk.threads, each kPackedWalkBatch * walk.batches vectors a thread.
inline dim3 packed_walk_grid(const GnPackedWalk& walk) {
    const long long per_block = static_cast<long long>(kPackedWalkBatch) * walk.batches * walk.threads;
    return dim3(static_cast<unsigned>((walk.vectors + per_block - 1) / per_block));
}

}  // namespace gpu
}  // namespace mbn
