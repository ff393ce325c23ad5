// Device-side addressing over the loop nests of feature_layout.hpp: the offset of
// a feature in a tensor, and the cursors that walk a thread's reduction
// indices (r, r + step, r + 2 step, ...): NestCursor updates its digits by
// carries instead of dividing for every element, LinearCursor (nests of rank
// at most 1, the packed layouts) moves each offset by one add.
#pragma once

#include "gpu/feature_layout.hpp"
#include "gpu/hip_compat.h"

#include <cstdint>
#include <type_traits>

namespace mbn {
namespace gpu {

// index / len and index % len: through 32-bit division when both fit (the
// common case; 64-bit division is a long instruction sequence on GPUs).
__device__ __forceinline__ void divide(std::int64_t index, std::int64_t len, std::int64_t& quotient,
                                       std::int64_t& remainder) {
    if (((static_cast<std::uint64_t>(index) | static_cast<std::uint64_t>(len)) >> 32) == 0) {
        const unsigned int q = static_cast<unsigned int>(index) / static_cast<unsigned int>(len);
        quotient = q;
        remainder = index - static_cast<std::int64_t>(q) * len;
    } else {
        quotient = index / len;
        remainder = index - quotient * len;
    }
}

// Offsets of nest index `index` in the slots first..first+count-1.
template <int Count>
__device__ __forceinline__ void nest_offsets(const LoopNest& nest, std::int64_t index, int first,
                                             std::int64_t (&offset)[Count]) {
#pragma unroll
    for (int t = 0; t < Count; ++t) offset[t] = 0;
    for (int i = kNestRank - 1; i >= kNestRank - nest.rank; --i) {
        std::int64_t digit;
        divide(index, nest.len[i], index, digit);
#pragma unroll
        for (int t = 0; t < Count; ++t) offset[t] += digit * nest.stride[first + t][i];
    }
}

__device__ __forceinline__ std::int64_t nest_offset(const LoopNest& nest, std::int64_t index, int slot) {
    std::int64_t offset[1];
    nest_offsets<1>(nest, index, slot, offset);
    return offset[0];
}

// Walks the reduction nest for slots 0..Slots-1 (x, then y/dy, then dx).
// Rank is the number of innermost nest dimensions it handles (the nest's rank
// must not exceed it); base[t] is the feature's offset in slot t.
template <int Rank, int Slots>
struct NestCursor {
    std::int64_t digit[Rank];
    std::int64_t step[Rank];
    std::int64_t base[Slots];
    std::int64_t offset[Slots];

    __device__ __forceinline__ void start(const LoopNest& nest, std::int64_t index, std::int64_t stride,
                                          const std::int64_t (&feature_base)[Slots]) {
#pragma unroll
        for (int i = Rank - 1; i >= 0; --i) {
            const std::int64_t len = nest.len[kNestRank - Rank + i];
            divide(index, len, index, digit[i]);
            divide(stride, len, stride, step[i]);
        }
#pragma unroll
        for (int t = 0; t < Slots; ++t) base[t] = feature_base[t];
        refresh(nest);
    }

    __device__ __forceinline__ void refresh(const LoopNest& nest) {
#pragma unroll
        for (int t = 0; t < Slots; ++t) {
            std::int64_t o = base[t];
#pragma unroll
            for (int i = 0; i < Rank; ++i) o += digit[i] * nest.stride[t][kNestRank - Rank + i];
            offset[t] = o;
        }
    }

    // index += stride.  Digits stay exact while the index is below the nest's
    // size; past it they are never used.
    __device__ __forceinline__ void advance(const LoopNest& nest) {
        std::int64_t carry = 0;
#pragma unroll
        for (int i = Rank - 1; i >= 0; --i) {
            const std::int64_t len = nest.len[kNestRank - Rank + i];
            const std::int64_t d = digit[i] + step[i] + carry;
            carry = d >= len ? 1 : 0;
            digit[i] = carry ? d - len : d;
        }
        refresh(nest);
    }
};

// The walk of a reduction nest of rank at most 1: each slot's offset moves
// by a fixed delta per step, one add a slot instead of NestCursor's carries
// and 64-bit multiplies (same interface).
template <int Slots>
struct LinearCursor {
    std::int64_t offset[Slots];
    std::int64_t delta[Slots];

    __device__ __forceinline__ void start(const LoopNest& nest, std::int64_t index, std::int64_t stride,
                                          const std::int64_t (&feature_base)[Slots]) {
#pragma unroll
        for (int t = 0; t < Slots; ++t) {
            const std::int64_t s = nest.stride[t][kNestRank - 1];
            offset[t] = feature_base[t] + index * s;
            delta[t] = stride * s;
        }
    }
    __device__ __forceinline__ void advance(const LoopNest&) {
#pragma unroll
        for (int t = 0; t < Slots; ++t) offset[t] += delta[t];
    }
};

// The cursor of a kernel instance of cursor rank Rank: 1 is the linear walk,
// which with_linear_walk_shape (type_dispatch.hpp) picks for reduction nests
// of rank <= 1; 2 and 4 the nest cursor.
template <int Rank, int Slots>
using ReduceCursor = typename std::conditional<Rank == 1, LinearCursor<Slots>, NestCursor<Rank, Slots>>::type;

// Blocks of 256 threads a multiprocessor a kernel instance of cursor rank
// Rank, computing in A, asks the compiler for (its __launch_bounds__): three
// on the linear walk in float (80 registers), where 64 bytes of loads in
// flight and several features a thread took 88-108, two blocks.  0 (no
// minimum) elsewhere: the double walks and the nest cursors keep the
// registers ptxas gives them without a minimum (an explicit 1 or 2 gave the
// group-norm backward's 5-15 more, some a block less a multiprocessor).
template <typename A, int Rank>
__host__ __device__ constexpr int linear_walk_min_blocks() {
    return Rank == 1 && sizeof(A) <= 4 ? 3 : 0;
}

// Positions of V elements of T a thread of a linear walk loads before its
// math, about `bytes` of each input: at most 8, at least (and a multiple of)
// `batch`, the positions its math takes at once.  Elements wider than 4
// bytes (double) load one batch.  (Two 8-byte loads a thread in flight, two
// blocks a multiprocessor, kept the group-norm slices at 29-36% of the
// H200's DRAM bandwidth.)
template <typename T, int V, int bytes, int batch>
__host__ __device__ constexpr int linear_load_positions() {
    constexpr int wanted = sizeof(T) <= 4 ? bytes / (V * static_cast<int>(sizeof(T))) : 0;
    constexpr int most = wanted < 8 ? wanted : 8;
    constexpr int positions = most > batch ? most : batch;
    static_assert(positions % batch == 0, "whole batches");
    return positions;
}

}  // namespace gpu
}  // namespace mbn
