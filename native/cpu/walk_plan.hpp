// How the CPU kernels traverse the data tensors (x, y, dy, dx) of one
// batch-norm problem, decided once per call from lengths and strides.
//
// Two walks:
//   columns: a feature's values lie in runs along the innermost reduction
//            dimension (packed NCHW spatially: runs of D*H*W per sample).
//            A block is one run (or a piece of a long one); a task is one
//            block of several consecutive features, so tasks follow memory
//            order in NCHW.  Any strides work; runs that are not unit-stride
//            float/double in memory are gathered into a staging buffer.
//   rows:    features are unit-stride in memory (packed NHWC spatially, any
//            packed layout per activation), so each reduction index is a row
//            of consecutive features processed with per-feature arrays.
// Both cut the work into tasks of a fixed size that depends only on the
// shape, so results do not depend on the thread count.
//
// Each is a struct of its own (ColumnWalk, RowWalk), the plan holding one;
// walk_traversal.hpp has one traversal for each.
//
// A fused plan (spatial training and backward on small reductions, column
// walks) is cut into units of features whose values all fit in a core's L2
// cache: one task's features with every reduction block.  Each unit is then
// taken from statistics to output by one thread, so the output pass reads
// the unit's data from cache instead of memory.
//
// A plan may be repeated over independent copies of the walk: group norm
// walks every sample n on its own (features (n, c), each reduced over
// D, H, W), as `repeats` copies of one sample's plan in one parallel loop.
#pragma once

#include "common/problem.hpp"

#include <array>
#include <cstdint>
#include <variant>

namespace mbn::cpu {

constexpr int kMaxSlots = 3;  // x, y (or x, dy, dx)

// A set of reduction dimensions after merging those that are contiguous in
// every tensor; dims are ordered outermost first.
struct ReductionDims {
    int count = 0;
    std::array<std::int64_t, 4> len{};
    std::array<std::array<std::int64_t, 4>, kMaxSlots> stride{};  // [slot][dim]
};

// Columns: the innermost reduction dim is split off as runs of inner_len;
// block k is piece k % pieces of run k / pieces, and a task is one block of
// task_features consecutive features.
struct ColumnWalk {
    ReductionDims outer;  // dims outside the runs (count may be 0)
    std::int64_t inner_len = 1;
    std::array<std::int64_t, kMaxSlots> inner_stride{};
    std::int64_t runs = 1;           // per feature
    std::int64_t pieces = 1;         // per run
    std::int64_t chunk = 0;          // values per piece (the last piece of a run may be shorter)
    std::int64_t task_features = 1;  // features per task
    std::int64_t feature_tasks = 1;  // tasks across the features, per block
    bool segmented = false;          // a task's runs lie back to back in every slot (packed NCHW)
};

// Rows: every reduction dim is a row index; a task is a tile of
// tile_features consecutive features by tile_rows rows.
struct RowWalk {
    ReductionDims dims;
    std::int64_t tile_rows = 0;
    std::int64_t tile_features = 0;
    std::int64_t feature_tiles = 0;  // tiles across the features, per block of rows
};

struct WalkPlan {
    BnMode mode = BnMode::spatial;
    Lengths len{};
    int slots = 0;
    std::array<Strides, kMaxSlots> strides{};  // each tensor's own
    // Feature p's (c, d, h, w) order: c slowest, or (per activation over
    // packed NHWC, walked as rows) c fastest.
    bool channels_fastest = false;

    std::int64_t features = 0;   // F
    std::int64_t reduction = 0;  // M
    std::int64_t blocks = 0;     // reduction blocks per feature (column pieces, row blocks)
    std::variant<ColumnWalk, RowWalk> walk;

    // Repetitions: copy r of slot s starts r * repeat_stride[s] elements on.
    // Per-feature arrays hold repeats * features entries and partial-sum
    // arrays repeats * features * blocks, one repetition after another.
    std::int64_t repeats = 1;
    std::array<std::int64_t, kMaxSlots> repeat_stride{};

    bool fused = false;  // column walks only

    const ColumnWalk* columns() const { return std::get_if<ColumnWalk>(&walk); }
    const RowWalk* rows() const { return std::get_if<RowWalk>(&walk); }

