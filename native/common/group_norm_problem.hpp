// Validated group-norm problems (see problem.hpp for TensorArg's invariants).
//
// Tensors and their normalized lengths:
//   x, y, dy, dx        (N, C, D, H, W); one dtype (x's)
//   weight, bias, dweight, dbias   (1, C, 1, 1, 1); param dtype: f32 or x's
//   mean, rstd          (N, G, 1, 1, 1) stored in len[kN], len[kC]; stats
//                       dtype: f32, or f64 when x is f64
// Group g of sample n covers channels [g*C/G, (g+1)*C/G) at every spatial
// position: C/G * D*H*W >= 2 values.
#pragma once

#include "problem.hpp"

namespace mbn {

enum class Activation : std::uint8_t { none, swish };

struct GnShape {
    Lengths len{1, 1, 1, 1, 1};  // x's lengths
    std::int64_t groups = 1;     // G, divides len[kC]

    std::int64_t channels_per_group() const { return len[kC] / groups; }
    std::int64_t spatial_size() const { return len[kD] * len[kH] * len[kW]; }
    // Values each (n, g) is normalized over.
    std::int64_t group_size() const { return channels_per_group() * spatial_size(); }
};

struct GnForward {
    GnShape shape;
    TensorArg x, y;
    bool affine = true;      // false: weight 1, bias 0 (weight/bias absent)
    TensorArg weight, bias;  // present iff affine
    TensorArg mean, rstd;    // each optional
    double epsilon = 1e-5;
    Activation activation = Activation::none;
    float swish_beta = 1.0f;
};

struct GnBackward {
    GnShape shape;
    TensorArg x, dy, dx;
    bool affine = true;
    TensorArg weight;          // present iff affine
    TensorArg bias;            // present iff affine and activation != none
    TensorArg mean, rstd;      // present
    TensorArg dweight, dbias;  // present iff affine
    Activation activation = Activation::none;
    float swish_beta = 1.0f;
};

}  // namespace mbn
