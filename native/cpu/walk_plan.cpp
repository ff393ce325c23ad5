#include "cpu/walk_plan.hpp"

#include "common/environment.hpp"
#include "cpu/thread_pool.hpp"

#include <algorithm>

#include <unistd.h>

namespace mbn::cpu {
namespace {

// Target values per task: a column piece stays within L1/L2 when staged.
constexpr std::int64_t kTaskValues = 16384;
// Row tiles: up to 2048 features, so that a tile's per-feature coefficients
// and accumulators stay in L1/L2 while its rows stream by; as many rows as
// make 64K values, so that per activation (few rows) a tile usually covers
// every row and no partial sums need merging.
constexpr std::int64_t kRowTileValues = 65536;
constexpr std::int64_t kMaxFeatureBlock = 2048;

// Fused plans: the bytes of all slots one unit may span (a part of L2, the
// rest left to coefficients, partial sums and the other thread's traffic),
// and at least this many units when the features allow, so that threads
// share the work evenly whatever their number.  Where not even one
// feature fits that, a unit may span up to a share of the last-level cache
// (fused_cache_share_bytes): its second pass then reads the unit from L3, not
// memory.  NCHW backward of 32x{64,128,256}x56x56 (1.2 MB a feature over x,
// dy and dx) got 5-30% faster that way on AMD EPYC (three A/B sessions of
// 3-5 alternating runs).  That share depends on the thread count, and so
// does the plan; the results do not, since each feature's sums are taken
// block by block in the same order whatever unit holds it.
constexpr std::int64_t kFusedUnitBytes = std::int64_t{1} << 20;
constexpr std::int64_t kFusedMinUnits = 16;

std::int64_t ceil_div(std::int64_t a, std::int64_t b) { return (a + b - 1) / b; }

// The dims in `which` (outermost first) with length > 1, merging a dim into
// the next inner one when that is contiguous with it in every slot.
ReductionDims collapse(const WalkPlan& plan, std::initializer_list<int> which) {
    ReductionDims out;
    for (int dim : which) {
        if (plan.len[dim] == 1) continue;
        bool merge = out.count > 0;
        // The previous (outer) entry absorbs `dim` when it steps exactly
        // over all of `dim`; the merged dim keeps the inner stride.
        for (int s = 0; merge && s < plan.slots; ++s)
            merge = out.stride[s][out.count - 1] == plan.strides[s][dim] * plan.len[dim];
        if (merge) {
            const int last = out.count - 1;
            out.len[last] *= plan.len[dim];
            for (int s = 0; s < plan.slots; ++s) out.stride[s][last] = plan.strides[s][dim];
        } else {
            out.len[out.count] = plan.len[dim];
            for (int s = 0; s < plan.slots; ++s) out.stride[s][out.count] = plan.strides[s][dim];
            ++out.count;
        }
    }
    return out;
}

bool channels_unit_stride(const WalkPlan& plan) {
    for (int s = 0; s < plan.slots; ++s)
        if (plan.strides[s][kC] != 1) return false;
    return true;
}

void plan_columns(WalkPlan& plan) {
    ColumnWalk w;
    const ReductionDims dims = plan.mode == BnMode::spatial ? collapse(plan, {kN, kD, kH, kW})
                                                             : collapse(plan, {kN});
    w.outer = dims;
    if (dims.count > 0) {  // else a single value per feature
        w.outer.count = dims.count - 1;
        w.inner_len = dims.len[dims.count - 1];
        for (int s = 0; s < plan.slots; ++s) w.inner_stride[s] = dims.stride[s][dims.count - 1];
    }
    const std::int64_t L = w.inner_len;
    w.runs = plan.reduction / L;
    w.chunk = ceil_div(L, ceil_div(L, kTaskValues));
    w.pieces = ceil_div(L, w.chunk);  // no empty last piece, whatever L
    w.task_features = w.pieces == 1 ? std::max<std::int64_t>(1, kTaskValues / L) : 1;
    w.task_features = std::min(w.task_features, plan.features);
    w.feature_tasks = ceil_div(plan.features, w.task_features);
    w.segmented = plan.mode == BnMode::spatial;
    for (int s = 0; s < plan.slots; ++s)
        w.segmented = w.segmented && (w.inner_stride[s] == 1 || L == 1) &&
                      (plan.strides[s][kC] == L || plan.len[kC] == 1);
    plan.blocks = w.runs * w.pieces;
    plan.walk = w;
}

void plan_rows(WalkPlan& plan) {
    RowWalk w;
    w.dims = plan.mode == BnMode::spatial ? collapse(plan, {kN, kD, kH, kW}) : collapse(plan, {kN});
    w.tile_features = std::min(plan.features, kMaxFeatureBlock);
    w.feature_tiles = ceil_div(plan.features, w.tile_features);
    w.tile_rows = std::clamp<std::int64_t>(kRowTileValues / w.tile_features, 1, plan.reduction);
    plan.blocks = ceil_div(plan.reduction, w.tile_rows);
    plan.walk = w;
}

// Regroups the features of a planned column walk into cache-sized units, or
// leaves the plan unfused when even one feature's values would not fit.
// Row walks stay unfused: a unit narrow enough to fit holds only a cache
// line or two of each row, rows a whole row of features apart, which the
// hardware prefetchers do not follow (2.4x slower on 32x512x7x7 NHWC).  They
// keep their locality another way: each thread takes the same range of row
// tiles in every pass.
void fuse(WalkPlan& plan, std::int64_t unit_values, std::int64_t cache_share_values) {
    ColumnWalk* w = std::get_if<ColumnWalk>(&plan.walk);
    if (!w) return;
    std::int64_t fit = unit_values / plan.reduction;  // features whose values fit
    if (fit < 1) fit = cache_share_values / plan.reduction;
    if (fit < 1) return;
    std::int64_t features = std::min(fit, ceil_div(plan.features, kFusedMinUnits));
    if (w->pieces > 1) features = 1;  // a task's runs lie back to back only when whole
    features = std::clamp<std::int64_t>(features, 1, plan.features);
    if (features == plan.features) return;  // one unit: nothing to spread over the threads
    w->task_features = features;
    w->feature_tasks = ceil_div(plan.features, features);
    plan.fused = true;
}

// MIOPEN_BN_CPU_CACHE_BYTES overrides what the system reports (a VM may
// report its host's cache, or none); tests shrink it to make small tensors
// take the streamed and fused paths of large ones.
std::int64_t last_level_cache_bytes() {
    static const std::int64_t bytes = [] {
        long llc = -1;
#ifdef _SC_LEVEL3_CACHE_SIZE
        llc = sysconf(_SC_LEVEL3_CACHE_SIZE);
#endif
        const std::int64_t reported = llc > 0 ? static_cast<std::int64_t>(llc) : std::int64_t{32} << 20;
        return positive_from_environment("MIOPEN_BN_CPU_CACHE_BYTES", reported);
    }();
    return bytes;
}

// A quarter of each thread's part of the last-level cache: room for the
// unit being finished, the next one, and what other threads and processes
// keep there.  (Half of it gained only 5-10% over unfused.)
std::int64_t fused_cache_share_bytes() {
    return std::max(kFusedUnitBytes, last_level_cache_bytes() / (4 * ThreadPool::instance().size()));
}

}  // namespace

bool stream_output(std::int64_t pass_bytes) { return pass_bytes >= last_level_cache_bytes(); }

WalkPlan plan_walk(const BnGeometry& geom, std::array<const TensorArg*, kMaxSlots> tensors, int count) {
    WalkPlan plan;
    plan.mode = geom.mode;
    plan.len = geom.len;
    plan.slots = count;
    for (int s = 0; s < count; ++s) plan.strides[s] = tensors[s]->stride;
    plan.features = geom.feature_count();
    plan.reduction = geom.reduction_size();

    if (geom.mode == BnMode::spatial) {
        // Rows when channels are unit-stride everywhere (NHWC, or no spatial extent).
        if (plan.len[kC] >= 2 && channels_unit_stride(plan)) plan_rows(plan);
        else plan_columns(plan);
        return plan;
    }
    // Per activation: rows when every tensor is packed the same way, so each
    // sample is one contiguous run of all features.
    const MemoryOrder order = tensors[0]->order;
    bool same_packed = order != MemoryOrder::strided && plan.features >= 2;
    for (int s = 1; s < count; ++s) same_packed = same_packed && tensors[s]->order == order;
    if (same_packed) {
        plan.channels_fastest = order == MemoryOrder::packed_nhwc;
        plan_rows(plan);
    } else {
        plan_columns(plan);
    }
    return plan;
}

WalkPlan plan_fused_walk(const BnGeometry& geom, std::array<const TensorArg*, kMaxSlots> tensors, int count,
                         int element_bytes) {
    WalkPlan plan = plan_walk(geom, tensors, count);
    const std::int64_t slot_bytes = count * std::int64_t{element_bytes};
    if (geom.mode == BnMode::spatial) fuse(plan, kFusedUnitBytes / slot_bytes, fused_cache_share_bytes() / slot_bytes);
    return plan;
}

WalkPlan plan_per_sample_walk(const Lengths& len, std::array<const TensorArg*, kMaxSlots> tensors, int count) {
    // One sample as a spatial problem with N = 1 (a length-1 dim has stride 0).
    BnGeometry sample{BnMode::spatial, len};
    sample.len[kN] = 1;
    std::array<TensorArg, kMaxSlots> views{};
    std::array<const TensorArg*, kMaxSlots> view_ptrs{};
    for (int s = 0; s < count; ++s) {
        views[s] = *tensors[s];
        views[s].len[kN] = 1;
        views[s].stride[kN] = 0;
        view_ptrs[s] = &views[s];
    }
    WalkPlan plan = plan_walk(sample, view_ptrs, count);
    plan.repeats = len[kN];
    for (int s = 0; s < count; ++s) plan.repeat_stride[s] = tensors[s]->stride[kN];
    return plan;
}

std::int64_t WalkPlan::block_count(std::int64_t k) const {
    if (const ColumnWalk* w = columns()) return std::min(w->chunk, w->inner_len - (k % w->pieces) * w->chunk);
    return std::min(rows()->tile_rows, reduction - k * rows()->tile_rows);
}

std::array<std::int64_t, 4> WalkPlan::feature_coords(std::int64_t p) const {
    if (mode == BnMode::spatial) return {p, 0, 0, 0};
    const std::int64_t D = len[kD], H = len[kH], W = len[kW], C = len[kC];
    std::int64_t c, dhw;
    if (channels_fastest) {
        c = p % C;
        dhw = p / C;
    } else {
        c = p / (D * H * W);
        dhw = p % (D * H * W);
    }
    return {c, dhw / (H * W), (dhw / W) % H, dhw % W};
}

std::int64_t WalkPlan::feature_offset(int slot, std::int64_t p) const {
    const auto q = feature_coords(p);
    const Strides& st = strides[slot];
    return q[0] * st[kC] + q[1] * st[kD] + q[2] * st[kH] + q[3] * st[kW];
}

DimCursor::DimCursor(const ReductionDims& dims, int slots, std::int64_t start) : dims_(dims), slots_(slots) {
    for (int d = dims.count - 1; d >= 0; --d) {
        index_[d] = start % dims.len[d];
        start /= dims.len[d];
    }
    for (int s = 0; s < slots; ++s) {
        offset_[s] = 0;
        for (int d = 0; d < dims.count; ++d) offset_[s] += index_[d] * dims.stride[s][d];
    }
}

void DimCursor::next() {
    for (int d = dims_.count - 1; d >= 0; --d) {
        if (++index_[d] < dims_.len[d]) {
            for (int s = 0; s < slots_; ++s) offset_[s] += dims_.stride[s][d];
            return;
        }
        index_[d] = 0;
        for (int s = 0; s < slots_; ++s) offset_[s] -= (dims_.len[d] - 1) * dims_.stride[s][d];
    }
}

}  // namespace mbn::cpu
