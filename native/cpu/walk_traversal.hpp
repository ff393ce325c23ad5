// How a pass over a WalkPlan reaches its data: the scopes and tasks it runs,
// spread over the thread pool, and one traversal per walk that hands a
// pass's kernels compute-type views of its tensors.
//
// A pass (walk_passes.hpp) is a small policy:
//   using Compute = C;                     float or double
//   static constexpr int kInputs;          its inputs are slots 0 .. kInputs-1
//   std::tuple<const T0*, ..., [Tout*]> data;  each slot's storage, an output last
//   bool plain() const;                    whether values may go to the
//                                          kernels as stored (no derived input)
//   void segments(const SegmentArgs<C>&), span(const SpanArgs<C>&),
//        rows(const RowArgs<C>&) const;    its kernel calls for each shape
// and then either, with no output, clear(partial, count) (zero the partial
// sums about to be added to), or, with an output, the OutputMode members
// `direct` (for results written straight to the output) and `staged`.
//
// The column traversal gives a task's runs to segments() in one piece when
// they lie back to back as C (packed NCHW), else each feature's run to
// span(), gathered into per-thread staging when it is not unit-stride C.
// The row traversal gives a whole tile of rows to rows() when they are
// evenly spaced C, else row by row, staged when not C.  Staged outputs are
// stored back after the pass's kernel (reading in the prior first when the
// output is blended).
#pragma once

#include "cpu/element.hpp"
#include "cpu/span_convert.hpp"
#include "cpu/span_kernels.hpp"
#include "cpu/thread_pool.hpp"
#include "cpu/walk_plan.hpp"
#include "cpu/workspace.hpp"

#include <algorithm>
#include <array>
#include <tuple>
#include <type_traits>
#include <utility>

