// Reading and writing per-feature parameter tensors (scale, bias,
// statistics and their gradients) as arrays of double indexed by the walk
// plan's feature position.  Each is read once and written once per call, in
// its own dtype (parameters of one call may differ in type).
#pragma once

#include "common/problem.hpp"
#include "cpu/bn_math.hpp"
#include "cpu/dtype_dispatch.hpp"
#include "cpu/element.hpp"
#include "cpu/walk_passes.hpp"
#include "cpu/walk_plan.hpp"

namespace mbn::cpu {

inline void read_param(const WalkPlan& plan, const TensorArg& t, double* values) {
    with_data_type(t.dtype, [&](auto tag) {
        using Tp = typename decltype(tag)::type;
        const Tp* data = static_cast<const Tp*>(t.data);
        run_feature_ranges(plan, 1, [&](std::int64_t begin, std::int64_t end) {
            for_each_feature(plan, t.stride, begin, end,
                             [&](std::int64_t p, std::int64_t at) { values[p] = load_as<double>(data[at]); });
        });
    });
}

// out = alpha * values + beta * out, reading out only when beta != 0.
inline void write_param_blended(const WalkPlan& plan, const TensorArg& t, const double* values, Blend b) {
    with_data_type(t.dtype, [&](auto tag) {
        using Tp = typename decltype(tag)::type;
        Tp* data = static_cast<Tp*>(t.data);
        run_feature_ranges(plan, 1, [&](std::int64_t begin, std::int64_t end) {
            for_each_feature(plan, t.stride, begin, end, [&](std::int64_t p, std::int64_t at) {
                const double prior = b.reads_prior() ? load_as<double>(data[at]) : 0.0;
                data[at] = store_from<Tp>(blend(values[p], b.alpha, b.beta, prior));
            });
        });
    });
}

inline void write_param(const WalkPlan& plan, const TensorArg& t, const double* values) {
    write_param_blended(plan, t, values, Blend{});
}

}  // namespace mbn::cpu
