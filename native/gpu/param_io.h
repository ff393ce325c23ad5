// Per-feature parameters (scale, bias, statistics and their gradients) with
// their element type chosen at run time.  They are read and written once per
// feature, never in the per-element loops, so a switch on the type costs
// nothing measurable, and each kernel needs one instance for every pairing of
// parameter types instead of one per type (MIOpen lets scale/bias and the
// statistics differ: half scale with float means, say).
#pragma once

#include "common/dtype.hpp"
#include "common/problem.hpp"
#include "gpu/bn_device_math.h"

#include <cstdint>

namespace mbn {
namespace gpu {

// Out of line: inlined, the type switches of a kernel's several parameters
// (times its features per thread) made the compiler's optimizer run out of
// memory.  One call per parameter and feature costs nothing measurable.
static __device__ __noinline__ double load_param(const void* data, DType dtype, std::int64_t offset) {
    switch (dtype) {
        case DType::f16: return static_cast<double>(widen(static_cast<const __half*>(data)[offset]));
        case DType::bf16: return static_cast<double>(widen(static_cast<const mbn_bfloat16*>(data)[offset]));
        case DType::f32: return static_cast<double>(static_cast<const float*>(data)[offset]);
        case DType::f64: return static_cast<const double*>(data)[offset];
    }
    return 0.0;
}

static __device__ __noinline__ void store_param(void* data, DType dtype, std::int64_t offset, double value) {
    switch (dtype) {
        case DType::f16: static_cast<__half*>(data)[offset] = narrow<__half>(value); return;
        case DType::bf16: static_cast<mbn_bfloat16*>(data)[offset] = narrow<mbn_bfloat16>(value); return;
        case DType::f32: static_cast<float*>(data)[offset] = static_cast<float>(value); return;
        case DType::f64: static_cast<double*>(data)[offset] = value; return;
    }
}

struct ParamRef {
    void* data;   // nullptr: absent
    DType dtype;

    MBN_HOST_DEVICE bool present() const { return data != nullptr; }

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

inline ParamRef param_ref(const TensorArg& t) {
    return ParamRef{t.present() ? t.data : nullptr, t.dtype};
}

}  // namespace gpu
}  // namespace mbn
