// The passes of the CPU batch norm over a WalkPlan, generic in the storage
// types (Tx for x/y, Tg for dy/dx) and the compute type C:
//   statistics_pass  per (feature, block): Σ(x - c), Σ(x - c)²
//   gradient_pass    per (feature, block): Σg, Σg·(x - c) [, Σ(x - c), Σ(x - c)²]
//   normalize_pass   y  = (x - mean) * k + b (+ beta * y) [, then an activation]
//   backprop_pass    dx = g*k_dy + (x - mean)*k_x + k_0 (+ beta * dx)
// where c is a per-feature center (see span_kernels.hpp) and g is dy, or dy
// times the derivative of a fused activation (GradientInput).  A block's sums go
// to partial_index(p, k) and are added up in block order afterwards, so the
// result does not depend on which thread computed what.  Values that are not
// C in memory, or not unit-stride, are staged through per-thread scratch.
// Every pass covers all of the plan's repetitions (WalkPlan::repeats).
#pragma once

#include "common/activation.hpp"
#include "common/numerics.hpp"
#include "common/problem.hpp"
#include "cpu/element.hpp"
#include "cpu/span_convert.hpp"
#include "cpu/span_kernels.hpp"
#include "cpu/swish_kernels.hpp"
#include "cpu/thread_pool.hpp"
#include "cpu/walk_plan.hpp"
#include "cpu/workspace.hpp"

#include <algorithm>
#include <array>
#include <type_traits>

