// Per-feature batch-norm arithmetic, in double, apart from the loops that
// feed it: merging partial statistics, and turning statistics and
// parameters into the coefficients the span/row kernels apply.
#pragma once

#include "cpu/span_kernels.hpp"

#include <cmath>
#include <cstdint>

namespace mbn::cpu {

// Count, mean and sum of squared deviations of a set of values.
struct Moments {
    double count = 0.0;
    double mean = 0.0;
    double m2 = 0.0;

    // Chan et al.'s pairwise combination: stable for any sizes and means,
    // and exact when both means are equal (a constant feature stays constant).
    void merge(double n, double mean_b, double m2_b) {
        if (n == 0.0) return;
        const double total = count + n;
        const double delta = mean_b - mean;
        mean += delta * (n / total);
        m2 += m2_b + delta * delta * (count * n / total);
        count = total;
    }
    void merge_first(double n, double mean_b, double m2_b) {
        count = n;
        mean = mean_b;
        m2 = m2_b;
    }
    double biased_variance() const { return m2 / count; }
};

inline double inverse_std(double variance, double epsilon) { return 1.0 / std::sqrt(variance + epsilon); }

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

// y = alpha * (scale * (x - mean) * invstd + bias) (+ beta * prior, added by the kernel).
template <typename C>
NormalizeCoefficients<C> normalize_coefficients(double mean, double invstd, double scale, double bias,
                                                float alpha) {
    NormalizeCoefficients<C> k;
    k.mean_hi = static_cast<C>(mean);
    k.mean_lo = static_cast<C>(mean - static_cast<double>(k.mean_hi));
    k.k = static_cast<C>(alpha * scale * invstd);
    k.b = static_cast<C>(alpha * bias);
    return k;
}

// dx = alpha * scale * invstd / M * (M * dy - dbias - xhat * dscale), with
// xhat = (x - mean) * invstd, expanded into dy * k_dy + (x - mean) * k_x + k_0.
template <typename C>
BackpropCoefficients<C> backprop_coefficients(double mean, double invstd, double scale, double dbias,
                                              double dscale, double count, float alpha) {
    const double g = alpha * scale * invstd;
    BackpropCoefficients<C> k;
    k.mean_hi = static_cast<C>(mean);
    k.mean_lo = static_cast<C>(mean - static_cast<double>(k.mean_hi));
    k.k_dy = static_cast<C>(g);
    k.k_x = static_cast<C>(-g * invstd * dscale / count);
    k.k_0 = static_cast<C>(-g * dbias / count);
    return k;
}

}  // namespace mbn::cpu
