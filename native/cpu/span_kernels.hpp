// The innermost loops of the CPU batch norm, over contiguous spans of the
// compute type (float or double).  Each exists in an AVX2 and a baseline
// build, picked at load time, so the library runs on any x86-64.
//
// "Column" kernels see one feature: their coefficients are scalars.
// "Row" kernels see a row of consecutive features: their coefficients and
// accumulators are arrays indexed like the row.
//
// Statistics accumulate in double.  Outputs are computed as
// ((x - mean_hi) - mean_lo) * k + b so that x - mean is accurate even when
// the mean is far larger than the spread (mean_lo carries the bits of the
// double mean that mean_hi cannot), and exactly 0 for a constant feature.
// In-place use (out == x, dx == dy or dx == x) is allowed: every element is
// read before it is written.  `prior`, when not null, is blended in as
// out = result + beta * prior (alpha is folded into the coefficients).
#pragma once

#include <cstdint>

namespace mbn::cpu {

// --- column kernels --------------------------------------------------------
double span_sum(const float* x, std::int64_t n);
double span_sum(const double* x, std::int64_t n);

// Σ (x - center)²
double span_squared_deviation(const float* x, std::int64_t n, double center);
double span_squared_deviation(const double* x, std::int64_t n, double center);

// Σ (x - center)² and Σ dy·(x - center), accumulated onto *sq and *dot.
void span_squared_and_dot(const float* x, const float* dy, std::int64_t n, double center, double* sq,
                          double* dot);
void span_squared_and_dot(const double* x, const double* dy, std::int64_t n, double center, double* sq,
                          double* dot);

template <typename C>
struct NormalizeCoefficients {
    C mean_hi, mean_lo, k, b;  // out = ((x - mean_hi) - mean_lo) * k + b
};

void span_normalize(const float* x, float* out, std::int64_t n, NormalizeCoefficients<float> c,
                    const float* prior, float beta);
void span_normalize(const double* x, double* out, std::int64_t n, NormalizeCoefficients<double> c,
                    const double* prior, double beta);

template <typename C>
struct BackpropCoefficients {
    C mean_hi, mean_lo, k_dy, k_x, k_0;  // dx = dy*k_dy + (x - mean)*k_x + k_0
};

void span_backprop(const float* x, const float* dy, float* dx, std::int64_t n,
                   BackpropCoefficients<float> c, const float* prior, float beta);
void span_backprop(const double* x, const double* dy, double* dx, std::int64_t n,
                   BackpropCoefficients<double> c, const double* prior, double beta);

// --- row kernels -----------------------------------------------------------
// acc[j] += x[j]
void row_accumulate(const float* x, double* acc, std::int64_t n);
void row_accumulate(const double* x, double* acc, std::int64_t n);

// sq[j] += (x[j] - center[j])²
void row_squared_deviation(const float* x, const double* center, double* sq, std::int64_t n);
void row_squared_deviation(const double* x, const double* center, double* sq, std::int64_t n);

// sq[j] += (x[j] - center[j])², dot[j] += dy[j]·(x[j] - center[j])
void row_squared_and_dot(const float* x, const float* dy, const double* center, double* sq, double* dot,
                         std::int64_t n);
void row_squared_and_dot(const double* x, const double* dy, const double* center, double* sq,
                         double* dot, std::int64_t n);

// Arrays of per-feature coefficients, indexed like the row.
template <typename C>
struct NormalizeRowCoefficients {
    const C *mean_hi, *mean_lo, *k, *b;
};

void row_normalize(const float* x, float* out, std::int64_t n, NormalizeRowCoefficients<float> c,
                   const float* prior, float beta);
void row_normalize(const double* x, double* out, std::int64_t n, NormalizeRowCoefficients<double> c,
                   const double* prior, double beta);

template <typename C>
struct BackpropRowCoefficients {
    const C *mean_hi, *mean_lo, *k_dy, *k_x, *k_0;
};

void row_backprop(const float* x, const float* dy, float* dx, std::int64_t n,
                  BackpropRowCoefficients<float> c, const float* prior, float beta);
void row_backprop(const double* x, const double* dy, double* dx, std::int64_t n,
                  BackpropRowCoefficients<double> c, const double* prior, double beta);

}  // namespace mbn::cpu
