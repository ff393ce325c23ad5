// Batch norm's fused activation on the device: y = alpha * f(z) in the
// forward's normalize loop, g = dy * f'(z) in the backward's loops, with
// common/activation.hpp's math (the CPU backend uses the same, so both
// backends agree by construction).  The mode is a run-time value; only
// "is there an activation" is a template choice, so the identity path of
// every kernel stays as it was.
#pragma once

#include "common/activation.hpp"
#include "gpu/hip_compat.h"

#include <type_traits>

namespace mbn {
namespace gpu {

// Out of line: inlined, the eleven modes' math (exp, tanh, pow, ...) would be
// copied into every element of every unrolled loop, multiplying code size and
// compile time; one call per element costs a few instructions.
template <typename A>
__device__ __noinline__ A activation_value(ActivationSpec spec, A z) {
    return activation_forward(spec, z);
}
template <typename A>
__device__ __noinline__ A activation_slope(ActivationSpec spec, A z) {
    return activation_derivative(spec, z);
}

// f as normalize_share's epilogue (feature_phases.h), in the accumulation type.
template <typename A>
struct ActivationEpilogue {
    ActivationSpec spec;
    __device__ __forceinline__ A operator()(A z) const { return activation_value(spec, z); }
};

// Calls body(std::bool_constant<fused>) with fused = "an activation other
// than pass-through": the kernels' template switch.
template <typename Body>
void with_activation(const ActivationSpec& activation, Body&& body) {
    if (activation.identity())
        body(std::false_type{});
    else
        body(std::true_type{});
}

}  // namespace gpu
}  // namespace mbn