namespace mbn::cpu {

// Problems with fewer values than this run on the calling thread alone.
constexpr std::int64_t kSerialValues = 32768;

// Staging buffers, one per (thread, slot), taken before any task runs so
// that tasks never allocate: where a span of a type other than the compute
// type is converted to be read, or computed to be converted when stored.
template <typename C>
class StagingBuffers {
public:
    StagingBuffers(const WalkPlan& plan, Workspace& ws)
        : per_slot_(plan.columns() ? plan.columns()->chunk : plan.rows()->tile_features),
          data_(ws.take<C>(ThreadPool::instance().size() * kMaxSlots * per_slot_)) {}
    C* at(int thread, int slot) const { return data_ + (thread * kMaxSlots + slot) * per_slot_; }

private:
    std::int64_t per_slot_;
    C* data_;
};

// ---- scopes and tasks --------------------------------------------------------

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
        const ColumnWalk* w = plan.columns();
        const std::int64_t outer = w ? w->runs : plan.blocks, inner = w ? w->pieces : 1;
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
            if (plan.columns()) {
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

// ---- what a pass's kernels get --------------------------------------------------

// `count` features' runs of `len` values, back to back; a feature's partial
// sums lie `stride` entries after the previous one's.
template <typename C>
struct SegmentArgs {
    std::int64_t feature, partial, len, count, stride;
    std::array<const C*, 2> in{};
    C* out = nullptr;
    OutputMode<C> mode{};
};

// One feature's run of n values.  `spare` holds n values for an input the
// pass derives (slot 1's staging).
template <typename C>
struct SpanArgs {
    std::int64_t feature, partial, n;
    std::array<const C*, 2> in{};
    C* out = nullptr;
    C* spare = nullptr;
    OutputMode<C> mode{};
};

// `rows` rows of `count` consecutive features, the first one `feature`.
// `spare` (count values, as SpanArgs's) is set when rows == 1.
template <typename C>
struct RowArgs {
    std::int64_t feature, partial, count, rows = 1;
    std::array<RowSpan<const C>, 2> in{};
    RowSpan<C> out{};
    C* spare = nullptr;
    OutputMode<C> mode{};
};

template <typename T, typename C>
constexpr bool kSameType = std::is_same_v<std::remove_const_t<T>, C>;

template <typename Pass>
constexpr bool kHasOutput = std::tuple_size_v<decltype(Pass::data)> > Pass::kInputs;

// Whether every tensor of the pass is stored as its compute type.
template <typename C, typename Tuple>
struct StoredAs;
template <typename C, typename... P>
struct StoredAs<C, std::tuple<P...>> : std::bool_constant<(kSameType<std::remove_pointer_t<P>, C> && ...)> {};
template <typename Pass>
constexpr bool kStoredAsCompute = StoredAs<typename Pass::Compute, decltype(Pass::data)>::value;

// fn(std::integral_constant<int, s>) for the slots s < N.
template <int N, typename Fn, int... S>
void each_slot(Fn&& fn, std::integer_sequence<int, S...>) {
    (fn(std::integral_constant<int, S>{}), ...);
}
template <int N, typename Fn>
void each_slot(Fn&& fn) {
    each_slot<N>(fn, std::make_integer_sequence<int, N>{});
}

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

inline ColumnTask column_task(const WalkPlan& plan, const ColumnWalk& w, std::int64_t task) {
    const std::int64_t piece = task % w.pieces;
    const std::int64_t features = (task / w.pieces) % w.feature_tasks;
    const std::int64_t run = task / (w.pieces * w.feature_tasks);
    const DimCursor outer(w.outer, plan.slots, run);
    const std::int64_t start = piece * w.chunk;
    ColumnTask t{features * w.task_features, 0, {run * w.pieces + piece, std::min(w.chunk, w.inner_len - start), {}}};
    t.count = std::min(plan.features, t.first + w.task_features) - t.first;
    for (int s = 0; s < plan.slots; ++s)
        t.run.offset[s] = plan.feature_offset(s, t.first) + outer.offset(s) + start * w.inner_stride[s];
    return t;
}

// Calls fn(p, run) for each feature of column task `task`.
template <typename Fn>
void for_each_column(const WalkPlan& plan, const ColumnWalk& w, std::int64_t task, Fn&& fn) {
    ColumnTask t = column_task(plan, w, task);
    std::array<std::int64_t, kMaxSlots> base{};  // the run's offset less the feature's
    for (int s = 0; s < plan.slots; ++s) base[s] = t.run.offset[s] - plan.feature_offset(s, t.first);
    walk_features<kMaxSlots>(plan, {&plan.strides[0], &plan.strides[1], &plan.strides[2]}, t.first,
                             t.first + t.count, [&](std::int64_t p, const std::array<std::int64_t, kMaxSlots>& at) {
                                 for (int s = 0; s < plan.slots; ++s) t.run.offset[s] = base[s] + at[s];
                                 fn(p, t.run);
                             });
}

// A run of slot `slot` as contiguous C: in place, or gathered into staging.
template <typename T, typename C>
const C* column_input(const ColumnWalk& w, int slot, const T* data, const ColumnRun& r, C* staging) {
    const std::int64_t step = w.inner_stride[slot];
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
C* column_output(const ColumnWalk& w, int slot, T* data, const ColumnRun& r, C* staging, bool read_prior) {
    if constexpr (kSameType<T, C>) {
        if (w.inner_stride[slot] == 1 || r.len == 1) return data + r.offset[slot];
    }
    if (read_prior) column_input(w, slot, data, r, staging);
    return staging;
}

template <typename T, typename C>
void column_output_store(const ColumnWalk& w, int slot, T* data, const ColumnRun& r, const C* result) {
    T* dst = data + r.offset[slot];
    if constexpr (kSameType<T, C>) {
        if (result == dst) return;
    }
    const std::int64_t step = w.inner_stride[slot];
    if constexpr (!kSameType<T, C>) {
        if (step == 1) {
            convert_span(result, dst, r.len);
            return;
        }
    }
    for (std::int64_t i = 0; i < r.len; ++i) dst[i * step] = store_from<T>(result[i]);
}

template <typename Pass>
void walk_columns(const WalkPlan& plan, const ColumnWalk& w, const PassScope& scope,
                  const StagingBuffers<typename Pass::Compute>& staging, const Pass& pass) {
    using C = typename Pass::Compute;
    constexpr int In = Pass::kInputs;
    if constexpr (kStoredAsCompute<Pass>) {
        if (w.segmented && pass.plain()) {
            run_tasks(plan, scope, [&](const RepeatTask& rt, int) {
                const ColumnTask t = column_task(plan, w, rt.task);
                SegmentArgs<C> a{rt.features + t.first, rt.partials + plan.partial_index(t.first, t.run.block),
                                 t.run.len, t.count, plan.blocks};
                each_slot<In>([&](auto s) { a.in[s] = std::get<s>(pass.data) + rt.data[s] + t.run.offset[s]; });
                if constexpr (kHasOutput<Pass>) {
                    a.out = std::get<In>(pass.data) + rt.data[In] + t.run.offset[In];
                    a.mode = pass.direct;
                }
                pass.segments(a);
            });
            return;
        }
    }
    run_tasks(plan, scope, [&](const RepeatTask& rt, int thread) {
        for_each_column(plan, w, rt.task, [&](std::int64_t p, const ColumnRun& r) {
            SpanArgs<C> a{rt.features + p, rt.partials + plan.partial_index(p, r.block), r.len};
            each_slot<In>([&](auto s) {
                a.in[s] = column_input(w, s, std::get<s>(pass.data) + rt.data[s], r, staging.at(thread, s));
            });
            a.spare = staging.at(thread, 1);
            if constexpr (kHasOutput<Pass>) {
                auto* out = std::get<In>(pass.data) + rt.data[In];
                C* staged = staging.at(thread, In);
                a.out = column_output(w, In, out, r, staged, pass.staged.blend);
                a.mode = a.out != staged ? pass.direct : pass.staged;
                pass.span(a);
                column_output_store(w, In, out, r, a.out);
            } else {
                pass.clear(a.partial, 1);
                pass.span(a);
            }
        });
    });
}

// ---- rows ----------------------------------------------------------------

// Calls fn(cursor) for each row of row block k; cursor.offset(s) is where
// the row starts in slot s.
template <typename Fn>
void for_each_row(const WalkPlan& plan, const RowWalk& w, std::int64_t k, Fn&& fn) {
    const std::int64_t count = plan.block_count(k);
    DimCursor rows(w.dims, plan.slots, k * w.tile_rows);
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

inline RowTile row_tile(const WalkPlan& plan, const RowWalk& w, std::int64_t task) {
    const std::int64_t first = (task % w.feature_tiles) * w.tile_features;
    return {task / w.feature_tiles, first, std::min(w.tile_features, plan.features - first)};
}

// Whether a tile's rows are evenly spaced in every slot (one reduction dim
// after merging), so a kernel can take them all in one call.
inline bool rows_evenly_spaced(const RowWalk& w) { return w.dims.count <= 1; }

template <typename Pass>
void walk_rows(const WalkPlan& plan, const RowWalk& w, const PassScope& scope,
               const StagingBuffers<typename Pass::Compute>& staging, const Pass& pass) {
    using C = typename Pass::Compute;
    constexpr int In = Pass::kInputs;
    run_tasks(plan, scope, [&](const RepeatTask& rt, int thread) {
        const RowTile tile = row_tile(plan, w, rt.task);
        RowArgs<C> a{rt.features + tile.first, rt.partials + plan.partial_index(tile.first, tile.block), tile.count};
        if constexpr (!kHasOutput<Pass>) pass.clear(a.partial, tile.count);
        if constexpr (kStoredAsCompute<Pass>) {
            if (rows_evenly_spaced(w) && pass.plain()) {
                const DimCursor first(w.dims, plan.slots, tile.block * w.tile_rows);
                const auto rows_of = [&](int s, auto* data) {  // the tile's rows of slot s
                    return RowSpan<std::remove_pointer_t<decltype(data)>>{
                        data + rt.data[s] + first.offset(s) + tile.first, w.dims.count == 1 ? w.dims.stride[s][0] : 0};
                };
                a.rows = plan.block_count(tile.block);
                each_slot<In>([&](auto s) { a.in[s] = rows_of(s, std::get<s>(pass.data)); });
                if constexpr (kHasOutput<Pass>) {
                    a.out = rows_of(In, std::get<In>(pass.data));
                    a.mode = pass.direct;
                }
                pass.rows(a);
                return;
            }
        }
        a.spare = staging.at(thread, 1);
        for_each_row(plan, w, tile.block, [&](const DimCursor& row) {
            each_slot<In>([&](auto s) {
                a.in[s] = {row_input(std::get<s>(pass.data) + rt.data[s] + row.offset(s) + tile.first, tile.count,
                                     staging.at(thread, s)),
                           0};
            });
            if constexpr (kHasOutput<Pass>) {
                auto* out = std::get<In>(pass.data) + rt.data[In] + row.offset(In) + tile.first;
                C* staged = staging.at(thread, In);
                C* result = row_output(out, tile.count, staged, pass.staged.blend);
                a.out = {result, 0};
                a.mode = result != staged ? pass.direct : pass.staged;
                pass.rows(a);
                row_output_store(out, tile.count, result);
            } else {
                pass.rows(a);
            }
        });
    });
}

// Runs `pass` over the scope of the plan, on the plan's walk.
template <typename Pass>
void traverse(const WalkPlan& plan, const PassScope& scope, const StagingBuffers<typename Pass::Compute>& staging,
              const Pass& pass) {
    if (const ColumnWalk* w = plan.columns()) walk_columns(plan, *w, scope, staging, pass);
    else walk_rows(plan, *plan.rows(), scope, staging, pass);
}

}  // namespace mbn::cpu
