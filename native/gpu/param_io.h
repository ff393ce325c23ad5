// Per-feature parameter tensors (scale, bias, statistics and their
// gradients) whose element type is read at run time: each may be float or
// x's type on its own (MIOpen's NHWC solvers take half scale and bias with
// float statistics), so a kernel takes one ParamRef per tensor instead of a
// template instance per combination of types.  They are read and written
// once per feature, never in the per-element loops.
#pragma once

#include "common/dtype.hpp"
#include "common/problem.hpp"
#include "gpu/bn_device_math.h"

#include <cstdint>

namespace mbn {
namespace gpu {

// One element of a parameter tensor of run-time type, as double.
__device__ __forceinline__ double load_param_inline(const void* data, DType dtype, std::int64_t offset) {
    switch (dtype) {
        case DType::f16: return static_cast<double>(widen(static_cast<const __half*>(data)[offset]));
        case DType::bf16: return static_cast<double>(widen(static_cast<const mbn_bfloat16*>(data)[offset]));
        case DType::f32: return static_cast<double>(static_cast<const float*>(data)[offset]);
        case DType::f64: return static_cast<const double*>(data)[offset];
    }
    return 0.0;
}

// Out of line: inlined, a kernel's type switches (several parameters times
// its features per thread) inflate its code and the compiler's memory, for
// nothing measurable at one call per parameter and feature.
static __device__ __noinline__ double load_param(const void* data, DType dtype, std::int64_t offset) {
    return load_param_inline(data, dtype, offset);
}

static __device__ __noinline__ void store_param(void* data, DType dtype, std::int64_t offset, double value) {
    switch (dtype) {
        case DType::f16: static_cast<__half*>(data)[offset] = narrow<__half>(value); return;
        case DType::bf16: static_cast<mbn_bfloat16*>(data)[offset] = narrow<mbn_bfloat16>(value); return;
        case DType::f32: static_cast<float*>(data)[offset] = static_cast<float>(value); return;
        case DType::f64: static_cast<double*>(data)[offset] = value; return;
    }
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
    // Inlined: a kernel that reads a few parameters while its data loads are
    // in flight must not wait on each in turn across out-of-line calls.
    __device__ __forceinline__ double load_inline(int c) const {
        return load_param_inline(ref.data, ref.dtype, c * stride);
    }
    __device__ __forceinline__ void store(int c, double value) const { ref.store(c * stride, value); }
    __device__ __forceinline__ void store_blended(int c, double value, float alpha, float beta) const {
        ref.store_blended(c * stride, value, alpha, beta);
    }
};

inline ChannelParam channel_param(const TensorArg& t) {
    return ChannelParam{param_ref(t), t.present() ? static_cast<long long>(t.stride[kC]) : 0};
}

}  // namespace gpu
}  // namespace mbn
