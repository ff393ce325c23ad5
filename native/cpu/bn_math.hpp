// Per-feature batch-norm arithmetic, in double, apart from the loops that
// feed it: statistics from shifted sums, the running-average update, result
// blending, and the coefficients the span/row kernels apply.
#pragma once

#include "cpu/span_kernels.hpp"

#include <cmath>
#include <cstdint>

namespace mbn::cpu {

// Mean and biased variance of `count` values from their sums shifted by
// `center`: s1 = Σ(x - center), s2 = Σ(x - center)².  With the center a value
// of the feature (or its mean) the cancellation in s2/n - (s1/n)² is mild, and
// the sums are in double over float-or-narrower data; a constant feature
// gives its value as the mean exactly and a variance of exactly 0.
struct Statistics {
    double mean, variance;
};

inline Statistics shifted_statistics(double center, double s1, double s2, double count) {
    const double offset = s1 / count;
    const double variance = s2 / count - offset * offset;
    return {center + offset, variance < 0.0 ? 0.0 : variance};  // rounding below 0; NaN stays NaN
}

// The running-variance update uses the unbiased variance; with a single value
// per feature there is none, so the biased one (0) stands in.
inline double unbiased_variance(double biased, double count) {
    return count > 1.0 ? biased * (count / (count - 1.0)) : biased;
}

inline double running_update(double running, double batch, double factor) {
    return (1.0 - factor) * running + factor * batch;
}

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
