// The passes of the CPU batch norm (and group norm) over a WalkPlan, each
// a policy for walk_traversal.hpp's traversals, generic in the storage types
// (Tx for x/y, Tg for dy/dx) and the compute type C:
//   StatisticsPass  per (feature, block): Σ(x - c), Σ(x - c)²
//   GradientPass    per (feature, block): Σg, Σg·(x - c) [, Σ(x - c), Σ(x - c)²]
//   NormalizePass   y  = (x - mean) * k + b (+ beta * y) [, then an activation]
//   BackpropPass    dx = g*k_dy + (x - mean)*k_x + k_0 (+ beta * dx)
// where c is a per-feature center (see span_kernels.hpp) and g is dy, or dy
// times the derivative of a fused activation (GradientInput).  A block's sums go
// to partial_index(p, k) and are added up in block order afterwards
// (sum_blocks), so the result does not depend on which thread computed what.
// Every pass covers all of the plan's repetitions (WalkPlan::repeats).
// Run one with traverse(plan, scope, staging, pass).
#pragma once

#include "common/activation.hpp"
#include "common/numerics.hpp"
#include "common/problem.hpp"
#include "cpu/swish_kernels.hpp"
#include "cpu/walk_traversal.hpp"

#include <algorithm>
#include <tuple>
#include <type_traits>

namespace mbn::cpu {

// Per-feature coefficient arrays, indexed by the plan's feature position.
template <typename C>
struct NormalizeArrays {
    C *mean, *k, *b;
    NormalizeArrays(Workspace& ws, std::int64_t n) : mean(ws.take<C>(n)), k(ws.take<C>(n)), b(ws.take<C>(n)) {}
    void set(std::int64_t p, const NormalizeCoefficients<C>& c) const { mean[p] = c.mean, k[p] = c.k, b[p] = c.b; }
    NormalizeCoefficients<C> at(std::int64_t p) const { return {mean[p], k[p], b[p]}; }
    NormalizeRowCoefficients<C> from(std::int64_t p) const { return {mean + p, k + p, b + p}; }
};

// Whether a backward pass computes dx in float: float arithmetic, row
// kernels, and at least kFloatBackpropMinCount values per feature
// (common/numerics.hpp).  On AMD EPYC (Zen 3) the NHWC dx pass got 5-15%
// faster from memory, up to 1.5x from cache; the column kernels, already
// faster than the rows, keep double.
template <typename C>
bool backprop_in_float(const WalkPlan& plan) {
    return std::is_same_v<C, float> && plan.rows() && float_backprop_enough(plan.reduction);
}

struct BackpropArrays {
    double *mean, *k_dy, *k_x, *k_0;
    // Float copies when dx is computed in float: the mean rounded to float,
    // the rest of it folded into k_0 (null otherwise).
    float *mean_f = nullptr, *k_dy_f = nullptr, *k_x_f = nullptr, *k_0_f = nullptr;
    // Two workspace arrays, not eight: a backward through an activation that
    // recomputes its statistics takes nearly all of the Workspace's buffers.
    BackpropArrays(Workspace& ws, std::int64_t n, bool in_float = false) {
        double* d = ws.take<double>(4 * n);
        mean = d, k_dy = d + n, k_x = d + 2 * n, k_0 = d + 3 * n;
        if (!in_float) return;
        float* f = ws.take<float>(4 * n);
        mean_f = f, k_dy_f = f + n, k_x_f = f + 2 * n, k_0_f = f + 3 * n;
    }
    void set(std::int64_t p, const BackpropCoefficients& c) const {
        mean[p] = c.mean, k_dy[p] = c.k_dy, k_x[p] = c.k_x, k_0[p] = c.k_0;
        if (!mean_f) return;
        mean_f[p] = static_cast<float>(c.mean);
        const double rest = c.mean - static_cast<double>(mean_f[p]);
        k_dy_f[p] = static_cast<float>(c.k_dy);
        k_x_f[p] = static_cast<float>(c.k_x);
        // rest == 0 (the usual case) must not turn an infinite k_x into NaN.
        k_0_f[p] = static_cast<float>(rest == 0.0 ? c.k_0 : c.k_0 - rest * c.k_x);
    }
    bool in_float() const { return mean_f != nullptr; }
    BackpropCoefficients at(std::int64_t p) const { return {mean[p], k_dy[p], k_x[p], k_0[p]}; }
    BackpropRowCoefficients<double> from(std::int64_t p) const { return {mean + p, k_dy + p, k_x + p, k_0 + p}; }
    BackpropRowCoefficients<float> floats_from(std::int64_t p) const {
        return {mean_f + p, k_dy_f + p, k_x_f + p, k_0_f + p};
    }
};

// An activation applied to NormalizePass's result: group norm's fused
// swish, or batch norm's fused activation f (common/activation.hpp).  For
// batch norm the coefficients then give z without alpha, and apply() makes
// alpha * f(z) (the front refuses a blend with beta != 0 there).
template <typename C>
struct OutputActivation {
    bool swish = false;
    C beta = 1;
    ActivationSpec fused{};
    C alpha = 1;

