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

// The same in float with the hardware's approximate exponential and
// division, for finite z (the on-chip kernels, bound by instruction issue:
// two special-function operations instead of ~20 instructions).  exp is
// within 2 + 1.2 |x| ulp and the division within 2 ulp: a relative error
// below 1e-5 wherever the result is not negligible beside float32's
// tolerance.  Where exp overflows, or the divisor passes 2^126, the
// division gives 0: swish's limit there.
__device__ __forceinline__ float fast_swish(float z, float beta) {
    return __fdividef(z, 1.0f + __expf(-beta * z));
}

__device__ __forceinline__ float fast_swish_derivative(float z, float beta) {
    const float t = beta * z;
    const float s = __fdividef(1.0f, 1.0f + __expf(-t));
    return s + t * (s * (1.0f - s));
}

// Swish as normalize_share's epilogue (bn_block_phases.h).
template <typename A>
struct SwishEpilogue {
    A beta;
    __device__ __forceinline__ A operator()(A z) const { return swish(z, beta); }
};

}  // namespace gpu
}  // namespace mbn
