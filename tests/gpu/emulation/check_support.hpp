// What the emulated kernels' check programs (gn_tile_check.cpp,
// bn_tile_check.cpp, bn_columns_check.cpp, slice_walk_check.cpp,
// gn_finalize_check.cpp, gn_slice_terms_check.cpp) share:
// a tally of checks and failures, element conversions, the tolerance table
// of python/miopen_bn/tolerances.csv, host tensors with poisoned slack, and
// the comparison with a float64 reference.
#pragma once

#include "common/dtype.hpp"
#include "common/problem.hpp"
#include "miopen_bn_tolerances.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

namespace emu_check {

using namespace mbn;

// A check program's count of checks and failures: the first 20 failures
// are printed, and finish() prints the totals and gives the exit status.
// A group-norm problem's lengths (N, C, D, H, W) and its groups.
struct GroupShape {
    Lengths len;
    std::int64_t groups;
};

struct Tally {
    int checks = 0;
    int failures = 0;

    void fail(const std::string& what) {
        ++failures;
        if (failures <= 20) std::printf("FAIL %s\n", what.c_str());
    }
    int finish() const {
        std::printf("%d check(s), %d failure(s)\n", checks, failures);
        return failures == 0 ? 0 : 1;
    }
};

// ---- elements ------------------------------------------------------------

inline double to_double(DType t, const void* p, std::int64_t i) {
    switch (t) {
        case DType::f32: return static_cast<const float*>(p)[i];
        case DType::f64: return static_cast<const double*>(p)[i];
        case DType::f16: return __half2float(static_cast<const __half*>(p)[i]);
        case DType::bf16: {
            std::uint32_t bits = static_cast<std::uint32_t>(static_cast<const std::uint16_t*>(p)[i]) << 16;
            float f;
            std::memcpy(&f, &bits, 4);
            return f;
        }
    }
    return 0.0;
}

inline void from_double(DType t, void* p, std::int64_t i, double v) {
    switch (t) {
        case DType::f32: static_cast<float*>(p)[i] = static_cast<float>(v); return;
        case DType::f64: static_cast<double*>(p)[i] = v; return;
        case DType::f16: static_cast<__half*>(p)[i] = __float2half_rn(static_cast<float>(v)); return;
        case DType::bf16: {  // round to nearest even, as the kernels
            const float f = static_cast<float>(v);
            std::uint32_t u;
            std::memcpy(&u, &f, 4);
            std::uint16_t bits = std::isnan(f) ? static_cast<std::uint16_t>((u >> 16) | 0x40u)
                                               : static_cast<std::uint16_t>((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
            static_cast<std::uint16_t*>(p)[i] = bits;
            return;
        }
    }
}

// The rows of the one table for outputs of type t: y and dx (elementwise),
// statistics and parameter gradients (reduction).  miopen_bn_tolerances.h is
// generated from tolerances.csv by cmake/tolerances.cmake (the test builds it).
struct Tolerance {
    MbnTolerance elementwise, reduction;
};
inline Tolerance tolerance(DType t) {
    miopenDataType_t type = miopenFloat;
    switch (t) {
        case DType::f32: type = miopenFloat; break;
        case DType::f16: type = miopenHalf; break;
        case DType::bf16: type = miopenBFloat16; break;
        case DType::f64: type = miopenDouble; break;
    }
    return {mbn_tolerance(type, 0), mbn_tolerance(type, 1)};
}

// A tensor of (N, C, D, H, W) lengths in host memory, 64 bytes of slack on
// either side (poisoned, checked untouched).
struct Tensor {
    DType dtype;
    Lengths len;
    Strides stride;
    std::vector<unsigned char> bytes;
    static constexpr std::size_t kSlack = 64;

    Tensor(DType t, const Lengths& l, bool channels_last) : dtype(t), len(l) {
        if (channels_last) {  // N, D, H, W, C
            stride[kC] = 1;
            stride[kW] = len[kC];
            stride[kH] = stride[kW] * len[kW];
            stride[kD] = stride[kH] * len[kH];
            stride[kN] = stride[kD] * len[kD];
        } else {
            stride[kW] = 1;
            stride[kH] = len[kW];
            stride[kD] = stride[kH] * len[kH];
            stride[kC] = stride[kD] * len[kD];
            stride[kN] = stride[kC] * len[kC];
        }
        bytes.assign(static_cast<std::size_t>(count()) * dtype_size(t) + 2 * kSlack, 0x7F);
    }
    std::int64_t count() const { return len[kN] * len[kC] * len[kD] * len[kH] * len[kW]; }
    void* data() { return bytes.data() + kSlack; }
    const void* data() const { return bytes.data() + kSlack; }
    std::int64_t at(std::int64_t n, std::int64_t c, std::int64_t s) const {
        const std::int64_t w = s % len[kW], h = s / len[kW] % len[kH], d = s / (len[kW] * len[kH]);
        return n * stride[kN] + c * stride[kC] + d * stride[kD] + h * stride[kH] + w * stride[kW];
    }
    double get(std::int64_t n, std::int64_t c, std::int64_t s) const { return to_double(dtype, data(), at(n, c, s)); }
    void set(std::int64_t n, std::int64_t c, std::int64_t s, double v) { from_double(dtype, data(), at(n, c, s), v); }
    // Every element in logical (n, c, position) order, and back.
    std::vector<double> values() const {
        std::vector<double> out;
        out.reserve(static_cast<std::size_t>(count()));
        for (std::int64_t n = 0; n < len[kN]; ++n)
            for (std::int64_t c = 0; c < len[kC]; ++c)
                for (std::int64_t s = 0; s < len[kD] * len[kH] * len[kW]; ++s) out.push_back(get(n, c, s));
        return out;
    }
    void assign(const std::vector<double>& in) {
        std::size_t i = 0;
        for (std::int64_t n = 0; n < len[kN]; ++n)
            for (std::int64_t c = 0; c < len[kC]; ++c)
                for (std::int64_t s = 0; s < len[kD] * len[kH] * len[kW]; ++s) set(n, c, s, in[i++]);
    }
    void fill_nan() {
        for (std::int64_t i = 0; i < count(); ++i) from_double(dtype, data(), i, NAN);
    }
    bool slack_intact() const {
        for (std::size_t i = 0; i < kSlack; ++i)
            if (bytes[i] != 0x7F || bytes[bytes.size() - 1 - i] != 0x7F) return false;
        return true;
    }
    TensorArg arg() {
        TensorArg a;
        a.data = data();
        a.dtype = dtype;
        a.len = len;
        a.stride = stride;
        a.order = MemoryOrder::strided;
        return a;
    }
};

// A (1, C) or (N, G) tensor.
struct Small {
    DType dtype;
    std::vector<double> storage;  // wide enough for any type
    std::int64_t rows, columns;
    Small(DType t, std::int64_t r, std::int64_t c) : dtype(t), storage(static_cast<std::size_t>(r * c) + 1), rows(r), columns(c) {}
    double get(std::int64_t i) const { return to_double(dtype, storage.data(), i); }
    void set(std::int64_t i, double v) { from_double(dtype, storage.data(), i, v); }
    TensorArg arg() {
        TensorArg a;
        a.data = storage.data();
        a.dtype = dtype;
        a.len = Lengths{rows, columns, 1, 1, 1};
        a.stride = Strides{columns, 1, 1, 1, 1};
        return a;
    }
};

// Compares got with expected under |got - expected| <= atol + rtol * |expected|; reports the worst
// (NaN fails) and returns whether every element passed.
inline bool compare(const std::string& label, const char* what, const std::vector<double>& got,
                    const std::vector<double>& expected, MbnTolerance tol) {
    std::size_t bad = 0, worst = 0;
    double worst_excess = -1.0;
    for (std::size_t i = 0; i < got.size(); ++i) {
        const double allowed = tol.atol + tol.rtol * std::fabs(expected[i]);
        const double error = std::fabs(got[i] - expected[i]);
        const double excess = std::isnan(got[i]) ? INFINITY : error - allowed;
        if (excess > 0) ++bad;
        if (excess > worst_excess) {
            worst_excess = excess;
            worst = i;
        }
    }
    if (bad != 0)
        std::printf("FAIL %s: %s: %zu of %zu off; worst [%zu] got %.9g expected %.9g\n", label.c_str(), what, bad,
                    got.size(), worst, got[worst], expected[worst]);
    return bad == 0;
}

// Each group's mean and 1 / sqrt(biased variance + epsilon) in float64,
// two passes over x: [n * G + g].
struct GroupStatistics {
    std::vector<double> mean, rstd;
};
inline GroupStatistics group_statistics(const Tensor& x, std::int64_t groups, double epsilon) {
    const std::int64_t N = x.len[kN], Cg = x.len[kC] / groups, S = x.len[kD] * x.len[kH] * x.len[kW];
    GroupStatistics out;
    for (std::int64_t n = 0; n < N; ++n)
        for (std::int64_t g = 0; g < groups; ++g) {
            double s1 = 0, s2 = 0;
            for (std::int64_t c = g * Cg; c < (g + 1) * Cg; ++c)
                for (std::int64_t s = 0; s < S; ++s) s1 += x.get(n, c, s);
            const double m = s1 / static_cast<double>(Cg * S);
            for (std::int64_t c = g * Cg; c < (g + 1) * Cg; ++c)
                for (std::int64_t s = 0; s < S; ++s) s2 += (x.get(n, c, s) - m) * (x.get(n, c, s) - m);
            out.mean.push_back(m);
            out.rstd.push_back(1.0 / std::sqrt(s2 / static_cast<double>(Cg * S) + epsilon));
        }
    return out;
}

// A backward's inputs: each channel of x off centre (mean in [-2, 2), spread
// in [0.5, 2)), dy standard normal.
template <typename Rng>
void fill_backward_inputs(Tensor& x, Tensor& dy, Rng& rng) {
    const std::int64_t N = x.len[kN], C = x.len[kC], S = x.len[kD] * x.len[kH] * x.len[kW];
    std::normal_distribution<double> normal;
    std::uniform_real_distribution<double> uniform;
    for (std::int64_t c = 0; c < C; ++c) {
        const double centre = uniform(rng) * 4 - 2, spread = uniform(rng) * 1.5 + 0.5;
        for (std::int64_t n = 0; n < N; ++n)
            for (std::int64_t s = 0; s < S; ++s) {
                x.set(n, c, s, normal(rng) * spread + centre);
                dy.set(n, c, s, normal(rng));
            }
    }
}

// A backward's saved statistics: the float32 (N, G) mean and rstd of the
// stored x, as the kernels and gn_backward_reference read them.
struct SavedStatistics {
    Small mean, rstd;
};
inline SavedStatistics saved_statistics(const Tensor& x, std::int64_t groups, double epsilon) {
    const std::int64_t count = x.len[kN] * groups;
    SavedStatistics saved{Small(DType::f32, x.len[kN], groups), Small(DType::f32, x.len[kN], groups)};
    const GroupStatistics stats = group_statistics(x, groups, epsilon);
    for (std::int64_t i = 0; i < count; ++i) {
        saved.mean.set(i, stats.mean[i]);
        saved.rstd.set(i, stats.rstd[i]);
    }
    return saved;
}

// The fused swish z * sigmoid(beta z) and its derivative, in double: the
// group-norm checks' references.
inline double swish(double z, double beta) { return z / (1.0 + std::exp(-beta * z)); }
inline double swish_derivative(double z, double beta) {
    const double s = 1.0 / (1.0 + std::exp(-beta * z));
    return s + beta * z * s * (1.0 - s);
}

// The float64 group-norm backward of `groups` groups: dx (in Tensor::values
// order), dweight and dbias from x, dy and the saved mean and rstd (those
// the kernels read), weight_of(c) and bias_of(c), through the swish's
// derivative when `with_swish`.
struct GnBackwardReference {
    std::vector<double> dx, dweight, dbias;
};
template <typename WeightOf, typename BiasOf>
GnBackwardReference gn_backward_reference(const Tensor& x, const Tensor& dy, const Small& mean, const Small& rstd,
                                          std::int64_t groups, WeightOf weight_of, BiasOf bias_of, bool with_swish,
                                          double beta) {
    const std::int64_t N = x.len[kN], C = x.len[kC], G = groups, Cg = C / G;
    const std::int64_t S = x.len[kD] * x.len[kH] * x.len[kW];
    const double M = static_cast<double>(Cg * S);
    GnBackwardReference r{std::vector<double>(static_cast<std::size_t>(x.count())), std::vector<double>(C, 0.0),
                          std::vector<double>(C, 0.0)};
    std::vector<double> mean_wg(N * G, 0.0), mean_wgx(N * G, 0.0);
    auto gradient = [&](std::int64_t n, std::int64_t c, std::int64_t s, double& xhat, double& g) {
        const std::int64_t j = n * G + c / Cg;
        xhat = (x.get(n, c, s) - mean.get(j)) * rstd.get(j);
        g = dy.get(n, c, s);
        if (with_swish) g *= swish_derivative(xhat * weight_of(c) + bias_of(c), beta);
    };
    for (std::int64_t n = 0; n < N; ++n)
        for (std::int64_t c = 0; c < C; ++c)
            for (std::int64_t s = 0; s < S; ++s) {
                double xhat, g;
                gradient(n, c, s, xhat, g);
                r.dbias[c] += g;
                r.dweight[c] += g * xhat;
                mean_wg[n * G + c / Cg] += weight_of(c) * g / M;
                mean_wgx[n * G + c / Cg] += weight_of(c) * g * xhat / M;
            }
    std::size_t i = 0;
    for (std::int64_t n = 0; n < N; ++n)
        for (std::int64_t c = 0; c < C; ++c)
            for (std::int64_t s = 0; s < S; ++s, ++i) {
                double xhat, g;
                gradient(n, c, s, xhat, g);
                const std::int64_t j = n * G + c / Cg;
                r.dx[i] = rstd.get(j) * (weight_of(c) * g - mean_wg[j] - xhat * mean_wgx[j]);
            }
    return r;
}

}  // namespace emu_check
