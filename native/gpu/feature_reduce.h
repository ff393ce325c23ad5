// Per-feature reduce, then an elementwise epilogue: the building blocks the
// one-launch engine (bn_engine.hip) is made of, in terms of a block's share
// of a loop-nest walk (bn_layout.hpp) and free of any batch-norm meaning.
//
//   run_length / load_run   a thread's positions of its share, held in
//                           registers between the reduce and the epilogue
//                           (DRAM then sees the data once)
//   run_moments             shifted moments of a register run, two-pass
//   merge_splits            the partials of a block's features from every
//                           split of the grid, merged in a fixed order by the
//                           whole block (deterministic; no atomics)
//   merge_owned_splits      the same, the blocks of a tile sharing the merges
#pragma once

#include "gpu/bn_device_math.h"
#include "gpu/bn_nest_walk.h"

#include <cstdint>

namespace mbn {
namespace gpu {

// Positions a thread holds of [first, end) when it takes every rows-th one.
__device__ __forceinline__ int run_length(std::int64_t first, std::int64_t end, int rows) {
    return first < end ? static_cast<int>((end - first + rows - 1) / rows) : 0;
}

// Loads `count` (<= Cache) packs of V elements at the cursor's positions:
// slot 0 into pa, and with a two-slot cursor slot 1 into pb.  Every load is
// issued before any use.
template <int Cache, int V, int Rank, typename TA>
__device__ __forceinline__ void load_run(const TA* a, const LoopNest& nest, NestCursor<Rank, 1>& cursor, int count,
                                         Pack<TA, V> (&pa)[Cache]) {
#pragma unroll
    for (int k = 0; k < Cache; ++k)
        if (k < count) {
            pa[k] = load_pack<V>(a + cursor.offset[0]);
            cursor.advance(nest);
        }
}
template <int Cache, int V, int Rank, typename TA, typename TB>
__device__ __forceinline__ void load_run(const TA* a, const TB* b, const LoopNest& nest, NestCursor<Rank, 2>& cursor,
                                         int count, Pack<TA, V> (&pa)[Cache], Pack<TB, V> (&pb)[Cache]) {
#pragma unroll
    for (int k = 0; k < Cache; ++k)
        if (k < count) {
            pa[k] = load_pack<V>(a + cursor.offset[0]);
            pb[k] = load_pack<V>(b + cursor.offset[1]);
            cursor.advance(nest);
        }
}

// Shifted moments of a register run for each of VF features (element e of a
// pack belongs to feature e when VF > 1, else every element to feature 0):
// the mean two-pass from a double sum, M2 about it in the accumulation type,
// redone in double when that overflowed (inputs near 1e30).
template <int Cache, int VR, int VF, typename T>
__device__ void run_moments(const Pack<T, VR * VF> (&px)[Cache], int count, const acc_t<T> (&shift)[VF],
                            ShiftedMoments<acc_t<T>> (&out)[VF]) {
    using A = acc_t<T>;
    constexpr int V = VR * VF;
    double sum[VF];
#pragma unroll
    for (int j = 0; j < VF; ++j) sum[j] = 0.0;
#pragma unroll
    for (int k = 0; k < Cache; ++k)
        if (k < count) {
            A part[VF];
#pragma unroll
            for (int j = 0; j < VF; ++j) part[j] = A(0);
#pragma unroll
            for (int e = 0; e < V; ++e) {
                const int j = VF > 1 ? e : 0;
                part[j] += static_cast<A>(widen(px[k].lane[e])) - shift[j];
            }
#pragma unroll
            for (int j = 0; j < VF; ++j) sum[j] += static_cast<double>(part[j]);
        }
    const double n = static_cast<double>(count) * VR;
#pragma unroll
    for (int j = 0; j < VF; ++j) {
        const A mean = count > 0 ? static_cast<A>(sum[j] / n) : A(0);
        A m2 = 0;
#pragma unroll
        for (int k = 0; k < Cache; ++k)
            if (k < count)
#pragma unroll
                for (int e = 0; e < V; ++e)
                    if (VF == 1 || e == j) {
                        const A d = (static_cast<A>(widen(px[k].lane[e])) - shift[j]) - mean;
                        m2 += d * d;
                    }
        if (isfinite(m2)) {
            out[j] = ShiftedMoments<A>{{static_cast<A>(n), mean, static_cast<double>(m2)}, sum[j]};
            continue;
        }
        // Squared deviations past float's range: all of it again in double.
        double wide_sum = 0.0;
#pragma unroll
        for (int k = 0; k < Cache; ++k)
            if (k < count)
#pragma unroll
                for (int e = 0; e < V; ++e)
                    if (VF == 1 || e == j)
                        wide_sum += static_cast<double>(widen(px[k].lane[e])) - static_cast<double>(shift[j]);
        const double wide_mean = wide_sum / n;
        double wide_m2 = 0.0;
#pragma unroll
        for (int k = 0; k < Cache; ++k)
            if (k < count)
#pragma unroll
                for (int e = 0; e < V; ++e)
                    if (VF == 1 || e == j) {
                        const double d =
                            (static_cast<double>(widen(px[k].lane[e])) - static_cast<double>(shift[j])) - wide_mean;
                        wide_m2 += d * d;
                    }
        out[j] = ShiftedMoments<A>{{static_cast<A>(n), static_cast<A>(wide_mean), wide_m2}, wide_sum};
    }
}

// Merges, for each of the block's `features` local features, the partials of all `splits` splits: load(f, s) gives feature f's
// partial of split s, identity the empty value, and finish(f, merged) is
// called once per feature with the result.  The block's threads share the
// work (lanes of a feature take splits lane, lane + lanes, ...), then the
// lanes merge in a fixed tree, so the bits never depend on timing.  `buffer`
// is shared memory for one V per thread.  Every thread of the block calls
// it; it synchronizes the block before returning.
template <typename V, typename Load, typename Finish>
__device__ void merge_splits(int features, int splits, const V& identity, Load&& load, Finish&& finish, V* buffer) {
    const int threads = static_cast<int>(blockDim.x * blockDim.y);
    const int t = flat_thread_index();
    const int columns = features < threads ? features : threads;
    // Lanes: a power of two, for the tree below; threads past lanes * columns
    // compute nothing that is read.
    int lanes = 1;
    while (lanes * 2 * columns <= threads) lanes *= 2;
    const int lane = t / columns;
    for (int first = 0; first < features; first += columns) {
        const int f = first + t % columns;
        // Four partials loaded before they are merged: each load is a trip
        // to L2, and a block merges up to a few dozen per thread.
        V value = identity;
        int s = lane;
        for (; s + 3 * lanes < splits; s += 4 * lanes) {
            const V p0 = load(f, s), p1 = load(f, s + lanes), p2 = load(f, s + 2 * lanes), p3 = load(f, s + 3 * lanes);
            value = merge(merge(merge(merge(value, p0), p1), p2), p3);
        }
        for (; s < splits; s += lanes) value = merge(value, load(f, s));
        buffer[t] = value;
        __syncthreads();
        for (int half = lanes / 2; half > 0; half /= 2) {
            if (lane < half) {
                value = merge(value, buffer[t + half * columns]);
                buffer[t] = value;
            }
            __syncthreads();
        }
        if (lane == 0) finish(f, value);
        __syncthreads();
    }
}

// The grid-wide form of merge_splits: the `splits` blocks that share a tile
// of `features` features divide them, block `split` merging features split,
// split + splits, ... (finish(f, merged) for each), so that each block does
// 1/splits of the tile's merges instead of all of them.  The results reach
// the other blocks through memory and a grid barrier (the caller's).
template <typename V, typename Load, typename Finish>
__device__ void merge_owned_splits(int features, int splits, int split, const V& identity, Load&& load,
                                   Finish&& finish, V* buffer) {
    const int owned = split < features ? (features - split + splits - 1) / splits : 0;
    if (owned == 0) return;
    merge_splits(
        owned, splits, identity,
        [&](int i, int s) { return i < owned ? load(split + i * splits, s) : identity; },
        [&](int i, const V& merged) {
            if (i < owned) finish(split + i * splits, merged);
        },
        buffer);
}

}  // namespace gpu
}  // namespace mbn
