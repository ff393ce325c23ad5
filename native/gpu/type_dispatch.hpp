// Host-side selection of kernel template instances from run-time facts: the
// element types of a call and the shape of its walk (cursor rank, vector widths).
#pragma once

#include "common/dtype.hpp"
#include "common/error.hpp"
#include "gpu/feature_layout.hpp"
#include "gpu/hip_compat.h"

#include <type_traits>
#include <utility>

namespace mbn {
namespace gpu {

template <typename T>
struct TypeTag {
    using type = T;
};

// Calls body(TypeTag<T>{}) with T the element type of `dtype`.
template <typename Body>
void with_element_type(DType dtype, Body&& body) {
    switch (dtype) {
        case DType::f16: body(TypeTag<__half>{}); return;
        case DType::bf16: body(TypeTag<mbn_bfloat16>{}); return;
        case DType::f32: body(TypeTag<float>{}); return;
        case DType::f64: body(TypeTag<double>{}); return;
    }
    fail(miopenStatusInternalError, "GPU backend: unknown element type");
}

// Calls body(TypeTag<G>{}) for a gradient type that is either T itself or
// float (the only combinations the front accepts), so no other pair is
// instantiated.
template <typename T, typename Body>
void with_gradient_type(DType x_dtype, DType grad_dtype, Body&& body) {
    if (grad_dtype == x_dtype)
        body(TypeTag<T>{});
    else
        body(TypeTag<float>{});
}

// Calls body(TypeTag<C>{}) for the backward's per-element arithmetic type:
// float when `float_math` and T is not double, else double (no float
// instance exists for double data).
template <typename T, typename Body>
void with_backprop_type(bool float_math, Body&& body) {
    if constexpr (std::is_same<T, double>::value) {
        body(TypeTag<double>{});
    } else {
        if (float_math)
            body(TypeTag<float>{});
        else
            body(TypeTag<double>{});
    }
}

// The DType of an element type.
template <typename T>
constexpr DType dtype_of() {
    if constexpr (std::is_same<T, __half>::value) return DType::f16;
    if constexpr (std::is_same<T, mbn_bfloat16>::value) return DType::bf16;
    if constexpr (std::is_same<T, double>::value) return DType::f64;
    static_assert(std::is_same<T, __half>::value || std::is_same<T, mbn_bfloat16>::value ||
                      std::is_same<T, double>::value || std::is_same<T, float>::value,
                  "not an element type of the kernels");
    return DType::f32;
}

// Calls body(TypeTag<P>{}) for the parameter type P of data of element type
// T: float, or T itself, the only pairs the fronts accept (docs/conventions.md#data-types).  Other
// pairs are not instantiated: they would be dead code (4 of the 9 instances
// of every kernel templated on P for half, bfloat16 and float data, and the
// longest compiles of the GPU build are such kernels).
template <typename T, typename Body>
void with_parameter_type(DType param_dtype, Body&& body) {
    if (param_dtype == DType::f32) {
        body(TypeTag<float>{});
        return;
    }
    if constexpr (!std::is_same<T, float>::value) {
        if (param_dtype == dtype_of<T>()) {
            body(TypeTag<T>{});
            return;
        }
    }
    fail(miopenStatusInternalError, "GPU backend: no kernel instance for parameters of type ",
         dtype_name(param_dtype), " beside data of type ", dtype_name(dtype_of<T>()));
}

// A list of vector widths a kernel is instantiated for.
template <int... Ws>
struct Widths {};

// Calls fn(std::integral_constant<int, W>{}) for the W of the list equal to
// `wanted`; false when none is.
template <int... Ws, typename Fn>
bool pick_width(int wanted, Widths<Ws...>, Fn&& fn) {
    bool done = false;
    auto one = [&](auto width) {
        if (!done && wanted == decltype(width)::value) {
            fn(width);
            done = true;
        }
    };
    (one(std::integral_constant<int, Ws>{}), ...);
    return done;
}

// Calls body(R, VR, VF) (std::integral_constant<int, ...> each): R the cursor
// rank covering the reduction nest (2 for the packed layouts, 4 for the
// rest), VR the elements per reduction position and VF the features per
// thread, at most one of them above 1.  A kernel lists the widths it is
// instantiated for: one for the call's widest data type, and for a kernel
// that reads only x also the width of a float dy (backward).
template <typename ReduceWidths, typename FeatureWidths, typename Body>
void with_walk_shape(const FeatureLayout& layout, Body&& body) {
    using One = std::integral_constant<int, 1>;
    auto with_rank = [&](auto vr, auto vf) {
        if (layout.reduce.rank <= 2)
            body(std::integral_constant<int, 2>{}, vr, vf);
        else
            body(std::integral_constant<int, 4>{}, vr, vf);
    };
    bool done = true;
    if (layout.vector_width > 1)
        done = pick_width(layout.vector_width, ReduceWidths{}, [&](auto vr) { with_rank(vr, One{}); });
    else if (layout.features_per_thread > 1)
        done = pick_width(layout.features_per_thread, FeatureWidths{}, [&](auto vf) { with_rank(One{}, vf); });
    else
        with_rank(One{}, One{});
    if (!done)
        fail(miopenStatusInternalError, "GPU backend: no kernel instance for vector widths ", layout.vector_width,
             " x ", layout.features_per_thread);
}

// 16-byte vectors of the widest of the given element types (the planner's
// rule for elements per reduction position).
template <typename... Ts>
constexpr int vector_width_of() {
    std::size_t widest = 1;
    for (std::size_t size : {sizeof(Ts)...}) widest = size > widest ? size : widest;
    return static_cast<int>(16 / widest);
}

// The planner's rule for features per thread.
template <typename... Ts>
constexpr int feature_width_of() {
    return vector_width_of<Ts...>() < kMaxFeaturesPerThread ? vector_width_of<Ts...>() : kMaxFeaturesPerThread;
}

// with_walk_shape for a kernel instantiated for the widths of the data
// types Ts of its call.
template <typename... Ts, typename Body>
void with_walk_shape_of(const FeatureLayout& layout, Body&& body) {
    with_walk_shape<Widths<vector_width_of<Ts...>()>, Widths<feature_width_of<Ts...>()>>(layout,
                                                                                          std::forward<Body>(body));
}

// with_walk_shape with cursor rank 1 (LinearCursor, nest_walk.h) for
// reduction nests of rank <= 1, the packed layouts: for the kernels written
// for it (group norm's slices walks), which then exist for ranks 1, 2 and 4.
template <typename ReduceWidths, typename FeatureWidths, typename Body>
void with_linear_walk_shape(const FeatureLayout& layout, Body&& body) {
    with_walk_shape<ReduceWidths, FeatureWidths>(layout, [&](auto rank, auto vr, auto vf) {
        if constexpr (decltype(rank)::value == 2) {
            if (layout.reduce.rank <= 1) {
                body(std::integral_constant<int, 1>{}, vr, vf);
                return;
            }
        }
        body(rank, vr, vf);
    });
}

// with_linear_walk_shape for the widths of the data types Ts of a call.
template <typename... Ts, typename Body>
void with_linear_walk_shape_of(const FeatureLayout& layout, Body&& body) {
    with_linear_walk_shape<Widths<vector_width_of<Ts...>()>, Widths<feature_width_of<Ts...>()>>(
        layout, std::forward<Body>(body));
}

// with_walk_shape_of, or for a kernel instance with a fused activation
// (Fused) the one-element walk alone: the planner gives such calls no
// vectors (plan_layout's `vectors`), so each fused kernel exists for two
// cursor ranks instead of six walk shapes.  Its per-element activation
// calls, not vector width, bound it.
template <bool Fused, typename... Ts, typename Body>
void with_walk_shape_for(const FeatureLayout& layout, Body&& body) {
    if constexpr (Fused)
        with_walk_shape<Widths<>, Widths<>>(layout, std::forward<Body>(body));
    else
        with_walk_shape_of<Ts...>(layout, std::forward<Body>(body));
}

}  // namespace gpu
}  // namespace mbn
