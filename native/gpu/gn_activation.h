// The activation group norm can fuse into its output, swish(z) =
// z / (1 + exp(-beta z)) (SiLU at beta = 1), and its derivative, computed in
// the accumulation type (float, or double for double data).
//
// Both stay finite-or-exact at the extremes: exp overflows to inf where
// beta z is very negative, and the naive forms would then give
// -inf / inf or inf * 0, which are NaN.
#pragma once

#include "gpu/hip_compat.h"

namespace mbn {
namespace gpu {

// beta = 0 is z / 2 exactly, also for infinite z (0 * inf would be NaN).
template <typename A>
__device__ __forceinline__ A scaled_input(A beta, A z) {
    return beta == A(0) ? A(0) : beta * z;
}

template <typename A>
__device__ __forceinline__ A swish(A z, A beta) {
    const A e = exp(-scaled_input(beta, z));
    // e = inf: z * sigmoid(beta z) tends to a zero of z's sign.
    return isinf(e) ? copysign(A(0), z) : z / (A(1) + e);
}

// d swish / dz = s + beta z * s (1 - s), s = sigmoid(beta z).
template <typename A>
__device__ __forceinline__ A swish_derivative(A z, A beta) {
    const A t = scaled_input(beta, z);
    const A s = A(1) / (A(1) + exp(-t));  // 0 or 1 at the extremes
    const A slope = s * (A(1) - s);
    // slope = 0 only where s saturated; t may be infinite there.
    return slope == A(0) ? s : s + t * slope;
}

// 2^v and 1/v on the special-function unit.  On NVIDIA with denormals
// flushed: the non-flushing forms (what __expf and __fdividef compile to
// without -ftz) test and rescale their operand around every such operation,
// which the on-chip kernels, bound by instruction issue, pay per element.
// Flushing loses nothing here: swish's divisor is at least 1, and a flushed
// exponential only gives 1 + e = 1 a little earlier.
__device__ __forceinline__ float approx_exp2(float v) {
#if MBN_GPU_CUDA && !defined(MBN_EMULATION)
    float r;
    asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(v));
    return r;
#else
    return __expf(v * 0.69314718055994531f);
#endif
}

__device__ __forceinline__ float approx_reciprocal(float v) {
#if MBN_GPU_CUDA && !defined(MBN_EMULATION)
    float r;
    asm("rcp.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(v));
    return r;
#else
    return __fdividef(1.0f, v);
#endif
}

// log2(e): exp(-beta z) = 2^(z * (-beta log2(e))).
constexpr float kLog2E = 1.44269504088896341f;

// The exponent scale of fast_swish for a given beta (computed once per
// kernel, not per element).
__device__ __forceinline__ float swish_exponent_scale(float beta) { return -beta * kLog2E; }

// Swish in float with the approximate exponential and reciprocal, for
// finite z (the on-chip kernels): two special-function operations instead
// of ~20 instructions.  ex2.approx is within 2 ulp + 1.2 |v| ulp and the
// reciprocal within 1 ulp: a relative error below 1e-5 wherever the result
// is not negligible beside float32's tolerance.  Where the exponential
// overflows the reciprocal gives 0: swish's limit there.  `scale` is
// swish_exponent_scale(beta).
__device__ __forceinline__ float fast_swish(float z, float scale) {
    return z * approx_reciprocal(1.0f + approx_exp2(z * scale));
}

__device__ __forceinline__ float fast_swish_derivative(float z, float beta, float scale) {
    const float s = approx_reciprocal(1.0f + approx_exp2(z * scale));
    return s + (beta * z) * (s * (1.0f - s));
}

// tanh(v) on the special-function unit: one operation, within 2^-10.987
// relative (PTX ISA, sm_75 and later).
__device__ __forceinline__ float approx_tanh(float v) {
#if MBN_GPU_CUDA && !defined(MBN_EMULATION)
    float r;
    asm("tanh.approx.f32 %0, %1;" : "=f"(r) : "f"(v));
    return r;
#else
    return tanhf(v);
#endif
}

// 1/v for 1 <= v (an overflowed exponential included) on the FMA pipe: a
// seed from v's bits, within 5.1%, and Newton steps that each square the
// error: two reach 6.6e-6 (16-bit results), three float32's own rounding.
template <int kSteps>
__device__ __forceinline__ float fma_reciprocal(float v) {
    const float finite = fminf(v, 0x1p100f);  // the seed needs finite bits
    float r = __uint_as_float(0x7EF311C3u - __float_as_uint(finite));
#pragma unroll
    for (int i = 0; i < kSteps; ++i) r = fmaf(r, fmaf(-finite, r, 1.0f), r);
    return r;
}

// Whether swish for results of T takes the tanh form: 16-bit results on
// NVIDIA (AMD has no one-operation tanh; float32 results need more than
// its 2^-11).  The forward only: near saturation tanh.approx errs by up to
// 5.5% of 1 - |tanh|, which the derivative's s (1 - s) carries into g
// (1.4e-3 relative RMS over z in [-9, -0.5]; bench/RESULTS.md, forty-fifth
// session).
template <typename T>
constexpr bool kTanhSwish = MBN_GPU_CUDA && sizeof(T) == 2;

// swish's constants for results of T, computed once per kernel: the
// exponent scale of the exponential form (swish_exponent_scale), or beta / 2
// for the tanh form.
template <typename T>
__device__ __forceinline__ float swish_lane_constant(float beta) {
    return kTanhSwish<T> ? 0.5f * beta : swish_exponent_scale(beta);
}

// Swish for lane `lane` of a vector of T; `constant` is
// swish_lane_constant<T>(beta).
// - 16-bit results on NVIDIA: z sigmoid(beta z) = z/2 + z/2 tanh(beta z / 2),
//   one special-function operation and three on the FMA pipe instead of two
//   and about eight: forward + swish 1.05x-1.08x on the >= 64 MB rows (H200,
//   bench/RESULTS.md, forty-fifth session).  On the device its results,
//   rounded to 16 bits, err no more than the exponential form's (at most
//   0.24 of the tolerance for z in [-40, 40]); test_swish_over_its_range
//   (tests/gpu/test_gpu_groupnorm.py) checks every forward kernel.
// - Otherwise the exponential form, the odd lanes' reciprocal on the FMA
//   pipe: with every reciprocal and exponential on the special-function unit
//   (16 results a clock per multiprocessor), a vector's swish waits on that
//   unit.  Odd lanes only: 1.019x over 66 forward + swish rows of the
//   persistent, tile and slices kernels (H200, mid and small rows
//   1.01x-1.05x); all lanes 1.003x, three of four 1.015x (bench/RESULTS.md,
//   forty-first session).
template <typename T>
__device__ __forceinline__ float fast_swish_lane(float z, float constant, int lane) {
    if constexpr (kTanhSwish<T>) {
        const float half = 0.5f * z;
        return fmaf(half, approx_tanh(constant * z), half);
    } else {
        const float d = 1.0f + approx_exp2(z * constant);
        return z * (lane % 2 == 1 ? fma_reciprocal<sizeof(T) == 2 ? 2 : 3>(d) : approx_reciprocal(d));
    }
}

// Swish in the accumulation type A: on the special-function unit in float
// (as the on-chip kernels), exact in double.
__device__ __forceinline__ float swish_of(float z, float beta) { return fast_swish(z, swish_exponent_scale(beta)); }
__device__ __forceinline__ double swish_of(double z, double beta) { return swish(z, beta); }

// swish_of for lane `lane` of a vector of T (fast_swish_lane in float).
template <typename T>
__device__ __forceinline__ float swish_of_lane(float z, float beta, int lane) {
    return fast_swish_lane<T>(z, swish_lane_constant<T>(beta), lane);
}
template <typename T>
__device__ __forceinline__ double swish_of_lane(double z, double beta, int) {
    return swish(z, beta);
}

// Swish as normalize_share's epilogue (feature_phases.h).
template <typename A>
struct SwishEpilogue {
    A beta;
    __device__ __forceinline__ A operator()(A z) const { return swish_of(z, beta); }
};

}  // namespace gpu
}  // namespace mbn