namespace mbn::cpu {

// Problems with fewer values than this run on the calling thread alone.
constexpr std::int64_t kSerialValues = 32768;

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
    return std::is_same_v<C, float> && plan.walk == Walk::rows && plan.reduction >= kFloatBackpropMinCount;
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

// Staging buffers, one per (thread, slot), taken before any task runs so
// that tasks never allocate.
template <typename C>
class Scratch {
public:
    Scratch(const WalkPlan& plan, Workspace& ws)
        : per_slot_(plan.walk == Walk::columns ? plan.chunk : plan.feature_block),
          data_(ws.take<C>(ThreadPool::instance().size() * kMaxSlots * per_slot_)) {}
    C* buffer(int thread, int slot) const { return data_ + (thread * kMaxSlots + slot) * per_slot_; }

private:
    std::int64_t per_slot_;
    C* data_;
};

// What a pass covers: the whole plan, its tasks spread over the thread pool;
// or units [first, last) of a fused plan (every repetition-0 task of their
// features), run on the calling thread `thread`.
struct PassScope {
    std::int64_t first = 0, last = -1;
    int thread = 0;
    bool whole() const { return last < 0; }
};
inline constexpr PassScope kWholePlan{};

// The features [begin, end) of one repetition that a scope covers.
struct FeatureRange {
    std::int64_t begin, end;
};
inline FeatureRange scope_features(const WalkPlan& plan, const PassScope& scope) {
    if (scope.whole()) return {0, plan.features};
    return {scope.first * plan.unit_features(), std::min(plan.features, scope.last * plan.unit_features())};
}

// Runs body(scope) over the plan: once with kWholePlan, each pass then
// spreading its tasks over the threads; or, fused, once per unit, the units
// spread over the threads (all on the caller when the problem is too small to
// pay for waking the workers).
template <typename Body>
void run_scopes(const WalkPlan& plan, Body&& body) {
    if (!plan.fused) {
        body(kWholePlan);
    } else if (plan.features * plan.reduction < kSerialValues) {
        body(PassScope{0, plan.units(), 0});
    } else {
        ThreadPool::instance().parallel_for(plan.units(), [&](std::int64_t begin, std::int64_t end, int thread) {
            for (std::int64_t unit = begin; unit < end; ++unit) body(PassScope{unit, unit + 1, thread});
        });
    }
}

// Runs body(task, thread) for every task of the scope, with the task as a
// RepeatTask: for the whole plan every task of every repetition, in parallel
// when the problem is big enough to pay for waking the workers.
template <typename Body>
void run_tasks(const WalkPlan& plan, const PassScope& scope, Body&& body) {
    if (!scope.whole()) {  // in memory order: reduction block by block
        const bool columns = plan.walk == Walk::columns;
        const std::int64_t outer = columns ? plan.runs : plan.blocks, inner = columns ? plan.pieces : 1;
        for (std::int64_t k = 0; k < outer; ++k)
            for (std::int64_t u = scope.first; u < scope.last; ++u)
                for (std::int64_t i = 0; i < inner; ++i)
                    body(repeat_task(plan, (k * plan.units() + u) * inner + i), scope.thread);
        return;
    }
    auto range = [&](std::int64_t begin, std::int64_t end, int thread) {
        for (std::int64_t t = begin; t < end; ++t) body(repeat_task(plan, t), thread);
    };
    const std::int64_t tasks = plan.repeats * plan.tasks();
    if (plan.repeats * plan.features * plan.reduction < kSerialValues) {
        range(0, tasks, 0);
        return;
    }
    ThreadPool::instance().parallel_for(tasks, range);
}

// Runs body(begin, end) over ranges covering [0, count), in parallel when
// count times the work of each item (in units of a few flops) is worth
// waking the workers.
template <typename Body>
void run_ranges(std::int64_t count, std::int64_t work_per_item, Body&& body) {
    if (count * work_per_item < 2 * kSerialValues) {
        body(std::int64_t{0}, count);
        return;
    }
    ThreadPool::instance().parallel_for(count, [&](std::int64_t begin, std::int64_t end, int) { body(begin, end); });
}

// run_ranges over the features of one repetition.
template <typename Body>
void run_feature_ranges(const WalkPlan& plan, std::int64_t work_per_feature, Body&& body) {
    run_ranges(plan.features, work_per_feature, body);
}

// body(begin, end) over the scope's features: run_feature_ranges for the
// whole plan, one call on this thread for a unit.
template <typename Body>
void run_feature_ranges(const WalkPlan& plan, const PassScope& scope, std::int64_t work_per_feature, Body&& body) {
    if (scope.whole()) return run_feature_ranges(plan, work_per_feature, body);
    const FeatureRange r = scope_features(plan, scope);
    body(r.begin, r.end);
}

// Runs body(p) for every feature of the scope, as run_feature_ranges.
template <typename Body>
void run_features(const WalkPlan& plan, const PassScope& scope, std::int64_t work_per_feature, Body&& body) {
    run_feature_ranges(plan, scope, work_per_feature, [&](std::int64_t begin, std::int64_t end) {
        for (std::int64_t p = begin; p < end; ++p) body(p);
    });
}

template <typename Body>
void run_features(const WalkPlan& plan, std::int64_t work_per_feature, Body&& body) {
    run_features(plan, kWholePlan, work_per_feature, body);
}

// total[q] = Σ over blocks k, in increasing k, of feature q's partial sums
// for each array pair, q covering the features of every repetition (of the
// unit's features for a fused scope); the loop order follows the partials'
// layout.
template <int Arrays>
void sum_blocks(const WalkPlan& plan, const PassScope& scope, const std::array<const double*, Arrays>& part,
                const std::array<double*, Arrays>& total) {
    const std::int64_t F = plan.features;
    const auto sum_range = [&](std::int64_t begin, std::int64_t end) {
        for (int a = 0; a < Arrays; ++a) {
            if (plan.walk == Walk::columns) {
                // partial_index(p, k) = p * blocks + k, repetition after repetition.
                for (std::int64_t q = begin; q < end; ++q) {
                    double sum = 0.0;
                    for (std::int64_t k = 0; k < plan.blocks; ++k) sum += part[a][q * plan.blocks + k];
                    total[a][q] = sum;
                }
                continue;
            }
            for (std::int64_t q = begin; q < end;) {  // the part of [begin, end) in one repetition
                const std::int64_t r = q / F, stop = std::min(end, (r + 1) * F);
                const double* partials = part[a] + r * F * plan.blocks;
                double* sums = total[a] + r * F;
                std::fill(total[a] + q, total[a] + stop, 0.0);
                for (std::int64_t k = 0; k < plan.blocks; ++k) {
                    const double* row = partials + plan.partial_index(0, k);
                    for (std::int64_t p = q - r * F; p < stop - r * F; ++p) sums[p] += row[p];
                }
                q = stop;
            }
        }
    };
    if (!scope.whole()) {
        const FeatureRange r = scope_features(plan, scope);
        sum_range(r.begin, r.end);
        return;
    }
    run_ranges(plan.repeats * F, plan.blocks, sum_range);
}

// An activation applied to normalize_pass's result: group norm's fused
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

// What gradient_pass and backprop_pass take as the gradient g: dy itself
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

// ---- columns -------------------------------------------------------------

// One block of one feature: a single run, with its start in every slot.
struct ColumnRun {
    std::int64_t block, len;
    std::array<std::int64_t, kMaxSlots> offset;
};

// Column task `task`: features [first, first + count), and the run of the
// first one.
struct ColumnTask {
    std::int64_t first, count;
    ColumnRun run;
};

inline ColumnTask column_task(const WalkPlan& plan, std::int64_t task) {
    const std::int64_t piece = task % plan.pieces;
    const std::int64_t group = (task / plan.pieces) % plan.groups;
    const std::int64_t run = task / (plan.pieces * plan.groups);
    const DimCursor outer(plan.outer, plan.slots, run);
    const std::int64_t start = piece * plan.chunk;
    ColumnTask t{group * plan.group, 0, {run * plan.pieces + piece, std::min(plan.chunk, plan.inner_len - start), {}}};
    t.count = std::min(plan.features, t.first + plan.group) - t.first;
    for (int s = 0; s < plan.slots; ++s)
        t.run.offset[s] = plan.feature_offset(s, t.first) + outer.offset(s) + start * plan.inner_stride[s];
    return t;
}

// Calls fn(p, run) for each feature of column task `task`.
template <typename Fn>
void for_each_column(const WalkPlan& plan, std::int64_t task, Fn&& fn) {
    ColumnTask t = column_task(plan, task);
    std::array<std::int64_t, kMaxSlots> base{};  // the run's offset less the feature's
    for (int s = 0; s < plan.slots; ++s) base[s] = t.run.offset[s] - plan.feature_offset(s, t.first);
    walk_features<kMaxSlots>(plan, {&plan.strides[0], &plan.strides[1], &plan.strides[2]}, t.first,
                             t.first + t.count, [&](std::int64_t p, const std::array<std::int64_t, kMaxSlots>& at) {
                                 for (int s = 0; s < plan.slots; ++s) t.run.offset[s] = base[s] + at[s];
                                 fn(p, t.run);
                             });
}

template <typename T, typename C>
constexpr bool kSameType = std::is_same_v<std::remove_const_t<T>, C>;

// A run of slot `slot` as contiguous C: in place, or gathered into staging.
template <typename T, typename C>
const C* column_input(const WalkPlan& plan, int slot, const T* data, const ColumnRun& r, C* staging) {
    const std::int64_t step = plan.inner_stride[slot];
    if constexpr (kSameType<T, C>) {
        if (step == 1 || r.len == 1) return data + r.offset[slot];
    }
    const T* src = data + r.offset[slot];
    if constexpr (!kSameType<T, C>) {
        if (step == 1) {
            convert_span(src, staging, r.len);
            return staging;
        }
    }
    for (std::int64_t i = 0; i < r.len; ++i) staging[i] = load_as<C>(src[i * step]);
    return staging;
}

// Where a run's output is computed: in place, or in staging (holding the
// prior when `read_prior`) to be stored with column_output_store.
template <typename T, typename C>
C* column_output(const WalkPlan& plan, int slot, T* data, const ColumnRun& r, C* staging, bool read_prior) {
    if constexpr (kSameType<T, C>) {
        if (plan.inner_stride[slot] == 1 || r.len == 1) return data + r.offset[slot];
    }
    if (read_prior) column_input(plan, slot, data, r, staging);
    return staging;
}

template <typename T, typename C>
void column_output_store(const WalkPlan& plan, int slot, T* data, const ColumnRun& r, const C* result) {
    T* dst = data + r.offset[slot];
    if constexpr (kSameType<T, C>) {
        if (result == dst) return;
    }
    const std::int64_t step = plan.inner_stride[slot];
    if constexpr (!kSameType<T, C>) {
        if (step == 1) {
            convert_span(result, dst, r.len);
            return;
        }
    }
    for (std::int64_t i = 0; i < r.len; ++i) dst[i * step] = store_from<T>(result[i]);
}

// ---- rows ----------------------------------------------------------------

// Calls fn(cursor) for each row of row block k; cursor.offset(s) is where
// the row starts in slot s.
template <typename Fn>
void for_each_row(const WalkPlan& plan, std::int64_t k, Fn&& fn) {
    const std::int64_t count = plan.block_count(k);
    DimCursor rows(plan.row_dims, plan.slots, k * plan.row_block);
    for (std::int64_t r = 0; r < count; ++r, rows.next()) fn(rows);
}

template <typename T, typename C>
const C* row_input(const T* data, std::int64_t n, C* staging) {
    if constexpr (std::is_same_v<T, C>) {
        return data;
    } else {
        convert_span(data, staging, n);
        return staging;
    }
}

// Where a row's output is computed: in place, or in staging (holding the
// prior when `read_prior`) to be stored with row_output_store.
template <typename T, typename C>
C* row_output(T* data, std::int64_t n, C* staging, bool read_prior) {
    if constexpr (std::is_same_v<T, C>) {
        return data;
    } else {
        if (read_prior) row_input(data, n, staging);
        return staging;
    }
}

template <typename T, typename C>
void row_output_store(T* data, std::int64_t n, const C* staging) {
    if constexpr (!std::is_same_v<T, C>) convert_span(staging, data, n);
}

struct RowTile {
    std::int64_t block, first, count;  // row block, first feature, features
};

// Whether a tile's rows are evenly spaced in every slot (one reduction dim
// after merging), so a kernel can take them all in one call.
inline bool rows_evenly_spaced(const WalkPlan& plan) { return plan.row_dims.count <= 1; }

// The tile's rows of slot `slot`, as compute-type memory (even spacing assumed).
template <typename C, typename T>
RowSpan<T> tile_rows(const WalkPlan& plan, const RowTile& tile, int slot, T* data) {
    const DimCursor first(plan.row_dims, plan.slots, tile.block * plan.row_block);
    return {data + first.offset(slot) + tile.first, plan.row_dims.count == 1 ? plan.row_dims.stride[slot][0] : 0};
}

inline RowTile row_tile(const WalkPlan& plan, std::int64_t task) {
    const std::int64_t fb = task % plan.feature_blocks;
    const std::int64_t first = fb * plan.feature_block;
    return {task / plan.feature_blocks, first, std::min(plan.feature_block, plan.features - first)};
}

// ---- the passes ------------------------------------------------------------

// center[p] = feature p's first value (sample 0, position 0): the shift of
// its sums when its mean is not known.  One repetition (batch norm).
template <typename Tx>
void first_values(const WalkPlan& plan, const PassScope& scope, const Tx* x, double* center) {
    run_feature_ranges(plan, scope, 1, [&](std::int64_t begin, std::int64_t end) {
        for_each_feature(plan, plan.strides[0], begin, end,
                         [&](std::int64_t p, std::int64_t at) { center[p] = load_as<double>(x[at]); });
    });
}

// Slot 0 is x.  Per (feature, block): s1 = Σ(x - center), s2 = Σ(x - center)².
template <typename Tx, typename C>
void statistics_pass(const WalkPlan& plan, const PassScope& scope, const Tx* x_all, const double* center_all, const Scratch<C>& scratch,
                     double* s1_all, double* s2_all) {
    if (plan.walk == Walk::columns && plan.segmented && kSameType<Tx, C>) {
        run_tasks(plan, scope, [&](const RepeatTask& rt, int) {
            const ColumnTask t = column_task(plan, rt.task);
            const std::int64_t at = rt.partials + plan.partial_index(t.first, t.run.block);
            segments_moments(reinterpret_cast<const C*>(x_all) + rt.data[0] + t.run.offset[0], t.run.len, t.count,
                             center_all + rt.features + t.first, {s1_all + at, s2_all + at}, plan.blocks);
        });
    } else if (plan.walk == Walk::columns) {
        run_tasks(plan, scope, [&](const RepeatTask& rt, int thread) {
            const Tx* x = x_all + rt.data[0];
            C* staging = scratch.buffer(thread, 0);
            for_each_column(plan, rt.task, [&](std::int64_t p, const ColumnRun& r) {
                const std::int64_t at = rt.partials + plan.partial_index(p, r.block);
                s1_all[at] = s2_all[at] = 0.0;
                span_moments(column_input(plan, 0, x, r, staging), r.len, center_all[rt.features + p],
                             {s1_all + at, s2_all + at});
            });
        });
    } else {
        run_tasks(plan, scope, [&](const RepeatTask& rt, int thread) {
            const Tx* x = x_all + rt.data[0];
            const double* center = center_all + rt.features;
            const RowTile tile = row_tile(plan, rt.task);
            const std::int64_t at = rt.partials + plan.partial_index(tile.first, tile.block);
            std::fill(s1_all + at, s1_all + at + tile.count, 0.0);
            std::fill(s2_all + at, s2_all + at + tile.count, 0.0);
            const MomentSums out{s1_all + at, s2_all + at};
            if constexpr (kSameType<Tx, C>) {
                if (rows_evenly_spaced(plan)) {
                    row_moments(tile_rows<C>(plan, tile, 0, x), plan.block_count(tile.block), center + tile.first,
                                tile.count, out);
                    return;
                }
            }
            C* staging = scratch.buffer(thread, 0);
            for_each_row(plan, tile.block, [&](const DimCursor& row) {
                row_moments({row_input(x + row.offset(0) + tile.first, tile.count, staging), 0}, 1,
                            center + tile.first, tile.count, out);
            });
        });
    }
}

// Slots 0 and 1 are x and dy.  Per (feature, block): sdy = Σg,
// dot = Σg·(x - center), and when s1 is not null s1/s2 as statistics_pass,
// where g is `in`'s gradient (dy itself unless a swish is fused).
template <typename Tx, typename Tg, typename C>
void gradient_pass(const WalkPlan& plan, const PassScope& scope, const Tx* x_all, const Tg* dy_all, const double* center_all,
                   const Scratch<C>& scratch, GradientSums sums, const GradientInput<C>& in = {}) {
    const auto at_block = [&](std::int64_t at) {
        return GradientSums{sums.sdy + at, sums.dot + at, sums.s1 ? sums.s1 + at : nullptr,
                            sums.s1 ? sums.s2 + at : nullptr};
    };
    if (plan.walk == Walk::columns && plan.segmented && kSameType<Tx, C> && kSameType<Tg, C> && in.plain()) {
        run_tasks(plan, scope, [&](const RepeatTask& rt, int) {
            const ColumnTask t = column_task(plan, rt.task);
            segments_gradient(reinterpret_cast<const C*>(x_all) + rt.data[0] + t.run.offset[0],
                              reinterpret_cast<const C*>(dy_all) + rt.data[1] + t.run.offset[1], t.run.len, t.count,
                              center_all + rt.features + t.first,
                              at_block(rt.partials + plan.partial_index(t.first, t.run.block)), plan.blocks);
        });
    } else if (plan.walk == Walk::columns) {
        run_tasks(plan, scope, [&](const RepeatTask& rt, int thread) {
            const Tx* x = x_all + rt.data[0];
            const Tg* dy = dy_all + rt.data[1];
            C* stage_x = scratch.buffer(thread, 0);
            C* stage_dy = scratch.buffer(thread, 1);
            for_each_column(plan, rt.task, [&](std::int64_t p, const ColumnRun& r) {
                const GradientSums out = at_block(rt.partials + plan.partial_index(p, r.block));
                *out.sdy = *out.dot = 0.0;
                if (out.s1) *out.s1 = *out.s2 = 0.0;
                const C* in_x = column_input(plan, 0, x, r, stage_x);
                const C* g = in.of_span(rt.features + p, in_x, column_input(plan, 1, dy, r, stage_dy), stage_dy, r.len);
                span_gradient(in_x, g, r.len, center_all[rt.features + p], out);
            });
        });
    } else {
        run_tasks(plan, scope, [&](const RepeatTask& rt, int thread) {
            const Tx* x = x_all + rt.data[0];
            const Tg* dy = dy_all + rt.data[1];
            const double* center = center_all + rt.features;
            const RowTile tile = row_tile(plan, rt.task);
            const GradientSums out = at_block(rt.partials + plan.partial_index(tile.first, tile.block));
            for (double* a : {out.sdy, out.dot, out.s1, out.s2})
                if (a) std::fill(a, a + tile.count, 0.0);
            if constexpr (kSameType<Tx, C> && kSameType<Tg, C>) {
                if (rows_evenly_spaced(plan) && in.plain()) {
                    row_gradient(tile_rows<C>(plan, tile, 0, x), tile_rows<C>(plan, tile, 1, dy),
                                 plan.block_count(tile.block), center + tile.first, tile.count, out);
                    return;
                }
            }
            C* stage_x = scratch.buffer(thread, 0);
            C* stage_dy = scratch.buffer(thread, 1);
            for_each_row(plan, tile.block, [&](const DimCursor& row) {
                const C* in_x = row_input(x + row.offset(0) + tile.first, tile.count, stage_x);
                const C* g = in.of_row(rt.features + tile.first, in_x,
                                       row_input(dy + row.offset(1) + tile.first, tile.count, stage_dy), stage_dy,
                                       tile.count);
                row_gradient({in_x, 0}, {g, 0}, 1, center + tile.first, tile.count, out);
            });
        });
    }
}

// Slots 0 and 1 are x and y.  With an activation, results are not streamed
// past the cache: the activation reads them back.
template <typename Tx, typename C>
void normalize_pass(const WalkPlan& plan, const PassScope& scope, const Tx* x_all, Tx* y_all, const NormalizeArrays<C>& coef, float beta,
                    const Scratch<C>& scratch, const OutputActivation<C>& act = {}) {
    const std::int64_t values = plan.repeats * plan.features * plan.reduction;
    const bool stream = !act.active() && stream_output(values * static_cast<std::int64_t>(2 * sizeof(Tx)));
    const OutputMode<C> mode{beta != 0.0f, false, static_cast<C>(beta)};
    const OutputMode<C> direct{mode.blend, stream, mode.beta};  // for results written straight to y
    const bool blend = mode.blend;  // staged outputs need the prior read in
    if (plan.walk == Walk::columns && plan.segmented && kSameType<Tx, C>) {
        run_tasks(plan, scope, [&](const RepeatTask& rt, int) {
            const ColumnTask t = column_task(plan, rt.task);
            C* out = reinterpret_cast<C*>(y_all) + rt.data[1] + t.run.offset[1];
            segments_normalize(reinterpret_cast<const C*>(x_all) + rt.data[0] + t.run.offset[0], out, t.run.len,
                               t.count, coef.from(rt.features + t.first), direct);
            act.apply(out, t.run.len * t.count);  // segmented: the runs lie back to back
        });
    } else if (plan.walk == Walk::columns) {
        run_tasks(plan, scope, [&](const RepeatTask& rt, int thread) {
            const Tx* x = x_all + rt.data[0];
            Tx* y = y_all + rt.data[1];
            C* stage_x = scratch.buffer(thread, 0);
            C* stage_y = scratch.buffer(thread, 1);
            for_each_column(plan, rt.task, [&](std::int64_t p, const ColumnRun& r) {
                const C* in = column_input(plan, 0, x, r, stage_x);
                C* result = column_output(plan, 1, y, r, stage_y, blend);
                span_normalize(in, result, r.len, coef.at(rt.features + p), result != stage_y ? direct : mode);
                act.apply(result, r.len);
                column_output_store(plan, 1, y, r, result);
            });
        });
    } else {
        run_tasks(plan, scope, [&](const RepeatTask& rt, int thread) {
            const Tx* x = x_all + rt.data[0];
            Tx* y = y_all + rt.data[1];
            const RowTile tile = row_tile(plan, rt.task);
            const NormalizeRowCoefficients<C> c = coef.from(rt.features + tile.first);
            if constexpr (kSameType<Tx, C>) {
                if (rows_evenly_spaced(plan)) {
                    const RowSpan<C> out = tile_rows<C>(plan, tile, 1, y);
                    const std::int64_t rows = plan.block_count(tile.block);
                    row_normalize(tile_rows<C>(plan, tile, 0, x), out, rows, tile.count, c, direct);
                    for (std::int64_t r = 0; r < rows; ++r) act.apply(out.data + r * out.stride, tile.count);
                    return;
                }
            }
            C* stage_x = scratch.buffer(thread, 0);
            C* stage_y = scratch.buffer(thread, 1);
            for_each_row(plan, tile.block, [&](const DimCursor& row) {
                Tx* out = y + row.offset(1) + tile.first;
                const C* in = row_input(x + row.offset(0) + tile.first, tile.count, stage_x);
                C* result = row_output(out, tile.count, stage_y, blend);
                row_normalize({in, 0}, {result, 0}, 1, tile.count, c, result != stage_y ? direct : mode);
                act.apply(result, tile.count);
                row_output_store(out, tile.count, result);
            });
        });
    }
}

// Slots 0, 1 and 2 are x, dy and dx; g is `in`'s gradient, as gradient_pass.
template <typename Tx, typename Tg, typename C>
void backprop_pass(const WalkPlan& plan, const PassScope& scope, const Tx* x_all, const Tg* dy_all, Tg* dx_all, const BackpropArrays& coef,
                   float beta, const Scratch<C>& scratch, const GradientInput<C>& in = {}) {
    const std::int64_t values = plan.repeats * plan.features * plan.reduction;
    const bool stream = stream_output(values * static_cast<std::int64_t>(sizeof(Tx) + 2 * sizeof(Tg)));
    const OutputMode<C> mode{beta != 0.0f, false, static_cast<C>(beta)};
    const OutputMode<C> direct{mode.blend, stream, mode.beta};  // for results written straight to dx
    const bool blend = mode.blend;  // staged outputs need the prior read in
    if (plan.walk == Walk::columns && plan.segmented && kSameType<Tx, C> && kSameType<Tg, C> && in.plain()) {
        run_tasks(plan, scope, [&](const RepeatTask& rt, int) {
            const ColumnTask t = column_task(plan, rt.task);
            segments_backprop(reinterpret_cast<const C*>(x_all) + rt.data[0] + t.run.offset[0],
                              reinterpret_cast<const C*>(dy_all) + rt.data[1] + t.run.offset[1],
                              reinterpret_cast<C*>(dx_all) + rt.data[2] + t.run.offset[2], t.run.len, t.count,
                              coef.from(rt.features + t.first), direct);
        });
    } else if (plan.walk == Walk::columns) {
        run_tasks(plan, scope, [&](const RepeatTask& rt, int thread) {
            const Tx* x = x_all + rt.data[0];
            const Tg* dy = dy_all + rt.data[1];
            Tg* dx = dx_all + rt.data[2];
            C* stage_x = scratch.buffer(thread, 0);
            C* stage_dy = scratch.buffer(thread, 1);
            C* stage_dx = scratch.buffer(thread, 2);
            for_each_column(plan, rt.task, [&](std::int64_t p, const ColumnRun& r) {
                const C* in_x = column_input(plan, 0, x, r, stage_x);
                const C* g = in.of_span(rt.features + p, in_x, column_input(plan, 1, dy, r, stage_dy), stage_dy, r.len);
                C* result = column_output(plan, 2, dx, r, stage_dx, blend);
                span_backprop(in_x, g, result, r.len, coef.at(rt.features + p), result != stage_dx ? direct : mode);
                column_output_store(plan, 2, dx, r, result);
            });
        });
    } else {
        run_tasks(plan, scope, [&](const RepeatTask& rt, int thread) {
            const Tx* x = x_all + rt.data[0];
            const Tg* dy = dy_all + rt.data[1];
            Tg* dx = dx_all + rt.data[2];
            const RowTile tile = row_tile(plan, rt.task);
            const std::int64_t first = rt.features + tile.first;
            const auto kernel = [&](RowSpan<const C> in_x, RowSpan<const C> g, RowSpan<C> out, std::int64_t rows,
                                    const OutputMode<C>& m) {
                if constexpr (std::is_same_v<C, float>) {
                    if (coef.in_float()) return row_backprop(in_x, g, out, rows, tile.count, coef.floats_from(first), m);
                }
                row_backprop(in_x, g, out, rows, tile.count, coef.from(first), m);
            };
            if constexpr (kSameType<Tx, C> && kSameType<Tg, C>) {
                if (rows_evenly_spaced(plan) && in.plain()) {
                    kernel(tile_rows<C>(plan, tile, 0, x), tile_rows<C>(plan, tile, 1, dy),
                           tile_rows<C>(plan, tile, 2, dx), plan.block_count(tile.block), direct);
                    return;
                }
            }
            C* stage_x = scratch.buffer(thread, 0);
            C* stage_dy = scratch.buffer(thread, 1);
            C* stage_dx = scratch.buffer(thread, 2);
            for_each_row(plan, tile.block, [&](const DimCursor& row) {
                Tg* out = dx + row.offset(2) + tile.first;
                const C* in_x = row_input(x + row.offset(0) + tile.first, tile.count, stage_x);
                const C* g = in.of_row(rt.features + tile.first, in_x,
                                       row_input(dy + row.offset(1) + tile.first, tile.count, stage_dy), stage_dy,
                                       tile.count);
                C* result = row_output(out, tile.count, stage_dx, blend);
                kernel({in_x, 0}, {g, 0}, {result, 0}, 1, result != stage_dx ? direct : mode);
                row_output_store(out, tile.count, result);
            });
        });
    }
}

}  // namespace mbn::cpu
