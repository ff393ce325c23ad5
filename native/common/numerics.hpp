// Numeric rules that every backend follows, written once as inline
// functions the CPU backend and the GPU kernels both call, so that where a
// result is computed does not change how it is computed.  The loops that feed
// them differ: the CPU sums x - shift and (x - shift)² in double; the GPU
// keeps Welford moments per thread (M2 in float for float, half and bfloat16
// data) and merges them pairwise (gpu/norm_math.h).
#pragma once

#include "common/host_device.hpp"

#include <cmath>
#include <cstdint>

namespace mbn {

// ---- the shift ------------------------------------------------------------

// Deviations are taken from a shift, a value of the set being reduced: its
// first (reduction index 0 of the feature, or of the group).  A constant set
// then gives exactly 0 variance and its value as the mean, and a mean far
// from 0 (1e4 with a spread of 1e-2) keeps its digits in the deviations.
// `first` is that value as the data's compute type (float for half and
// bfloat16 data).
template <typename A>
MBN_HOST_DEVICE inline double statistics_shift(A first) {
    return static_cast<double>(first);
}

// ---- merging ----------------------------------------------------------------

// Count, mean and M2 (sum of squared deviations from the mean) of parts
// merged one after another by Chan et al.'s formula, in double: the
// split-phase merge of every rank's statistics.  The result depends on the
// order of the parts, not on how they are grouped.
struct MergedMoments {
    double count = 0.0, mean = 0.0, m2 = 0.0;

    MBN_HOST_DEVICE void add(double part_count, double part_mean, double part_m2) {
        if (part_count == 0.0) return;  // an empty part adds nothing, whatever its mean holds
        const double total = count + part_count, delta = part_mean - mean;
        mean += delta * (part_count / total);
        m2 += part_m2 + delta * delta * (count * part_count / total);
        count = total;
    }
};

// ---- finishing the statistics -----------------------------------------------------

// Mean and biased variance of `count` values from their sums shifted by
// `shift`: s1 = Σ(x - shift), s2 = Σ(x - shift)².  With the shift a value of
// the set the cancellation in s2/n - (s1/n)² is mild; the sums are in double.
struct Statistics {
    double mean, variance;
};
MBN_HOST_DEVICE inline Statistics shifted_statistics(double shift, double s1, double s2, double count) {
    const double offset = s1 / count;
    const double variance = s2 / count - offset * offset;
    return {shift + offset, variance < 0.0 ? 0.0 : variance};  // rounding below 0; NaN stays NaN
}

// The variance that normalizes is the biased one.
MBN_HOST_DEVICE inline double biased_variance(double m2, double count) { return m2 / count; }

// 1 / sqrt(variance + epsilon), NaN where that is negative (no fabs).
MBN_HOST_DEVICE inline double inverse_std(double variance, double epsilon) { return 1.0 / sqrt(variance + epsilon); }

// The running-variance update uses the unbiased variance; with a single value
// there is none, so the biased one (0) stands in.
// The kernels that finish on one thread take the factor from the host.
MBN_HOST_DEVICE inline double unbiased_ratio(double count) { return count > 1.0 ? count / (count - 1.0) : 1.0; }
MBN_HOST_DEVICE inline double unbiased_variance(double biased, double count) { return biased * unbiased_ratio(count); }

// running = (1 - factor) * running + factor * batch.
MBN_HOST_DEVICE inline double running_update(double running, double batch, double factor) {
    return (1.0 - factor) * running + factor * batch;
}

// ---- when float is enough -----------------------------------------------------

// Backward computes dx in float (for float, half and bfloat16 data) when
// every feature reduces over at least this many values, else in double.
// dx = dy*k_dy + (x - mean)*k_x + k_0 has terms that cancel when M is tiny
// (with M = 2 the exact dx is 0), below float's rounding of them; from a few
// hundred values on they no longer do, and float halves the conversions and
// vector work per value.  The gradient sums stay in double throughout:
// summed in float they drift by ~5e-4 at M = 2^18, past the 1e-4 floor of
// the reduction tolerance.
constexpr std::int64_t kFloatBackpropMinCount = 256;

MBN_HOST_DEVICE constexpr bool float_backprop_enough(std::int64_t count) { return count >= kFloatBackpropMinCount; }

}  // namespace mbn
