// Deterministic reductions over the threads of a wave and of a block: the
// "reduce per feature" half of the library's kernels, batch norm's and
// group norm's alike.  Every sum runs in a fixed order and without atomics,
// so the same inputs give the same bits on every run.
//
//   wave_sum      K values per thread summed over a wave by butterfly
//                 shuffles, starting at a lane stride so that lanes holding
//                 different features stay apart (any wave size).
//   BlockReduce   the waves' sums, one row a wave, in a shared Storage the
//                 caller declares (as a __shared__ variable or a member of
//                 its own shared struct, reusable after a barrier) and
//                 added in wave order.
//   reduce_each_over_rows, reduce_over_rows, reduce_team
//                 a merge (sum, or moments) over the rows of a 2-D block, or
//                 over a team of consecutive threads.
#pragma once

#include "gpu/hip_compat.h"

namespace mbn {
namespace gpu {

// ---- values merged by addition ------------------------------------------------

// A plain sum, merged by addition.
template <typename A>
struct Total {
    A value;
};
template <typename A>
__device__ __forceinline__ Total<A> merge(const Total<A>& x, const Total<A>& y) {
    return Total<A>{x.value + y.value};
}

template <typename A>
struct Sums2 {
    A a;
    A b;
};
template <typename A>
__device__ __forceinline__ Sums2<A> merge(const Sums2<A>& x, const Sums2<A>& y) {
    return Sums2<A>{x.a + y.a, x.b + y.b};
}
template <typename A>
__device__ __forceinline__ Sums2<A> operator+(const Sums2<A>& x, const Sums2<A>& y) {
    return Sums2<A>{x.a + y.a, x.b + y.b};
}

// ---- lanes and shuffles ----------------------------------------------------------

// The block's threads numbered x fastest, as waves are formed.
__device__ __forceinline__ int flat_thread_index() {
    return static_cast<int>((threadIdx.z * blockDim.y + threadIdx.y) * blockDim.x + threadIdx.x);
}

#if MBN_GPU_CUDA
// The lanes of this warp that exist: a block smaller than a warp, or the
// tail of one, leaves the upper lanes empty (a shuffle must not name them).
__device__ __forceinline__ unsigned wave_members() {
    const int threads = static_cast<int>(blockDim.x * blockDim.y * blockDim.z);
    const int present = threads - flat_thread_index() / MBN_WAVE_SIZE * MBN_WAVE_SIZE;
    return present >= MBN_WAVE_SIZE ? 0xffffffffu : (1u << present) - 1u;
}
#endif

// Across the whole wave, for blocks of whole waves only (the on-chip
// group-norm kernels): with the constant mask nvcc drops the convergence
// check (a lane-mask match and a divergent fallback) that a computed mask
// takes before each chain.
//   shuffle_xor_wave: the value of the lane whose index differs by `mask`;
//   shuffle_from_wave: the value of a given lane;
//   shuffle_down: the value of the lane `delta` above this one, or past
//     the wave's last lane this lane's own.
template <typename V>
__device__ __forceinline__ V shuffle_xor_wave(V value, int mask) {
#if MBN_GPU_CUDA
    return __shfl_xor_sync(0xffffffffu, value, mask);
#else
    return __shfl_xor(value, mask);
#endif
}
// The value of lane `source` of this wave (whole waves only, as above).
template <typename V>
__device__ __forceinline__ V shuffle_from_wave(V value, int source) {
#if MBN_GPU_CUDA
    return __shfl_sync(0xffffffffu, value, source);
#else
    return __shfl(value, source);
#endif
}
__device__ __forceinline__ double shuffle_down(double value, int delta) {
#if MBN_GPU_CUDA
    return __shfl_down_sync(0xffffffffu, value, static_cast<unsigned>(delta));
#else
    return __shfl_down(value, static_cast<unsigned>(delta));
#endif
}

// The value of the lane whose index differs from this one's by `mask`.
// Doubles name the lanes present (wave_members); floats name the whole
// wave: only kernels whose blocks are whole waves (the on-chip group-norm
// kernels) shuffle floats.
__device__ __forceinline__ double shuffle_xor(double value, int mask) {
#if MBN_GPU_CUDA
    return __shfl_xor_sync(wave_members(), value, mask);
#else
    return __shfl_xor(value, mask);
#endif
}
__device__ __forceinline__ float shuffle_xor(float value, int mask) { return shuffle_xor_wave(value, mask); }
template <typename A>
__device__ __forceinline__ Total<A> shuffle_xor(const Total<A>& v, int mask) {
    return Total<A>{shuffle_xor(v.value, mask)};
}
template <typename A>
__device__ __forceinline__ Sums2<A> shuffle_xor(const Sums2<A>& v, int mask) {
    return Sums2<A>{shuffle_xor(v.a, mask), shuffle_xor(v.b, mask)};
}

// ---- wave sums -------------------------------------------------------------------

// value += the value of lane ^ mask, for a value or each element of an
// array (of arrays) of them.
template <typename V>
__device__ __forceinline__ void shuffle_add(V& value, int mask) {
    value = value + shuffle_xor(value, mask);
}
template <typename V, int N>
__device__ __forceinline__ void shuffle_add(V (&values)[N], int mask) {
#pragma unroll
    for (int i = 0; i < N; ++i) shuffle_add(values[i], mask);
}

// The same for several values, in the order given; several arrays of one
// length go element by element (element i of each, then element i + 1).
template <typename... Values>
__device__ __forceinline__ void shuffle_add_all(int mask, Values&... values) {
    (shuffle_add(values, mask), ...);
}
template <typename... V, int N>
__device__ __forceinline__ void shuffle_add_all(int mask, V (&... arrays)[N]) {
#pragma unroll
    for (int i = 0; i < N; ++i) (shuffle_add(arrays[i], mask), ...);
}

// Sums each of the values given (scalars, structs with + and shuffle_xor,
// or arrays of them) over the lanes l ^ m for m = first, 2 first, ... below
// `end` and the wave size (first and end powers of two).  Lanes that differ
// by less than `first` -- a lane stride: the lanes holding different
// features -- stay apart; every lane of a butterfly gets the same bits
// (IEEE addition commutes).  The level loop runs once for all the values.
template <typename... Values>
__device__ __forceinline__ void wave_sum(int first, int end, Values&... values) {
    for (int mask = first; mask < end && mask < MBN_WAVE_SIZE; mask *= 2) shuffle_add_all(mask, values...);
}

// ---- block sums through shared storage --------------------------------------------

// The sums of a block over its waves, per entry: each wave writes its sums
// into its row of the Storage (part[wave][entry]: bn_nhwc_columns.hip, from
// the threads its scatter left holding each slot), and after a barrier
// totals() adds the rows in wave order.
template <typename V, int Waves, int Entries>
struct BlockReduce {
    // The caller's shared memory for one reduction; it may be reused once a
    // barrier follows the last totals() reading it.
    struct Storage {
        V part[Waves][Entries];
    };

