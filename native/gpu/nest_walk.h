// Device-side addressing over the loop nests of feature_layout.hpp: the offset of
// a feature in a tensor, and a cursor that walks a thread's reduction indices
// (r, r + step, r + 2 step, ...) updating its digits by carries instead of
// dividing for every element.
#pragma once

#include "gpu/feature_layout.hpp"
#include "gpu/hip_compat.h"

#include <cstdint>

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

}  // namespace gpu
}  // namespace mbn
