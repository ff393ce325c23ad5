// The element types batch norm computes on, independent of the ABI's
// miopenDataType_t (which also names types we never compute on).
#pragma once

#include <cstddef>
#include <cstdint>

namespace mbn {

enum class DType : std::uint8_t { f16, bf16, f32, f64 };

constexpr std::size_t dtype_size(DType t) {
    return t == DType::f64 ? 8 : t == DType::f32 ? 4 : 2;
}

constexpr const char* dtype_name(DType t) {
    switch (t) {
        case DType::f16: return "float16";
        case DType::bf16: return "bfloat16";
        case DType::f32: return "float32";
        case DType::f64: return "float64";
    }
    return "?";
}

}  // namespace mbn