    bool active() const { return swish || !fused.identity(); }
    // The alpha normalize_coefficients folds in: the blend's, unless f comes after.
    float coefficient_alpha(const Blend& out) const { return fused.identity() ? out.alpha : 1.0f; }
    void apply(C* values, std::int64_t n) const {
        if (swish) span_swish(values, n, beta);
        else if (!fused.identity())
            for (std::int64_t i = 0; i < n; ++i) values[i] = alpha * activation_forward(fused, values[i]);
    }
};

template <typename C>
OutputActivation<C> fused_activation(const ActivationSpec& spec, const Blend& out) {
    OutputActivation<C> act;
    act.fused = spec;
    act.alpha = static_cast<C>(out.alpha);
    return act;
}

// What GradientPass and BackpropPass take as the gradient g: dy itself
// (plain batch norm), or dy * f'(z) with z = (x - mean) * k + b per feature,
// the pre-activation value of a fused swish (group norm) or activation
// (batch norm).  The derivative is recomputed from x on each pass rather
// than stored.
template <typename C>
struct GradientInput {
    const NormalizeArrays<C>* swish_z = nullptr;  // z's coefficients per feature; null: g = dy
    C beta = 1;
    ActivationSpec fused_spec{};  // not the identity: f is this instead of swish

    static GradientInput fused(const NormalizeArrays<C>& z, const ActivationSpec& spec) {
        GradientInput in;
        in.swish_z = &z;
        in.fused_spec = spec;
        return in;
    }
    bool plain() const { return swish_z == nullptr; }
    // g for n values of feature p, written to staging unless plain.
    const C* of_span(std::int64_t p, const C* x, const C* dy, C* staging, std::int64_t n) const {
        if (plain()) return dy;
        if (fused_spec.identity()) {
            span_swish_gradient(x, dy, staging, n, swish_z->at(p), beta);
        } else {
            const NormalizeCoefficients<C> z = swish_z->at(p);
            for (std::int64_t i = 0; i < n; ++i)
                staging[i] = dy[i] * activation_derivative(fused_spec, (x[i] - z.mean) * z.k + z.b);
        }
        return staging;
    }
    // g for one row of features [first, first + n), written to staging unless plain.
    const C* of_row(std::int64_t first, const C* x, const C* dy, C* staging, std::int64_t n) const {
        if (plain()) return dy;
        if (fused_spec.identity()) {
            row_swish_gradient(x, dy, staging, n, swish_z->from(first), beta);
        } else {
            const NormalizeRowCoefficients<C> z = swish_z->from(first);
            for (std::int64_t i = 0; i < n; ++i)
                staging[i] = dy[i] * activation_derivative(fused_spec, (x[i] - z.mean[i]) * z.k[i] + z.b[i]);
        }
        return staging;
    }
};

// ---- the passes ------------------------------------------------------------

// center[p] = the shift of feature p's sums when its mean is not known: its
// first value (sample 0, position 0; common/numerics.hpp).  One repetition
// (batch norm).
template <typename Tx, typename C = typename Element<Tx>::Compute>
void first_values(const WalkPlan& plan, const PassScope& scope, const Tx* x, double* center) {
    run_feature_ranges(plan, scope, 1, [&](std::int64_t begin, std::int64_t end) {
        for_each_feature(plan, plan.strides[0], begin, end,
                         [&](std::int64_t p, std::int64_t at) { center[p] = statistics_shift(load_as<C>(x[at])); });
    });
}

// A pass's output options: blended when beta != 0; results written straight
// to the output stream past the cache when `may_stream` and the pass reads
// and writes `pass_bytes`, as much as the last-level cache holds or more.
template <typename C>
struct PassOutput {
    OutputMode<C> staged, direct;
    PassOutput(float beta, bool may_stream, std::int64_t pass_bytes)
        : staged{beta != 0.0f, false, static_cast<C>(beta)},
          direct{staged.blend, may_stream && stream_output(pass_bytes), staged.beta} {}
};

inline std::int64_t plan_values(const WalkPlan& plan) { return plan.repeats * plan.features * plan.reduction; }

// Slot 0 is x.  Per (feature, block): s1 = Σ(x - center), s2 = Σ(x - center)².
template <typename Tx, typename C>
struct StatisticsPass {
    using Compute = C;
    static constexpr int kInputs = 1;
    std::tuple<const Tx*> data;
    const double* center;
    double *s1, *s2;

    bool plain() const { return true; }
    void clear(std::int64_t at, std::int64_t n) const {
        std::fill(s1 + at, s1 + at + n, 0.0);
        std::fill(s2 + at, s2 + at + n, 0.0);
    }
    MomentSums at(std::int64_t partial) const { return {s1 + partial, s2 + partial}; }
    void segments(const SegmentArgs<C>& a) const {
        segments_moments(a.in[0], a.len, a.count, center + a.feature, at(a.partial), a.stride);
    }
    void span(const SpanArgs<C>& a) const { span_moments(a.in[0], a.n, center[a.feature], at(a.partial)); }
    void rows(const RowArgs<C>& a) const { row_moments(a.in[0], a.rows, center + a.feature, a.count, at(a.partial)); }
};

// Slots 0 and 1 are x and dy.  Per (feature, block): sdy = Σg,
// dot = Σg·(x - center), and when s1 is not null s1/s2 as StatisticsPass,
// where g is `in`'s gradient (dy itself unless an activation is fused).
template <typename Tx, typename Tg, typename C>
struct GradientPass {
    using Compute = C;
    static constexpr int kInputs = 2;
    std::tuple<const Tx*, const Tg*> data;
    const double* center;
    GradientSums sums;
    GradientInput<C> in{};

