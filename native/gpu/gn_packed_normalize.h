// The forward slices' last launch on packed tensors (GnPackedWalk,
// gn_layout.hpp): y = act(((x - shift) - mean_offset) * coef0 + coef1) from
// each slice's factors in the scratch (gn_slice_terms.h sets them).  A
// header so that the emulator check
// (tests/gpu/emulation/gn_packed_normalize_check.cpp) runs the same kernel;
// included by gn_forward_slices.hip alone besides it, hence the unnamed
// namespace.
#pragma once

#include "gpu/dependent_launch.h"
#include "gpu/feature_scratch.hpp"
#include "gpu/gn_activation.h"
#include "gpu/gn_packed_walk.h"
#include "gpu/norm_math.h"

#include <cstdint>

namespace mbn {
namespace gpu {
namespace {

// One slice's factors in A: y = ((x - shift) - mean_offset) * scale + bias,
// the feature walk's numerics.  16-bit outputs fold the offset into the
// bias, y = (x - shift) * scale + term (as the on-chip kernels): its error
// beside the unfolded form, |mean_offset * scale| 2^-24, is far below
// theirs, and a lane's factors take three registers instead of four.
template <typename A, bool kFold>
struct SliceFactors {
    A shift, mean_offset, scale, bias;

    __device__ __forceinline__ A apply(A x) const {
        return kFold ? (x - shift) * scale + bias : ((x - shift) - mean_offset) * scale + bias;
    }
};

template <typename A, bool kFold>
__device__ __forceinline__ SliceFactors<A, kFold> slice_factors(const FeatureArrays& scratch, int feature) {
    SliceFactors<A, kFold> f;
    f.shift = static_cast<A>(scratch.shift[feature]);
    f.scale = static_cast<A>(scratch.coef0[feature]);
    if constexpr (kFold) {
        f.mean_offset = A(0);
        f.bias = static_cast<A>(scratch.coef1[feature] - scratch.mean_offset[feature] * scratch.coef0[feature]);
    } else {
        f.mean_offset = static_cast<A>(scratch.mean_offset[feature]);
        f.bias = static_cast<A>(scratch.coef1[feature]);
    }
    return f;
}

// One vector's output: lane e through its own factors (L == W: channels
// inner) or the vector's one set (L == 1), then the swish where asked.
template <typename T, typename A, int W, int L, bool kFold, bool kSwish, int kPass = 0>
__device__ __forceinline__ Pack<T, W> normalize_vector(const Pack<T, W>& raw, const SliceFactors<A, kFold> (&f)[L],
                                                       A beta) {
    A value[W];
    widen_pack<A, W, kPass>(raw, value);
    Pack<T, W> out;
#pragma unroll
    for (int e = 0; e < W; ++e) {
        A z = f[L == W ? e : 0].apply(value[e]);
        if constexpr (kSwish) z = swish_of_lane<T>(z, beta, e);
        out.lane[e] = narrow<T>(z);
    }
    return out;
}

// The normalize over packed x and y (GnPackedWalk): each thread's K
// vectors, one batch (the forward's walks are planned with walk.batches 1;
// packed_first_vector and packed_walk_grid count in them), blocks in the
// reverse of the statistics' order, all loaded before the factors are
// awaited (x is no earlier kernel's output: the loads overlap the terms
// kernel).
// Each thread keeps the factors of the slice (positions inner) or of the W
// channels (channels inner) it used last.  x may be y: each thread reads
// its vectors before it writes them.
template <typename T, bool kInner, bool kSwish>
__global__ void __launch_bounds__(kPackedWalkMostThreads, 2)
    gn_packed_normalize(const T* x, T* y, GnPackedWalk walk, FeatureArrays scratch, float swish_beta) {
    using A = acc_t<T>;
    constexpr int W = static_cast<int>(16 / sizeof(T));
    constexpr int K = kPackedWalkBatch;
    constexpr int L = kInner ? W : 1;  // factor sets a vector needs
    constexpr bool kFold = sizeof(T) == 2;
    const int threads = static_cast<int>(blockDim.x);
    const int first = packed_first_vector(walk);
    Pack<T, W> raw[K];
#pragma unroll
    for (int k = 0; k < K; ++k)
        if (first + k * threads < walk.vectors)
            raw[k] = load_pack<W>(x + static_cast<std::int64_t>(first + k * threads) * W);
    wait_for_prior_kernel();  // the factors
    int held = -1;  // the feature of lane 0 whose factors `f` hold
    SliceFactors<A, kFold> f[L];
    const A beta = static_cast<A>(swish_beta);
#pragma unroll
    for (int k = 0; k < K; ++k) {
        const int v = first + k * threads;
        if (v >= walk.vectors) MBN_UNROLLED_EXIT;
        const int feature = packed_slice(walk, v, W);
        if (feature != held) {
            held = feature;
#pragma unroll
            for (int j = 0; j < L; ++j) f[j] = slice_factors<A, kFold>(scratch, feature + j);
        }
        store_pack(y + static_cast<std::int64_t>(v) * W, normalize_vector<T, A, W, L, kFold, kSwish>(raw[k], f, beta));
    }
}

}  // namespace
}  // namespace gpu
}  // namespace mbn
