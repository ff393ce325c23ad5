// Storage types of tensor elements and the type the CPU kernels compute in:
// float for float32/float16/bfloat16 data, double for float64 data.
#pragma once

#include "cpu/half_convert.hpp"

namespace mbn::cpu {

template <typename T>
struct Element;

template <>
struct Element<float> {
    using Compute = float;
    static float load(float v) { return v; }
    static float store(float v) { return v; }
};

template <>
struct Element<double> {
    using Compute = double;
    static double load(double v) { return v; }
    static double store(double v) { return v; }
};

template <>
struct Element<Half> {
    using Compute = float;
    static float load(Half v) { return to_float(v); }
    static Half store(float v) { return to_half(v); }
};

template <>
struct Element<BFloat16> {
    using Compute = float;
    static float load(BFloat16 v) { return to_float(v); }
    static BFloat16 store(float v) { return to_bfloat16(v); }
};

// Reads a storage value as C (float or double), through the compute type of T.
template <typename C, typename T>
inline C load_as(T v) {
    return static_cast<C>(Element<T>::load(v));
}

// Writes a C value (float or double) into storage type T.
template <typename T, typename C>
inline T store_from(C v) {
    return Element<T>::store(static_cast<typename Element<T>::Compute>(v));
}

}  // namespace mbn::cpu
