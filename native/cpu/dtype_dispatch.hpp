// From run-time DTypes to the template arguments of the CPU ops.
#pragma once

#include "common/dtype.hpp"
#include "cpu/half_convert.hpp"

namespace mbn::cpu {

template <typename T>
struct TypeTag {
    using type = T;
};

// Calls fn(TypeTag<storage type of t>{}).
template <typename Fn>
void with_data_type(DType t, Fn&& fn) {
    switch (t) {
        case DType::f16: fn(TypeTag<Half>{}); return;
        case DType::bf16: fn(TypeTag<BFloat16>{}); return;
        case DType::f32: fn(TypeTag<float>{}); return;
        case DType::f64: fn(TypeTag<double>{}); return;
    }
}

// The types the front accepts besides x's own: float32 parameters and
// float32 gradients.  Calls fn(TypeTag<float or Own>{}).
template <typename Own, typename Fn>
void with_own_or_float(DType t, Fn&& fn) {
    if (t == DType::f32) fn(TypeTag<float>{});
    else fn(TypeTag<Own>{});
}

}  // namespace mbn::cpu
