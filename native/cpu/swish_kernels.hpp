// Group norm's fused activation on contiguous values of the compute type C:
// swish(v) = v / (1 + exp(-beta * v)), computed in C (float for
// float32/float16/bfloat16 data, double for float64).
//
// Where the formula gives inf/inf or 0 * inf, the values are its limits:
// swish is 0 where exp(-beta * v) overflows (v -> -inf for beta > 0, so
// swish(-inf) = 0 and very negative v give 0, never NaN), swish(+inf) = +inf
// for beta > 0, and beta = 0 gives v / 2 for every v, infinities included.
// The derivative swish'(v) = s * (1 + t * (1 - s)) with t = beta * v,
// s = 1 / (1 + exp(-t)) is 0 where exp(-t) overflows and 1 at t = +inf.
// NaN stays NaN.
#pragma once

#include "cpu/span_kernels.hpp"

#include <cstdint>

namespace mbn::cpu {

#define MBN_DECLARE_SWISH_KERNELS(C)                                                                  \
    /* values[i] = swish(values[i]) */                                                                \
    void span_swish(C* values, std::int64_t n, C beta);                                               \
    /* g[i] = dy[i] * swish'(z[i]), z[i] = (x[i] - z.mean) * z.k + z.b: one feature */                \
    void span_swish_gradient(const C* x, const C* dy, C* g, std::int64_t n, NormalizeCoefficients<C> z, \
                             C beta);                                                                 \
    /* the same along a row of features, z.mean[i] etc. per value */                                 \
    void row_swish_gradient(const C* x, const C* dy, C* g, std::int64_t n, NormalizeRowCoefficients<C> z, \
                            C beta);

MBN_DECLARE_SWISH_KERNELS(float)
MBN_DECLARE_SWISH_KERNELS(double)
#undef MBN_DECLARE_SWISH_KERNELS

}  // namespace mbn::cpu
