// Reading and writing the (N, G) mean / rstd tensors, float or double.
#pragma once

#include "gpu/gn_layout.hpp"
#include "gpu/hip_compat.h"

#include <cstdint>

namespace mbn {
namespace gpu {

__device__ __forceinline__ std::int64_t stat_offset(const GnStatTensor& t, std::int64_t n, std::int64_t g) {
    return n * t.stride_n + g * t.stride_g;
}

__device__ __forceinline__ double read_stat(const GnStatTensor& t, std::int64_t n, std::int64_t g) {
    const std::int64_t at = stat_offset(t, n, g);
    return t.wide ? static_cast<const double*>(t.data)[at] : static_cast<double>(static_cast<const float*>(t.data)[at]);
}

// Does nothing for an absent tensor.
__device__ __forceinline__ void write_stat(const GnStatTensor& t, std::int64_t n, std::int64_t g, double value) {
    if (t.data == nullptr) return;
    const std::int64_t at = stat_offset(t, n, g);
    if (t.wide)
        static_cast<double*>(t.data)[at] = value;
    else
        static_cast<float*>(t.data)[at] = static_cast<float>(value);
}

}  // namespace gpu
}  // namespace mbn
