// Per-feature batch-norm arithmetic, in double, apart from the loops that
// feed it: result blending and the coefficients the span/row kernels apply.
// Statistics and running averages follow common/numerics.hpp.
#pragma once

#include "common/numerics.hpp"
#include "cpu/span_kernels.hpp"

#include <cmath>
#include <cstdint>

namespace mbn::cpu {

// out = alpha * result + beta * prior, where the prior is not read when beta == 0.
inline double blend(double result, float alpha, float beta, double prior) {
    return beta != 0.0f ? alpha * result + beta * prior : alpha * result;
}

// y = alpha * (scale * (x - mean) * invstd + bias) (+ beta * prior, added by
// the kernel), as (x - mean_c) * k + b where mean_c is the mean rounded to C
// and b absorbs the rounding: b = alpha * bias - (mean - mean_c) * k.
template <typename C>
NormalizeCoefficients<C> normalize_coefficients(double mean, double invstd, double scale, double bias,
                                                float alpha) {
    const double k = alpha * scale * invstd;
    const C mean_c = static_cast<C>(mean);
    const double rest = mean - static_cast<double>(mean_c);
    // rest == 0 (the usual float case) must not turn an infinite k into NaN.
    return {mean_c, static_cast<C>(k), static_cast<C>(rest == 0.0 ? alpha * bias : alpha * bias - rest * k)};
}

// dx = alpha * scale * invstd / M * (M * dy - dbias - xhat * dscale), with
// xhat = (x - mean) * invstd, expanded into dy * k_dy + (x - mean) * k_x + k_0.
inline BackpropCoefficients backprop_coefficients(double mean, double invstd, double scale, double dbias,
                                                  double dscale, double count, float alpha) {
    const double g = alpha * scale * invstd;
    return {mean, g, -g * invstd * dscale / count, -g * dbias / count};
}

}  // namespace mbn::cpu
