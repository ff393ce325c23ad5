// What both persistent group-norm kernels (gn_persistent.hpp) share: where
// a block's share of the vectors lies, and a warp's sums in fixed order.
#pragma once

#include "gpu/gn_persistent.hpp"
#include "gpu/hip_compat.h"
#include "gpu/norm_math.h"

namespace mbn {
namespace gpu {
namespace {

// Where a block's share lies: vectors [begin, end) of x, and (positions
// inner) the first flat group n * G + g it touches, or (channels inner)
// its sample.
struct GnPersistentShare {
    int begin, end;
    int first;  // positions inner: first group; channels inner: sample
};

__device__ __forceinline__ GnPersistentShare persistent_share(const GnPersistentWalk& w, int block) {
    GnPersistentShare s;
    if (w.channels_inner) {
        const int sample = block / w.sample_blocks;
        const int base = sample * w.sample_vectors;
        const int at = (block - sample * w.sample_blocks) * w.block_vectors;
        s.begin = base + min(at, w.sample_vectors);
        s.end = base + min(at + w.block_vectors, w.sample_vectors);
        s.first = sample;
    } else {
        s.begin = min(block * w.block_vectors, w.vectors);
        s.end = min(s.begin + w.block_vectors, w.vectors);
        s.first = w.by_group.divide(s.begin);
    }
    return s;
}

// Sum over the warp's lanes, the same bits in every lane.
__device__ __forceinline__ double warp_total(double v) {
    for (int mask = 1; mask < MBN_WAVE_SIZE; mask *= 2) v += shuffle_xor(v, mask);
    return v;
}

// A warp's pair of sums (g and g xhat, d and d^2), each as warp_total.
__device__ __forceinline__ void warp_totals(double (&total)[2]) {
    total[0] = warp_total(total[0]);
    total[1] = warp_total(total[1]);
}

// Stores a pair of sums at out[0], out[1].
__device__ __forceinline__ void store_pair(double* out, const double (&total)[2]) {
    out[0] = total[0];
    out[1] = total[1];
}

}  // namespace
}  // namespace gpu
}  // namespace mbn
