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

// Swish as normalize_share's epilogue (bn_block_phases.h).
template <typename A>
struct SwishEpilogue {
    A beta;
    __device__ __forceinline__ A operator()(A z) const { return swish(z, beta); }
};

}  // namespace gpu
}  // namespace mbn