    bool plain() const { return in.plain(); }
    void clear(std::int64_t at, std::int64_t n) const {
        for (double* a : {sums.sdy, sums.dot, sums.s1, sums.s2})
            if (a) std::fill(a + at, a + at + n, 0.0);
    }
    GradientSums at(std::int64_t partial) const {
        return {sums.sdy + partial, sums.dot + partial, sums.s1 ? sums.s1 + partial : nullptr,
                sums.s1 ? sums.s2 + partial : nullptr};
    }
    void segments(const SegmentArgs<C>& a) const {
        segments_gradient(a.in[0], a.in[1], a.len, a.count, center + a.feature, at(a.partial), a.stride);
    }
    void span(const SpanArgs<C>& a) const {
        const C* g = in.of_span(a.feature, a.in[0], a.in[1], a.spare, a.n);
        span_gradient(a.in[0], g, a.n, center[a.feature], at(a.partial));
    }
    void rows(const RowArgs<C>& a) const {
        const RowSpan<const C> g{in.of_row(a.feature, a.in[0].data, a.in[1].data, a.spare, a.count), a.in[1].stride};
        row_gradient(a.in[0], g, a.rows, center + a.feature, a.count, at(a.partial));
    }
};

// Slots 0 and 1 are x and y.  With an activation, results are not streamed
// past the cache: the activation reads them back.
template <typename Tx, typename C>
struct NormalizePass : PassOutput<C> {
    using Compute = C;
    static constexpr int kInputs = 1;
    std::tuple<const Tx*, Tx*> data;
    const NormalizeArrays<C>& coef;
    OutputActivation<C> act;

    NormalizePass(const WalkPlan& plan, const Tx* x, Tx* y, const NormalizeArrays<C>& coef, float beta,
                  const OutputActivation<C>& act = {})
        : PassOutput<C>(beta, !act.active(), plan_values(plan) * static_cast<std::int64_t>(2 * sizeof(Tx))),
          data{x, y}, coef(coef), act(act) {}
    bool plain() const { return true; }
    void segments(const SegmentArgs<C>& a) const {
        segments_normalize(a.in[0], a.out, a.len, a.count, coef.from(a.feature), a.mode);
        act.apply(a.out, a.len * a.count);  // the runs lie back to back
    }
    void span(const SpanArgs<C>& a) const {
        span_normalize(a.in[0], a.out, a.n, coef.at(a.feature), a.mode);
        act.apply(a.out, a.n);
    }
    void rows(const RowArgs<C>& a) const {
        row_normalize(a.in[0], a.out, a.rows, a.count, coef.from(a.feature), a.mode);
        for (std::int64_t r = 0; r < a.rows; ++r) act.apply(a.out.data + r * a.out.stride, a.count);
    }
};

// Slots 0, 1 and 2 are x, dy and dx; g is `in`'s gradient, as GradientPass.
template <typename Tx, typename Tg, typename C>
struct BackpropPass : PassOutput<C> {
    using Compute = C;
    static constexpr int kInputs = 2;
    std::tuple<const Tx*, const Tg*, Tg*> data;
    const BackpropArrays& coef;
    GradientInput<C> in;

    BackpropPass(const WalkPlan& plan, const Tx* x, const Tg* dy, Tg* dx, const BackpropArrays& coef, float beta,
                 const GradientInput<C>& in = {})
        : PassOutput<C>(beta, true, plan_values(plan) * static_cast<std::int64_t>(sizeof(Tx) + 2 * sizeof(Tg))),
          data{x, dy, dx}, coef(coef), in(in) {}
    bool plain() const { return in.plain(); }
    void segments(const SegmentArgs<C>& a) const {
        segments_backprop(a.in[0], a.in[1], a.out, a.len, a.count, coef.from(a.feature), a.mode);
    }
    void span(const SpanArgs<C>& a) const {
        const C* g = in.of_span(a.feature, a.in[0], a.in[1], a.spare, a.n);
        span_backprop(a.in[0], g, a.out, a.n, coef.at(a.feature), a.mode);
    }
    void rows(const RowArgs<C>& a) const {
        const RowSpan<const C> g{in.of_row(a.feature, a.in[0].data, a.in[1].data, a.spare, a.count), a.in[1].stride};
        if constexpr (std::is_same_v<C, float>) {
            if (coef.in_float())
                return row_backprop(a.in[0], g, a.out, a.rows, a.count, coef.floats_from(a.feature), a.mode);
        }
        row_backprop(a.in[0], g, a.out, a.rows, a.count, coef.from(a.feature), a.mode);
    }
};

}  // namespace mbn::cpu