    // Units a fused scope counts in (feature tasks of columns, feature
    // tiles of rows), and the features of one.
    std::int64_t units() const { return columns() ? columns()->feature_tasks : rows()->feature_tiles; }
    std::int64_t unit_features() const { return columns() ? columns()->task_features : rows()->tile_features; }
    // Tasks of one repetition.
    std::int64_t tasks() const { return units() * blocks; }
    // Values of one feature that reduction block k covers.
    std::int64_t block_count(std::int64_t k) const;
    // Where the partial result of (feature p, block k) is kept.
    std::int64_t partial_index(std::int64_t p, std::int64_t k) const {
        return columns() ? p * blocks + k : k * features + p;
    }
    // Logical (c, d, h, w) of feature p.
    std::array<std::int64_t, 4> feature_coords(std::int64_t p) const;
    // Offset of feature p's first value (sample 0, position 0) in slot s.
    std::int64_t feature_offset(int slot, std::int64_t p) const;
};

// Task `task` of all repeats * tasks(): its task within its repetition, and
// where that repetition's data and arrays start.
struct RepeatTask {
    std::int64_t task;
    std::int64_t features;  // offset into per-feature arrays
    std::int64_t partials;  // offset into partial-sum arrays
    std::array<std::int64_t, kMaxSlots> data;  // offset into each slot's tensor
};

inline RepeatTask repeat_task(const WalkPlan& plan, std::int64_t task) {
    const std::int64_t r = task / plan.tasks();
    RepeatTask t{task % plan.tasks(), r * plan.features, r * plan.features * plan.blocks, {}};
    for (int s = 0; s < plan.slots; ++s) t.data[s] = r * plan.repeat_stride[s];
    return t;
}

// Calls fn(p, offsets) for features p in [begin, end), where offsets[i] is
// p's (c, d, h, w) position in a tensor with strides *strides[i].  Steps an
// odometer in the plan's feature order rather than dividing for every feature.
template <std::size_t Sets, typename Fn>
void walk_features(const WalkPlan& plan, const std::array<const Strides*, Sets>& strides, std::int64_t begin,
                   std::int64_t end, Fn&& fn) {
    if (begin >= end) return;
    std::array<std::int64_t, 4> q = plan.feature_coords(begin);  // c, d, h, w
    const std::array<std::int64_t, 4> len{plan.len[kC], plan.len[kD], plan.len[kH], plan.len[kW]};
    constexpr int kDim[4] = {kC, kD, kH, kW};
    std::array<std::int64_t, Sets> offset{};
    for (std::size_t i = 0; i < Sets; ++i)
        for (int d = 0; d < 4; ++d) offset[i] += q[d] * (*strides[i])[kDim[d]];
    // Fastest-moving coordinate first: w in (c,d,h,w) order, c in (d,h,w,c)
    // order; spatially only c moves.
    static constexpr int kCanonical[4] = {3, 2, 1, 0};
    static constexpr int kChannelsLast[4] = {0, 3, 2, 1};
    const int* order = plan.mode == BnMode::spatial || plan.channels_fastest ? kChannelsLast : kCanonical;
    for (std::int64_t p = begin; p < end; ++p) {
        fn(p, offset);
        for (int k = 0; k < 4; ++k) {
            const int d = order[k];
            const std::int64_t extent = plan.mode == BnMode::spatial && d != 0 ? 1 : len[d];
            if (++q[d] < extent) {
                for (std::size_t i = 0; i < Sets; ++i) offset[i] += (*strides[i])[kDim[d]];
                break;
            }
            for (std::size_t i = 0; i < Sets; ++i) offset[i] -= (extent - 1) * (*strides[i])[kDim[d]];
            q[d] = 0;
        }
    }
}

// walk_features for one tensor: fn(p, offset).
template <typename Fn>
void for_each_feature(const WalkPlan& plan, const Strides& strides, std::int64_t begin, std::int64_t end, Fn&& fn) {
    walk_features<1>(plan, {&strides}, begin, end,
                     [&](std::int64_t p, const std::array<std::int64_t, 1>& offset) { fn(p, offset[0]); });
}

// Whether a pass that reads and writes this many bytes in all should write
// its output around the cache: true from the size of the last-level cache
// up, where what it writes would only evict what it is about to read.
bool stream_output(std::int64_t pass_bytes);

// Plans the walk over `tensors` (1 to kMaxSlots of them, all of x's lengths).
WalkPlan plan_walk(const BnGeometry& geom, std::array<const TensorArg*, kMaxSlots> tensors, int count);

// plan_walk, fused when every unit of features fits in a core's cache: for
// ops with a statistics pass and an output pass over the same tensors.
WalkPlan plan_fused_walk(const BnGeometry& geom, std::array<const TensorArg*, kMaxSlots> tensors, int count,
                         int element_bytes);

// Plans a walk over features (n, c), each reduced over D, H, W: one sample's
// spatial batch-norm walk, repeated for every sample.
WalkPlan plan_per_sample_walk(const Lengths& len, std::array<const TensorArg*, kMaxSlots> tensors, int count);

// Offsets of consecutive reduction indices along `dims`, for each slot:
// an odometer, so stepping costs additions, not divisions.
class DimCursor {
public:
    DimCursor(const ReductionDims& dims, int slots, std::int64_t start);
    std::int64_t offset(int slot) const { return offset_[slot]; }
    void next();

private:
    const ReductionDims& dims_;
    int slots_;
    std::array<std::int64_t, 4> index_{};
    std::array<std::int64_t, kMaxSlots> offset_{};
};

}  // namespace mbn::cpu
