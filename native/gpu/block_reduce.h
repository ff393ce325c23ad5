// Deterministic reductions over the threads of a wave and of a block: the
// "reduce per feature" half of the library's kernels, batch norm's and
// group norm's alike.  Every sum runs in a fixed order and without atomics,
// so the same inputs give the same bits on every run.
//
//   reduce_over_rows, reduce_team
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

// The value of the lane whose index differs from this one's by `mask`.
__device__ __forceinline__ double shuffle_xor(double value, int mask) {
#if MBN_GPU_CUDA
    return __shfl_xor_sync(wave_members(), value, mask);
#else
    return __shfl_xor(value, mask);
#endif
}
template <typename A>
__device__ __forceinline__ Total<A> shuffle_xor(const Total<A>& v, int mask) {
    return Total<A>{shuffle_xor(v.value, mask)};
}
template <typename A>
__device__ __forceinline__ Sums2<A> shuffle_xor(const Sums2<A>& v, int mask) {
    return Sums2<A>{shuffle_xor(v.a, mask), shuffle_xor(v.b, mask)};
}

// ---- merges over rows and teams ----------------------------------------------------

// Reduces `value` over the rows (threadIdx.y) of the block, separately for
// each column (threadIdx.x).  rows * columns == blockDim.x * blockDim.y and
// rows is a power of two.  The result is valid in row 0.  Every thread of the
// block must call it.
template <typename V>
__device__ V reduce_over_rows(V value, V* shared) {
    const int columns = blockDim.x;
    const int index = threadIdx.y * columns + threadIdx.x;
    shared[index] = value;
    __syncthreads();
    for (int half = blockDim.y / 2; half > 0; half /= 2) {
        if (static_cast<int>(threadIdx.y) < half) {
            value = merge(value, shared[index + half * columns]);
            shared[index] = value;
        }
        __syncthreads();
    }
    return value;
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
