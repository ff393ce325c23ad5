// Per-feature parameter tensors (scale, bias, statistics and their
// gradients) whose element type is read at run time: each may be float or
// x's type on its own (MIOpen's NHWC solvers take half scale and bias with
// float statistics), so a kernel takes one ParamRef per tensor instead of a
// template instance per combination of types.  They are read and written
// once per feature, never in the per-element loops.
#pragma once

#include "common/dtype.hpp"
#include "common/problem.hpp"
#include "gpu/norm_math.h"

#include <cstdint>
#include <cstdlib>
#include <initializer_list>

namespace mbn {
namespace gpu {

// One element of a parameter tensor of run-time type, as double; 0 where
// the tensor is absent (data null).  Branch-free: each type's load is
// predicated on its own and the right value selected, so a kernel's several
// parameter loads issue back to back beside its data loads.  Behind a switch
// each load waited for the branch on its type: four such loads cost a small
// per-channel kernel 1.2 us on the H100 (bench/RESULTS.md, "parameter
// loads"), a third of its time.
__device__ __forceinline__ double load_param(const void* data, DType dtype, std::int64_t offset) {
    const bool present = data != nullptr;
    const bool is_half = present && dtype == DType::f16, is_bf16 = present && dtype == DType::bf16;
    const bool is_float = present && dtype == DType::f32, is_double = present && dtype == DType::f64;
    __half h = narrow<__half>(0.0f);
    mbn_bfloat16 b = narrow<mbn_bfloat16>(0.0f);
    float f = 0.0f;
    double d = 0.0;
    if (is_half) h = static_cast<const __half*>(data)[offset];
    if (is_bf16) b = static_cast<const mbn_bfloat16*>(data)[offset];
    if (is_float) f = static_cast<const float*>(data)[offset];
    if (is_double) d = static_cast<const double*>(data)[offset];
    const float narrow_value = is_half ? widen(h) : is_bf16 ? widen(b) : f;
    return is_double ? d : static_cast<double>(narrow_value);
}

// One element written in the tensor's type; each type's store predicated on
// its own, as load_param.
__device__ __forceinline__ void store_param(void* data, DType dtype, std::int64_t offset, double value) {
    if (dtype == DType::f16) static_cast<__half*>(data)[offset] = narrow<__half>(value);
    if (dtype == DType::bf16) static_cast<mbn_bfloat16*>(data)[offset] = narrow<mbn_bfloat16>(value);
    if (dtype == DType::f32) static_cast<float*>(data)[offset] = static_cast<float>(value);
    if (dtype == DType::f64) static_cast<double*>(data)[offset] = value;
}

// One parameter tensor as a kernel sees it; offsets come from the layout's
// feature nest (its slot's strides).
struct ParamRef {
    void* data;  // nullptr: absent
    DType dtype;

    __host__ __device__ bool present() const { return data != nullptr; }

    __device__ __forceinline__ double load(std::int64_t offset) const { return load_param(data, dtype, offset); }
    __device__ __forceinline__ void store(std::int64_t offset, double value) const {
        store_param(data, dtype, offset, value);
    }
    // out = alpha * value + beta * prior; the prior is read only when beta != 0.
    __device__ __forceinline__ void store_blended(std::int64_t offset, double value, float alpha, float beta) const {
        double out = static_cast<double>(alpha) * value;
        if (beta != 0.0f) out += static_cast<double>(beta) * load(offset);
        store(offset, out);
    }
};

// An absent tensor (nullptr, or one whose data is null) gives an absent ref.
inline ParamRef param_ref(const TensorArg* t) {
    return t != nullptr && t->present() ? ParamRef{t->data, t->dtype} : ParamRef{nullptr, DType::f32};
}
inline ParamRef param_ref(const TensorArg& t) { return param_ref(&t); }

// A spatial parameter tensor indexed by channel (its C stride applied).
struct ChannelParam {
    ParamRef ref;
    long long stride;

    __host__ __device__ bool present() const { return ref.present(); }
    __device__ __forceinline__ double load(int c) const { return ref.load(c * stride); }
    __device__ __forceinline__ void store(int c, double value) const { ref.store(c * stride, value); }
    __device__ __forceinline__ void store_blended(int c, double value, float alpha, float beta) const {
        ref.store_blended(c * stride, value, alpha, beta);
    }
};

inline ChannelParam channel_param(const TensorArg& t) {
    return ChannelParam{param_ref(t), t.present() ? static_cast<long long>(t.stride[kC]) : 0};
}

// Whether every parameter's channel offsets (C stride times C) fit an int,
// as the small per-channel kernels index them (bn_channel_tile.hip,
// bn_wave_tile.hip).
inline bool strides_fit(std::initializer_list<const TensorArg*> params, std::int64_t channels) {
    for (const TensorArg* t : params)
        if (t->present() && std::abs(static_cast<std::int64_t>(t->stride[kC])) * channels >= (std::int64_t(1) << 31))
            return false;
    return true;
}

}  // namespace gpu
}  // namespace mbn
