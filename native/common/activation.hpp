// The activations MIOpen fuses into batch norm (miopenActivationMode_t), as
// inline math both backends share: the CPU applies them in its passes, the GPU
// kernels as an epilogue.  Everything here compiles for host and device: no
// std:: calls, only the math functions CUDA and HIP overload for float and
// double (exp, expm1, log1p, tanh, fabs, pow).
//
// Each mode gives f(z) with the descriptor's alpha, beta, gamma, and f'(z)
// from the pre-activation value z (the backward recomputes z from x, so it
// never needs y):
//   pass-through  z                                     1
//   logistic      1 / (1 + e^-z)                        f (1 - f)
//   tanh          beta tanh(alpha z)                    alpha beta (1 - tanh²(alpha z))
//   relu          max(0, z)                             z > 0
//   soft-relu     log(1 + e^z)                          1 / (1 + e^-z)
//   abs           |z|                                   z > 0 ? 1 : -1
//   power         (alpha + beta z)^gamma, 0 where the base is <= 0
//                                                       gamma beta (alpha + beta z)^(gamma-1), 0 likewise
//   clipped relu  min(alpha, max(0, z))                 0 < z < alpha
//   leaky relu    z > 0 ? z : alpha z                   z > 0 ? 1 : alpha
//   elu           z > 0 ? z : alpha (e^z - 1)           z > 0 ? 1 : alpha e^z
//   clamp         max(alpha, min(beta, z))              alpha < z < beta
// Conditions are written so a NaN z gives NaN (never a silent 0 or 1).
#pragma once

#include <math.h>  // in C++, the float and double overloads in the global namespace
#include <cstdint>

#if defined(__CUDACC__) || defined(__HIPCC__)
#define MBN_ACTIVATION_HOST_DEVICE __host__ __device__
#else
#define MBN_ACTIVATION_HOST_DEVICE
#endif

namespace mbn {

// Values are miopenActivationMode_t's.
enum class ActivationMode : std::uint8_t {
    pass_through = 0,
    logistic = 1,
    tanh = 2,
    relu = 3,
    soft_relu = 4,
    abs = 5,
    power = 6,
    clipped_relu = 7,
    leaky_relu = 8,
    elu = 9,
    clamp = 10,
};
constexpr int kActivationModeCount = 11;

// An activation with its parameters (miopenSetActivationDescriptor's).
struct ActivationSpec {
    ActivationMode mode = ActivationMode::pass_through;
    double alpha = 0.0, beta = 0.0, gamma = 0.0;

    MBN_ACTIVATION_HOST_DEVICE bool identity() const { return mode == ActivationMode::pass_through; }
};

namespace activation_detail {

// `value`, or z itself where z is NaN (so NaN propagates through a branch).
template <typename T>
MBN_ACTIVATION_HOST_DEVICE inline T unless_nan(T z, T value) {
    return z == z ? value : z;
}

// 1 where z > 0, 0 where z <= 0, NaN for NaN.
template <typename T>
MBN_ACTIVATION_HOST_DEVICE inline T step(T z) {
    return z > T(0) ? T(1) : unless_nan(z, T(0));
}

// 1 / (1 + e^-z) without overflow for very negative z.
template <typename T>
MBN_ACTIVATION_HOST_DEVICE inline T logistic(T z) {
    if (z >= T(0)) return T(1) / (T(1) + exp(-z));
    const T e = exp(z);
    return e / (T(1) + e);
}

}  // namespace activation_detail

// f(z) in T (float or double); parameters are converted to T.
template <typename T>
MBN_ACTIVATION_HOST_DEVICE inline T activation_forward(const ActivationSpec& a, T z) {
    using namespace activation_detail;
    const T alpha = static_cast<T>(a.alpha), beta = static_cast<T>(a.beta), gamma = static_cast<T>(a.gamma);
    switch (a.mode) {
        case ActivationMode::pass_through: return z;
        case ActivationMode::logistic: return logistic(z);
        case ActivationMode::tanh: return beta * tanh(alpha * z);
        case ActivationMode::relu: return z > T(0) ? z : unless_nan(z, T(0));
        case ActivationMode::soft_relu: return z > T(0) ? z + log1p(exp(-z)) : log1p(exp(z));
        case ActivationMode::abs: return fabs(z);
        case ActivationMode::power: {
            const T v = alpha + beta * z;
            return v > T(0) ? pow(v, gamma) : unless_nan(v, T(0));
        }
        case ActivationMode::clipped_relu: return z > alpha ? alpha : (z > T(0) ? z : unless_nan(z, T(0)));
        case ActivationMode::leaky_relu: return z > T(0) ? z : alpha * z;
        case ActivationMode::elu: return z > T(0) ? z : alpha * expm1(z);
        case ActivationMode::clamp: {
            const T upper = z > beta ? beta : z;  // min(beta, z), NaN kept
            return upper < alpha ? alpha : upper;
        }
    }
    return z;
}

// f'(z) in T: the backward multiplies dy by it.
template <typename T>
MBN_ACTIVATION_HOST_DEVICE inline T activation_derivative(const ActivationSpec& a, T z) {
    using namespace activation_detail;
    const T alpha = static_cast<T>(a.alpha), beta = static_cast<T>(a.beta), gamma = static_cast<T>(a.gamma);
    switch (a.mode) {
        case ActivationMode::pass_through: return T(1);
        case ActivationMode::logistic: {
            const T f = logistic(z);
            return f * (T(1) - f);
        }
        case ActivationMode::tanh: {
            const T t = tanh(alpha * z);
            return alpha * beta * (T(1) - t * t);
        }
        case ActivationMode::relu: return step(z);
        case ActivationMode::soft_relu: return logistic(z);
        case ActivationMode::abs: return z > T(0) ? T(1) : unless_nan(z, T(-1));
        case ActivationMode::power: {
            const T v = alpha + beta * z;
            return v > T(0) ? gamma * beta * pow(v, gamma - T(1)) : unless_nan(v, T(0));
        }
        case ActivationMode::clipped_relu: return step(z) * step(alpha - z);
        case ActivationMode::leaky_relu: return z > T(0) ? T(1) : unless_nan(z, alpha);
        case ActivationMode::elu: return z > T(0) ? T(1) : unless_nan(z, alpha * exp(z));
        case ActivationMode::clamp: return step(z - alpha) * step(beta - z);
    }
    return T(1);
}

}  // namespace mbn
