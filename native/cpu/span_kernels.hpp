// The innermost loops of the CPU batch norm, over contiguous values of the
// compute type C (float for float32/float16/bfloat16 data, double for
// float64).  Each is built for x86-64-v3 and for baseline x86-64, picked at
// load time (vector_clones.hpp).
//
// Three shapes of the same loops:
//   span_*      one feature's run: scalar coefficients;
//   row_*       rows of consecutive features: per-feature arrays indexed
//               like a row (accumulators included);
//   segments_*  `count` features whose runs of `len` values lie back to
//               back (packed NCHW with small D*H*W): one call for all.
//
// Statistics are sums in double of values shifted by a per-feature center c
// (a value of the feature, or its known mean): s1 = Σ(x - c),
// s2 = Σ(x - c)², sdy = Σdy, dot = Σdy·(x - c).  Shifting keeps the sums
// small and exact for a constant feature (s1 = s2 = 0).
// span_* and row_* add onto their accumulators; segments_* store feature i's
// sums at [i * stride].
//
// y is computed as (x - mean) * k + b with `mean` the feature's mean rounded
// to C and b carrying the rest of the exact mean (bn_math.hpp): x - mean is
// exact for x near the mean (so accurate even when the mean dwarfs the
// spread) and exactly 0 for a constant feature, whose y is then b exactly.
// dx is computed in double whatever C: with few values per feature its
// three terms nearly cancel (with M = 2 the exact dx is 0).  row_backprop
// also comes in float for float C, which the caller picks where every
// feature reduces over many values (walk_passes.hpp, backprop_in_float); its
// mean is rounded to float with the rest folded into k_0, as y's.
// In-place use (out == x, dx == dy or dx == x) is allowed: every element is
// read before it is written.  Output options (OutputMode): with `blend`,
// out = result + beta * out's prior content (alpha is folded into the
// coefficients); with `stream`, the whole cache lines of the output bypass
// the cache (for passes whose data outgrow the last-level cache, where the
// lines would be evicted before anyone read them, and reading them in first
// only costs bandwidth).
#pragma once

#include <cstdint>

namespace mbn::cpu {

template <typename C>
struct NormalizeCoefficients {
    C mean, k, b;
};
template <typename C>
struct NormalizeRowCoefficients {
    const C *mean, *k, *b;
};

// dx = dy*k_dy + (x - mean)*k_x + k_0, in double; per-feature arrays in
// the arithmetic type A (double, or float for row_backprop's float form).
struct BackpropCoefficients {
    double mean, k_dy, k_x, k_0;
};
template <typename A>
struct BackpropRowCoefficients {
    const A *mean, *k_dy, *k_x, *k_0;
};

template <typename C>
struct OutputMode {
    bool blend;
    bool stream;
    C beta;
};

// `rows` rows of a tensor for row_* kernels: row r starts at data + r * stride.
// The sum kernels take rows a few at a time per vector of features, so that
// accumulators are loaded once for several rows.
template <typename C>
struct RowSpan {
    C* data;
    std::int64_t stride;
};

// Statistics accumulators of one feature, or arrays of them.
struct MomentSums {
    double *s1, *s2;
};
// sdy/dot always; s1/s2 when the statistics are recomputed (else null).
struct GradientSums {
    double *sdy, *dot, *s1, *s2;
};

#define MBN_DECLARE_SPAN_KERNELS(C)                                                                       \
    void span_moments(const C* x, std::int64_t n, double center, MomentSums out);                         \
    void span_gradient(const C* x, const C* dy, std::int64_t n, double center, GradientSums out);         \
    void span_normalize(const C* x, C* out, std::int64_t n, NormalizeCoefficients<C> k,                   \
                        OutputMode<C> mode);                                                              \
    void span_backprop(const C* x, const C* dy, C* dx, std::int64_t n, BackpropCoefficients k,            \
                       OutputMode<C> mode);                                                               \
    void row_moments(RowSpan<const C> x, std::int64_t rows, const double* center, std::int64_t n,        \
                     MomentSums out);                                                                     \
    void row_gradient(RowSpan<const C> x, RowSpan<const C> dy, std::int64_t rows, const double* center,   \
                      std::int64_t n, GradientSums out);                                                  \
    void row_normalize(RowSpan<const C> x, RowSpan<C> out, std::int64_t rows, std::int64_t n,             \
                       NormalizeRowCoefficients<C> k, OutputMode<C> mode);                                \
    void row_backprop(RowSpan<const C> x, RowSpan<const C> dy, RowSpan<C> dx, std::int64_t rows,          \
                      std::int64_t n, BackpropRowCoefficients<double> k, OutputMode<C> mode);             \
    void segments_moments(const C* x, std::int64_t len, std::int64_t count, const double* center,         \
                          MomentSums out, std::int64_t stride);                                           \
    void segments_gradient(const C* x, const C* dy, std::int64_t len, std::int64_t count,                 \
                           const double* center, GradientSums out, std::int64_t stride);                  \
    void segments_normalize(const C* x, C* out, std::int64_t len, std::int64_t count,                     \
                            NormalizeRowCoefficients<C> k, OutputMode<C> mode);                           \
    void segments_backprop(const C* x, const C* dy, C* dx, std::int64_t len, std::int64_t count,          \
                           BackpropRowCoefficients<double> k, OutputMode<C> mode);

// out[i] = 1 / sqrt(variance[i] + epsilon): NaN where variance + epsilon < 0
// (no fabs: docs/deviations.md), in vector form since per activation there is
// one per value of a sample.
void inverse_std_span(const double* variance, double epsilon, double* out, std::int64_t n);

MBN_DECLARE_SPAN_KERNELS(float)
MBN_DECLARE_SPAN_KERNELS(double)
#undef MBN_DECLARE_SPAN_KERNELS

void row_backprop(RowSpan<const float> x, RowSpan<const float> dy, RowSpan<float> dx, std::int64_t rows,
                  std::int64_t n, BackpropRowCoefficients<float> k, OutputMode<float> mode);

}  // namespace mbn::cpu
