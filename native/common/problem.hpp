// Normalized problem descriptions: what the front hands a backend after it
// has validated every argument.  A backend may rely on every invariant stated
// here and never re-checks them.
//
// Invariants of every TensorArg:
//   - lengths and strides are in logical order N, C, D, H, W (rank 2 to 5
//     inputs are padded: (N,C) -> (N,C,1,1,1), (N,C,W) -> (N,C,1,1,W),
//     (N,C,H,W) -> (N,C,1,H,W));
//   - every length is >= 1; the stride of a length-1 dimension is 0, every
//     other stride is > 0 (in elements, not bytes);
//   - the largest offset fits in int64_t;
//   - `order` classifies the strides once so kernels can pick a fast path.
#pragma once

#include "activation.hpp"
#include "dtype.hpp"

#include <array>
#include <cstdint>

namespace mbn {

constexpr int kDims = 5;  // N, C, D, H, W
enum Dim : int { kN = 0, kC = 1, kD = 2, kH = 3, kW = 4 };

using Lengths = std::array<std::int64_t, kDims>;
using Strides = std::array<std::int64_t, kDims>;

enum class MemoryOrder : std::uint8_t {
    packed_nchw,  // NCDHW row-major, no gaps (includes NCHW, NCW, NC)
    packed_nhwc,  // NDHWC, channels innermost, no gaps (includes NHWC, NWC)
    strided,      // anything else
};

struct TensorArg {
    void* data = nullptr;  // inputs are never written through it
    DType dtype = DType::f32;
    Lengths len{1, 1, 1, 1, 1};
    Strides stride{0, 0, 0, 0, 0};
    MemoryOrder order = MemoryOrder::packed_nchw;

    bool present() const { return data != nullptr; }
    std::int64_t offset(std::int64_t n, std::int64_t c, std::int64_t d, std::int64_t h,
                        std::int64_t w) const {
        return n * stride[kN] + c * stride[kC] + d * stride[kD] + h * stride[kH] + w * stride[kW];
    }
    std::int64_t element_count() const {
        return len[kN] * len[kC] * len[kD] * len[kH] * len[kW];
    }
};

// Result blending, cuDNN's convention: out = alpha * result + beta * prior.
// With beta == 0 the prior content is never read (it may hold NaN).
struct Blend {
    float alpha = 1.0f;
    float beta = 0.0f;
    bool reads_prior() const { return beta != 0.0f; }
};

enum class BnMode : std::uint8_t { per_activation = 0, spatial = 1 };

// The shape of one batch-norm problem.  Per activation, each (c, d, h, w) is
// a feature reduced over N; spatially, each channel is a feature reduced over
// N, D, H, W.
struct BnGeometry {
    BnMode mode = BnMode::spatial;
    Lengths len{1, 1, 1, 1, 1};  // x's lengths

    std::int64_t spatial_size() const { return len[kD] * len[kH] * len[kW]; }
    // M: how many values each feature's statistics are taken over.
    std::int64_t reduction_size() const {
        return mode == BnMode::spatial ? len[kN] * spatial_size() : len[kN];
    }
    // F: how many independent (mean, variance) pairs there are.
    std::int64_t feature_count() const {
        return mode == BnMode::spatial ? len[kC] : len[kC] * spatial_size();
    }
};

// Parameter tensors (scale, bias, statistics, their gradients) have lengths
// (1,C,1,1,1) spatially or (1,C,D,H,W) per activation and arbitrary positive
// strides.  Each has its own dtype (MIOpen's NHWC solvers take scale and bias
// in x's type with float statistics, for instance): a backend reads and
// writes each one as its TensorArg::dtype says.
//
// Accepted type combinations (the front rejects every other one):
//   x == y: f16, bf16, f32, f64
//   each parameter tensor: f32, or x's type (gradients: their parameter's)
//   dy == dx (backward only): x's type, or f32
//
// `activation` (default: identity) is applied to the normalized value
// z = scale * xhat + bias before blending: y = alpha * f(z) (+ beta * prior;
// the front refuses beta != 0 with an activation).  Backward takes dy as the
// gradient of f(z), recomputes z from x, the statistics, scale and bias, and
// back-propagates g = dy * f'(z) through batch norm.
struct BnForwardTraining {
    BnGeometry geom;
    TensorArg x, y;
    TensorArg scale, bias;
    // The running statistics are read from prev_running_* and written to
    // running_*: the same buffers (V1, V2), or distinct ones (V3).  All four
    // present or all four absent.
    TensorArg prev_running_mean, prev_running_var;
    TensorArg running_mean, running_var;
    TensorArg saved_mean, saved_inv_std;  // both present or both absent
    double epsilon = 1e-5;                // >= 0, not NaN
    double exp_avg_factor = 0.1;          // finite, any sign
    Blend out;
    ActivationSpec activation;
    // Running variance update uses var * M / (M - 1); M >= 2 unless the
    // running pair is absent (the inference fallback allows M == 1).
};

struct BnForwardInference {
    BnGeometry geom;
    TensorArg x, y;
    TensorArg scale, bias, mean, var;  // all present
    // var holds 1 / sqrt(variance + epsilon) instead of the variance
    // (miopenBatchNormalizationForwardInferenceInvVariance); epsilon is unused.
    bool var_is_inv_std = false;
    double epsilon = 1e-5;
    Blend out;
    ActivationSpec activation;
};

struct BnBackward {
    BnGeometry geom;
    TensorArg x, dy, dx;
    TensorArg scale, dscale, dbias;
    TensorArg saved_mean, saved_inv_std;  // both present, or both absent: recompute with epsilon
    TensorArg bias;  // present exactly when the activation is not the identity (z needs it)
    double epsilon = 1e-5;
    Blend data;   // dx
    Blend param;  // dscale, dbias
    ActivationSpec activation;
};

}  // namespace mbn
