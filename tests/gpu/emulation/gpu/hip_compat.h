// Emulation stand-in for native/gpu/hip_compat.h (found first on the include
// path): the CUDA names the kernels use, mapped onto the fiber emulator
// (emulator.hpp).  Compiled by a host compiler as CUDA for sm_90.
#pragma once

#include <cuda_fp16.h>
#include <cuda_bf16.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <math.h>

#include "emulator.hpp"

#define MBN_GPU_CUDA 1
#define MBN_WAVE_SIZE EMU_WAVE_SIZE
#define MBN_EMULATION 1  // gn_cluster.h: no inline PTX
#define MBN_UNROLLED_EXIT break  // as nvcc's (native/gpu/hip_compat.h)
#define __CUDA_ARCH__ 900
using mbn_bfloat16 = __nv_bfloat16;

// CUDA's headers define these for a host compiler already (and dim3, and
// the runtime's enums and structs); the emulator wants them plain.
#undef __global__
#undef __device__
#undef __host__
#undef __forceinline__
#undef __shared__
#undef __launch_bounds__
#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __shared__
#define __launch_bounds__(...)
#define threadIdx (emu::thread_index)
#define blockIdx (emu::block_index)
#define blockDim (emu::block_dim)
#define gridDim (emu::grid_dim)

inline void __syncthreads() { emu::sync_block(); }
inline void __threadfence() {}
inline void __nanosleep(unsigned) {}
[[noreturn]] inline void __trap() { std::abort(); }
inline float __expf(float x) { return std::exp(x); }
// The device's double rsqrt is within 1 ulp of this.
inline double rsqrt(double x) { return 1.0 / std::sqrt(x); }
// rsqrtf: the device's is within 2 ulp of this.
inline float rsqrtf(float x) { return static_cast<float>(1.0 / std::sqrt(static_cast<double>(x))); }
// div.approx: a * (1 / b), which flushes to 0 for |b| beyond 2^126.
inline float __fdividef(float a, float b) { return std::fabs(b) > 0x1p126f ? a * 0.0f : a / b; }
inline int __popc(unsigned v) { return __builtin_popcount(v); }
inline int __ffs(int v) { return __builtin_ffs(v); }
// CUDA's device min and max of one type (std::min needs <algorithm> and its name).
inline int min(int a, int b) { return a < b ? a : b; }
inline int max(int a, int b) { return a < b ? b : a; }
inline unsigned min(unsigned a, unsigned b) { return a < b ? a : b; }
inline unsigned max(unsigned a, unsigned b) { return a < b ? b : a; }
inline long long min(long long a, long long b) { return a < b ? a : b; }
inline long long max(long long a, long long b) { return a < b ? b : a; }
inline float __uint_as_float(unsigned v) {
    float f;
    std::memcpy(&f, &v, 4);
    return f;
}
inline unsigned __float_as_uint(float f) {
    unsigned v;
    std::memcpy(&v, &f, 4);
    return v;
}
template <typename V>
inline V __shfl_xor_sync(unsigned mask, V value, int lane_mask) {
    if (mask != 0xffffffffu) std::abort();  // the kernels shuffle whole waves
    return emu::shuffle_xor(value, lane_mask);
}
template <typename V>
inline V __shfl_sync(unsigned mask, V value, int source) {
    if (mask != 0xffffffffu) std::abort();  // the kernels shuffle whole waves
    return emu::shuffle_from(value, source);
}
template <typename V>
inline V __shfl_down_sync(unsigned mask, V value, unsigned delta) {
    if (mask != 0xffffffffu) std::abort();  // the kernels shuffle whole waves
    return emu::shuffle_down(value, delta);
}
inline unsigned long long atomicAdd(unsigned long long* p, unsigned long long v) {
    const unsigned long long old = *p;
    *p += v;
    return old;
}
inline unsigned long long atomicExch(unsigned long long* p, unsigned long long v) {
    const unsigned long long old = *p;
    *p = v;
    return old;
}

// Runtime API: what the host code of the files under test names (CUDA's
// declarations, defined by emulator.cpp).
#define hipStream_t cudaStream_t
#define hipError_t cudaError_t
#define hipSuccess cudaSuccess
#define hipGetLastError cudaGetLastError
#define hipGetErrorString cudaGetErrorString
template <typename... Params>
inline cudaError_t cudaFuncGetAttributes(cudaFuncAttributes* attributes, void (*kernel)(Params...)) {
    return cudaFuncGetAttributes(attributes, reinterpret_cast<const void*>(kernel));
}