    // Entries entry .. entry + N - 1 summed over waves 0 .. waves - 1, in
    // wave order (after the barrier that follows the stores).
    template <int N>
    __device__ static __forceinline__ void totals(const Storage& s, int entry, int waves, V (&out)[N]) {
#pragma unroll
        for (int n = 0; n < N; ++n) out[n] = V(0);
        for (int w = 0; w < waves; ++w)
#pragma unroll
            for (int n = 0; n < N; ++n) out[n] += s.part[w][entry + n];
    }
};

// ---- merges over rows and teams ----------------------------------------------------

// Reduces each of a thread's N values over the rows (threadIdx.y) of the
// block, separately for each column (threadIdx.x) and each j < N.  rows *
// columns == blockDim.x * blockDim.y and rows is a power of two.  Value j of
// every thread sits at shared[j * stride + thread] (stride >= the block's
// threads where N > 1), so one barrier a level serves all N.  The results
// are valid in row 0.  Every thread of the block must call it.
template <typename V, int N>
__device__ __forceinline__ void reduce_each_over_rows(V (&values)[N], V* shared, int stride) {
    const int columns = blockDim.x;
    const int index = threadIdx.y * columns + threadIdx.x;
#pragma unroll
    for (int j = 0; j < N; ++j) shared[j * stride + index] = values[j];
    __syncthreads();
    for (int half = blockDim.y / 2; half > 0; half /= 2) {
        if (static_cast<int>(threadIdx.y) < half) {
#pragma unroll
            for (int j = 0; j < N; ++j) {
                values[j] = merge(values[j], shared[j * stride + index + half * columns]);
                shared[j * stride + index] = values[j];
            }
        }
        __syncthreads();
    }
}

// reduce_each_over_rows for one value.
template <typename V>
__device__ V reduce_over_rows(V value, V* shared) {
    V values[1] = {value};
    reduce_each_over_rows(values, shared, 0);
    return values[0];
}

// Merges `value` over a team: team_threads consecutive threads (flat
// numbering), a power of two; teams wider than a wave span whole waves and
// then every thread of the block must call.  Every thread of the team gets
// the same bits: partners always merge (lower lane, upper lane) in that
// order, and the waves of a team are merged in wave order.  `wave_totals`
// is shared memory for one value per wave of the block.
template <typename V>
__device__ V reduce_team(V value, int team_threads, V* wave_totals) {
    const int flat = flat_thread_index();
    const int lanes = team_threads < MBN_WAVE_SIZE ? team_threads : MBN_WAVE_SIZE;
    for (int mask = 1; mask < lanes; mask *= 2) {
        const V other = shuffle_xor(value, mask);
        value = (flat & mask) != 0 ? merge(other, value) : merge(value, other);
    }
    if (team_threads <= MBN_WAVE_SIZE) return value;
    const int wave = flat / MBN_WAVE_SIZE;
    if (flat % MBN_WAVE_SIZE == 0) wave_totals[wave] = value;
    __syncthreads();
    const int waves = team_threads / MBN_WAVE_SIZE;
    const int first = wave / waves * waves;
    V total = wave_totals[first];
    for (int w = 1; w < waves; ++w) total = merge(total, wave_totals[first + w]);
    __syncthreads();  // wave_totals may be reused at once
    return total;
}

}  // namespace gpu
}  // namespace mbn
