#include "gpu/feature_plan.hpp"

#include <algorithm>
#include <cstdint>
#include <iterator>

namespace mbn {
namespace gpu {
namespace {

// Logical dimensions of the row walk's nests.
constexpr int kRowFeatureDims[] = {kN, kC};
constexpr int kRowReduceDims[] = {kD, kH, kW};

bool slot_used(const SlotTensors& t, int slot) {
    return t.slot[slot] != nullptr && t.slot[slot]->present();
}

// Parameters are indexed by features only: in the reduction nest they get
// stride 0, which also lets them agree with any merge.
std::int64_t stride_of(const SlotTensors& t, int slot, int dim, bool reduce_nest) {
    if (!slot_used(t, slot) || (reduce_nest && slot >= kSlotParam0)) return 0;
    return t.slot[slot]->stride[dim];
}

// True when every tensor addresses merged dimension `last` followed by `dim`
// as one dimension: stride(last) == stride(dim) * len(dim).
bool mergeable(const std::int64_t (&merged_stride)[kMaxSlots][kNestRank], int last, const SlotTensors& t, int dim,
               const Lengths& len, bool reduce_nest) {
    for (int s = 0; s < kMaxSlots; ++s)
        if (merged_stride[s][last] != stride_of(t, s, dim, reduce_nest) * len[dim]) return false;
    return true;
}

// Orders `dims` outermost first by x's strides (the innermost, smallest
// stride last, so consecutive threads touch neighbouring memory), drops
// length-1 dimensions, and merges neighbours that every tensor addresses as
// one: stride(outer) == stride(inner) * len(inner).
LoopNest build_nest(const int* dims, int count, const Lengths& len, const SlotTensors& t, bool reduce_nest) {
    int order[kNestRank];
    int kept = 0;
    for (int i = 0; i < count; ++i)
        if (len[dims[i]] > 1) order[kept++] = dims[i];
    const std::int64_t* x_stride = t.slot[kSlotX]->stride.data();
    std::stable_sort(order, order + kept, [&](int a, int b) { return x_stride[a] > x_stride[b]; });

    std::int64_t merged_len[kNestRank];
    std::int64_t merged_stride[kMaxSlots][kNestRank];
    int rank = 0;
    for (int i = 0; i < kept; ++i) {
        const int dim = order[i];
        if (rank > 0 && mergeable(merged_stride, rank - 1, t, dim, len, reduce_nest)) {
            merged_len[rank - 1] *= len[dim];
            for (int s = 0; s < kMaxSlots; ++s) merged_stride[s][rank - 1] = stride_of(t, s, dim, reduce_nest);
        } else {
            merged_len[rank] = len[dim];
            for (int s = 0; s < kMaxSlots; ++s) merged_stride[s][rank] = stride_of(t, s, dim, reduce_nest);
            ++rank;
        }
    }

    LoopNest nest{};
    nest.rank = rank;
    nest.size = 1;
    const int first = kNestRank - rank;
    for (int i = 0; i < kNestRank; ++i) {
        const bool used = i >= first;
        nest.len[i] = used ? merged_len[i - first] : 1;
        for (int s = 0; s < kMaxSlots; ++s) nest.stride[s][i] = used ? merged_stride[s][i - first] : 0;
        nest.size *= nest.len[i];
    }
    return nest;
}

// The widest element size among the data tensors of the call.
std::size_t widest_data_element(const SlotTensors& t) {
    std::size_t widest = 1;
    for (int s = kSlotX; s < kSlotParam0; ++s)
        if (slot_used(t, s)) widest = std::max(widest, dtype_size(t.slot[s]->dtype));
    return widest;
}

// True when every data tensor has stride 1 along innermost dimension
// `inner` of `contiguous`, all its other strides (both nests, dimensions of
// length > 1) are multiples of `width`, and its pointer is aligned for
// `width` elements: then `width` neighbours along `inner` move as one access.
bool data_allows_vectors(const FeatureLayout& layout, const LoopNest& contiguous, const SlotTensors& t, int width) {
    constexpr int inner = kNestRank - 1;
    for (int s = kSlotX; s < kSlotParam0; ++s) {
        if (!slot_used(t, s)) continue;
        if (contiguous.stride[s][inner] != 1) return false;
        for (const LoopNest* nest : {&layout.feature, &layout.reduce})
            for (int i = 0; i < kNestRank; ++i) {
                if (nest == &contiguous && i == inner) continue;
                if (nest->len[i] > 1 && nest->stride[s][i] % width != 0) return false;
            }
        const auto address = reinterpret_cast<std::uintptr_t>(t.slot[s]->data);
        if (address % (static_cast<std::size_t>(width) * dtype_size(t.slot[s]->dtype)) != 0) return false;
    }
    return true;
}

// Elements per reduction position when threads run along the reduction:
// 16 bytes of the widest data tensor when the layout allows it, else 1.
int reduce_vector_width(const FeatureLayout& layout, const SlotTensors& t) {
    const int width = static_cast<int>(16 / widest_data_element(t));
    if (layout.reduce.rank == 0 || width < 2 || layout.reduce.len[kNestRank - 1] % width != 0) return 1;
    return data_allows_vectors(layout, layout.reduce, t, width) ? width : 1;
}

// Features per thread when threads run along the features: up to 4 (each
// keeps per-feature state in registers), at most 16 bytes, else 1.
int feature_vector_width(const FeatureLayout& layout, const SlotTensors& t) {
    const int width = static_cast<int>(std::min<std::size_t>(kMaxFeaturesPerThread, 16 / widest_data_element(t)));
    if (layout.feature.rank == 0 || width < 2 || layout.feature.len[kNestRank - 1] % width != 0) return 1;
    return data_allows_vectors(layout, layout.feature, t, width) ? width : 1;
}

std::int64_t innermost_x_stride(const LoopNest& nest) {
    return nest.rank > 0 ? nest.stride[kSlotX][kNestRank - 1] : INT64_MAX;
}

// The split choice's constants.
constexpr int kThreadElements = 16;  // least elements per thread

int pow2_at_least(std::int64_t v) {
    int p = 1;
    while (p < v) p *= 2;
    return p;
}

}  // namespace

FeatureLayout plan_feature_layout(const int* feature_dims, int feature_count, const int* reduce_dims,
                                  int reduce_count, const Lengths& len, const SlotTensors& tensors,
                                  const DeviceShape& device, bool vectors) {
    FeatureLayout layout{};
    layout.feature = build_nest(feature_dims, feature_count, len, tensors, false);
    layout.reduce = build_nest(reduce_dims, reduce_count, len, tensors, true);
    const std::int64_t features = layout.feature.size;

    // Threads run along whichever nest is contiguous in x: along the
    // reduction (one feature per block column, NCHW spatial) or along the
    // features (NHWC spatial, per activation), so warps read whole lines.
    const bool along_features =
        features > 1 && innermost_x_stride(layout.feature) < innermost_x_stride(layout.reduce);
    const int wave = std::max(1, std::min(device.wave_size, kBlockThreads));
    layout.features_per_thread = along_features && vectors ? feature_vector_width(layout, tensors) : 1;
    layout.vector_width = !along_features && vectors ? reduce_vector_width(layout, tensors) : 1;
    if (layout.vector_width > 1) {
        constexpr int inner = kNestRank - 1;
        layout.reduce.len[inner] /= layout.vector_width;
        layout.reduce.size /= layout.vector_width;
        for (int s = kSlotX; s < kSlotParam0; ++s) layout.reduce.stride[s][inner] = layout.vector_width;
    }
    const std::int64_t positions = layout.reduce.size;
    // At least ~16 elements per thread, so that setup and merges stay cheap.
    const std::int64_t min_positions =
        std::max(1, kThreadElements / (layout.vector_width * layout.features_per_thread));

    const std::int64_t feature_groups = features / layout.features_per_thread;
    const std::int64_t rows_wanted = pow2_at_least((positions + min_positions - 1) / min_positions);
    if (along_features) {
        // A wave of features per row; with few positions (small batches per
        // activation) fewer rows and more features instead of idle threads.
        layout.tile_features = static_cast<int>(std::min<std::int64_t>(wave, pow2_at_least(feature_groups)));
        layout.rows = kBlockThreads / layout.tile_features;
        if (rows_wanted < layout.rows) {
            layout.rows = static_cast<int>(rows_wanted);
            layout.tile_features = static_cast<int>(
                std::min<std::int64_t>(kBlockThreads / layout.rows, pow2_at_least(feature_groups)));
        }
    } else {
        // One feature per block: fewer rows when a feature has few elements.
        layout.tile_features = 1;
        layout.rows = static_cast<int>(std::max<std::int64_t>(wave, std::min<std::int64_t>(kBlockThreads, rows_wanted)));
    }
    layout.tiles = (feature_groups + layout.tile_features - 1) / layout.tile_features;

    // Enough blocks to fill the device's threads.
    const int block_threads = layout.tile_features * layout.rows;
    const int blocks_per_multiprocessor = kThreadsPerMultiprocessor / block_threads;
    const std::int64_t target_blocks =
        static_cast<std::int64_t>(std::max(1, device.multiprocessors)) * blocks_per_multiprocessor;
    std::int64_t splits = (target_blocks + layout.tiles - 1) / layout.tiles;
    splits = std::min(splits, std::max<std::int64_t>(1, positions / (static_cast<std::int64_t>(layout.rows) * min_positions)));
    splits = std::max<std::int64_t>(1, std::min<std::int64_t>(splits, kMaxSplits));
    // More splits mean more launches (partials, their merge, the elementwise
    // pass); when each thread walks its whole reduction in a few steps, one
    // split runs as a single launch (batch norm's bn_fused.hpp), which wins:
    // each launch costs a few microseconds, as much as such a walk.
    if ((positions + layout.rows - 1) / layout.rows <= kSingleSplitSteps) splits = 1;
    layout.chunk = (positions + splits - 1) / splits;
    layout.splits = static_cast<int>((positions + layout.chunk - 1) / layout.chunk);
    return layout;
}


FeatureLayout plan_row_layout(const Lengths& len, const SlotTensors& tensors, const DeviceShape& device) {
    return plan_feature_layout(kRowFeatureDims, static_cast<int>(std::size(kRowFeatureDims)), kRowReduceDims,
                               static_cast<int>(std::size(kRowReduceDims)), len, tensors, device);
}

}  // namespace gpu
}  // namespace mbn
