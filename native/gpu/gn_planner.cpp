#include "gpu/gn_planner.hpp"

#include "gpu/feature_scratch.hpp"
#include "gpu/gn_tile_planner.hpp"

#include <algorithm>
#include <climits>
#include <cstdint>
#include <initializer_list>
#include <numeric>

namespace mbn {
namespace gpu {
namespace {

constexpr int kPositionDims[] = {kD, kH, kW};

std::int64_t ceil_div(std::int64_t a, std::int64_t b) { return (a + b - 1) / b; }

GnGroupShape group_shape(const GnShape& shape) {
    GnGroupShape s;
    s.samples = shape.len[kN];
    s.groups = shape.groups;
    s.channels = shape.channels_per_group();
    s.positions = shape.spatial_size();
    s.height = shape.len[kH];
    s.width = shape.len[kW];
    s.size = shape.group_size();
    return s;
}

// Linear positions: position s (w fastest) at s * pitch, which holds when
// each spatial dimension of length > 1 steps over the ones inside it.
GnPlacement placement_of(const TensorArg& t) {
    GnPlacement p{};
    p.sample = t.stride[kN];
    p.channel = t.stride[kC];
    p.linear = true;
    p.pitch = 0;
    std::int64_t next = -1;  // the stride that continues the line
    for (int i = 2; i >= 0; --i) {
        const int dim = kPositionDims[i];
        p.position[i] = t.stride[dim];
        if (t.len[dim] == 1) continue;
        if (next < 0)
            p.pitch = t.stride[dim];
        else if (t.stride[dim] != next)
            p.linear = false;
        next = t.stride[dim] * t.len[dim];
    }
    return p;
}

// The smallest stride among x's spatial dimensions of length > 1.
std::int64_t innermost_position_stride(const TensorArg& x) {
    std::int64_t smallest = INT64_MAX;
    for (int dim : kPositionDims)
        if (x.len[dim] > 1) smallest = std::min(smallest, x.stride[dim]);
    return smallest;
}

bool aligned(const TensorArg& t, int width) {
    return reinterpret_cast<std::uintptr_t>(t.data) % (static_cast<std::size_t>(width) * dtype_size(t.dtype)) == 0;
}

// True when `width` neighbours along the fastest direction of the walk are
// contiguous in tensor t, and every access starts aligned.
bool allows_vectors(const GnGroupShape& s, const GnPlacement& p, const TensorArg& t, bool channels_inner, int width) {
    if (!p.linear || !aligned(t, width)) return false;
    if (s.samples > 1 && p.sample % width != 0) return false;
    if (channels_inner)
        return p.channel == 1 && s.channels % width == 0 && (s.positions == 1 || p.pitch % width == 0);
    return p.pitch == 1 && s.positions % width == 0 && p.channel % width == 0;
}

// Chunks of at most one team's registers.  A group that needs several
// blocks anyway is cut finer when that gives every multiprocessor a block;
// one that fits a block stays whole (a hand-over between blocks costs more
// than idle multiprocessors save on data this small).
GnChunks cut_into_chunks(const GnGroupShape& s, int width, const DeviceShape& device) {
    const std::int64_t per_thread = static_cast<std::int64_t>(gn_slots(width)) * width;
    const int wave = std::max(1, std::min(device.wave_size, kBlockThreads));
    GnChunks c{};
    if (s.size <= wave * per_thread) {
        c.team_threads = wave;
        c.parts = 1;
    } else {
        c.team_threads = kBlockThreads;
        c.parts = ceil_div(s.size, kBlockThreads * per_thread);
        if (c.parts > 1) {
            const std::int64_t to_fill = ceil_div(std::max(1, device.multiprocessors), s.group_count());
            const std::int64_t at_most = std::max<std::int64_t>(1, s.size / (2 * kBlockThreads * width));
            c.parts = std::max(c.parts, std::min(to_fill, at_most));
        }
    }
    c.length = ceil_div(ceil_div(s.size, c.parts), width) * width;
    c.parts = ceil_div(s.size, c.length);
    c.total = s.group_count() * c.parts;
    return c;
}

// Channel runs shorter than this many bytes make the slices walk the faster
// forward (measured on the H100: 4 fp32 channels per group ran 4.7x slower
// as chunks than NCHW, 16 ran at par).
constexpr std::int64_t kShortChannelRunBytes = 32;

// Groups of at least this many chunks go by slices too: the chunk kernel
// holds a chunk in 128 registers a thread, two blocks a multiprocessor, and
// is bound by its instructions and barriers (ncu, 1x128x512x512 fp16: 28%
// of DRAM bandwidth, 45% of issue slots), where the slices' launches stream
// x.  H100, forward + swish, chunks against slices: 1x128x512x512 (64
// chunks a group) fp16 122 / 102 us, fp32 188 / 174; 1x256x256x256 (32)
// fp16 66 / 59; 1x128x256x256 fp32 (16) 61 / 59.
constexpr std::int64_t kSlicesFromParts = 16;

// Threads per multiprocessor the slices walks (both directions) are cut
// for, a count of their own: the shared planner aims at 2048 and keeps a
// feature whole (one split) where a thread walks it in up to 32 steps, for
// batch norm's fused single launch, which the slices do not have (there it
// left 1x256x256x256 half NCHW 256 blocks, two a multiprocessor; ncu: the
// backward's sums at 67% of DRAM bandwidth, 24% occupancy).
// - Channels fastest (NHWC-like slices, several a thread): 768, three
//   blocks of 256.  Fewer splits let each thread walk more positions per
//   block (with 2048 a thread walked 16-32 positions and the block's setup
//   and row reduction were a large part of it; 4096 lost up to 24%,
//   1x256x256x256 half), and halve the partials the backward's finalize
//   merges (ncu, 1x128x512x512 half: 8.6 us against NCHW's 4.4).  H200,
//   against 1536 (thirty-fourth session): backward of 1x128x512x512,
//   1x256x256x256 and 1x128x256x256 NHWC 1.03x-1.14x (1x128x256x256 half
//   43.8 -> 38.4 us), forced slices forward 1.03x-1.09x.
// - Along the planes (NCHW-like): 4096, blocks in four rounds and more,
//   whose short tails suit these walks (H200, against 1536: backward of
//   1x128x512x512 and 1x256x256x256 1.03x-1.08x, forward + swish of
//   1x128x512x512 half and bfloat16 1.02x-1.04x; 1024 and 2048 lost).
// (bench/RESULTS.md, twenty-eighth and thirty-fourth sessions.)
constexpr int kSliceThreadsPerMultiprocessor = 768;
constexpr int kPlaneSliceThreadsPerMultiprocessor = 4096;
// Where the count asks for more splits, each thread still walks at least
// this many positions of its slice: two batches of loads.
constexpr std::int64_t kSliceLeastPositions = 8;

// Positions (16-byte vectors) each thread of a slices walk loads at least
// where its slices are contiguous planes (NCHW-like): the shared planner
// gives such a plane a block of up to 256 rows, so that a 64x64 half plane
// left each thread 2 of the 4 vectors a load batch holds (nest_walk.h), and
// the block's setup and its reduction over the rows outweighed the loads
// (ncu, 2x1280x64x64 half backward on the H200: 12.2 M warp instructions
// against torch.compile's 5.6 M for the same sums, 30% of DRAM bandwidth).
// Such a block takes fewer rows and more slices instead.
constexpr std::int64_t kSlicePositionsPerThread = 4;

void fill_slice_rows(FeatureLayout& layout, const DeviceShape& device) {
    if (layout.tile_features != 1 || layout.reduce.rank != 1 || layout.vector_width == 1) return;
    const std::int64_t wave = std::max(1, std::min(device.wave_size, kBlockThreads));
    std::int64_t rows = layout.rows;
    while (rows > wave && rows * kSlicePositionsPerThread > layout.reduce.size) rows /= 2;
    if (rows == layout.rows) return;
    layout.rows = static_cast<int>(rows);
    layout.tile_features = static_cast<int>(std::min<std::int64_t>(kBlockThreads / rows, layout.feature.size));
    layout.tiles = ceil_div(layout.feature.size, layout.tile_features);
}

// Splits for the slices' thread count (above), each thread walking at
// least kSliceLeastPositions.  Threads run along the planes where the
// positions are vectors, or where each block has one slice.
void cut_slice_chunks(FeatureLayout& layout, const DeviceShape& device) {
    const bool along_planes = layout.vector_width > 1 || layout.tile_features == 1;
    const std::int64_t block_threads = static_cast<std::int64_t>(layout.tile_features) * layout.rows;
    const std::int64_t per_multiprocessor = along_planes ? kPlaneSliceThreadsPerMultiprocessor
                                                         : kSliceThreadsPerMultiprocessor;
    const std::int64_t target = static_cast<std::int64_t>(std::max(1, device.multiprocessors)) *
                                std::max<std::int64_t>(1, per_multiprocessor / block_threads);
    const std::int64_t most = std::min<std::int64_t>(
        kMaxSplits, std::max<std::int64_t>(1, layout.reduce.size / (layout.rows * kSliceLeastPositions)));
    const std::int64_t splits = std::min(most, std::max<std::int64_t>(1, ceil_div(target, layout.tiles)));
    layout.chunk = ceil_div(layout.reduce.size, splits);
    layout.splits = static_cast<int>(ceil_div(layout.reduce.size, layout.chunk));
}

// The slices' layout (the shared row planner's, its rows filled and its
// chunks cut for these kernels) and group order.
GnSlicePlan plan_slices(const GnShape& shape, const SlotTensors& tensors, const DeviceShape& device) {
    const Lengths& len = shape.len;
    const TensorArg& x = *tensors.slot[kSlotX];
    GnSlicePlan plan{};
    plan.layout = plan_row_layout(len, tensors, device);
    fill_slice_rows(plan.layout, device);
    cut_slice_chunks(plan.layout, device);
    plan.order.shape = group_shape(shape);
    plan.order.channel_major = len[kN] > 1 && len[kC] > 1 && x.stride[kC] > x.stride[kN];
    return plan;
}

}  // namespace

const char* plan_gn_forward_on_chip(const GnForward& p, const DeviceShape& device, GnForwardPlan& plan) {
    const char* why = plan_gn_tiles(p.shape, {&p.x, &p.y}, false, device, plan.tiles);
    plan.needs = GnScratchNeeds{0, 0};
    return why;
}

const char* plan_gn_backward_on_chip(const GnBackward& p, const DeviceShape& device, GnBackwardPlan& plan) {
    const char* why = plan_gn_tiles(p.shape, {&p.x, &p.dy, &p.dx}, true, device, plan.tiles);
    if (why != nullptr) return why;
    if (!p.affine) {
        // No dweight / dbias to add up: no cluster of samples (its kernel
        // meets the cluster's barriers only on the way to them).
        plan.tiles.sample_cluster = 1;
        plan.tiles.by_sample_cluster = make_divisor(1);
    }
    plan.needs = tile_backward_scratch_needs(plan.tiles, p.affine);
    return nullptr;
}

bool plan_gn_forward_walk(const GnForward& p, const DeviceShape& device, GnForwardPlan& plan) {
    GnForwardWalk& walk = plan.walk;
    walk.shape = group_shape(p.shape);
    walk.x = placement_of(p.x);
    walk.y = placement_of(p.y);
    const GnGroupShape& s = walk.shape;
    // Follow x's memory: channel fastest when its channel stride is the
    // smallest (NHWC-like), position fastest otherwise.
    const bool channels_fastest = s.positions > 1 && p.x.stride[kC] < innermost_position_stride(p.x);
    walk.channels_inner = s.channels > 1 && channels_fastest;

    const int width = static_cast<int>(16 / dtype_size(p.x.dtype));
    const bool vectors = allows_vectors(s, walk.x, p.x, walk.channels_inner, width) &&
                         allows_vectors(s, walk.y, p.y, walk.channels_inner, width);
    plan.width = vectors ? width : 1;
    const auto run_bytes = s.channels * static_cast<std::int64_t>(dtype_size(p.x.dtype));
    const bool short_runs = channels_fastest && s.groups > 1 && (plan.width == 1 || run_bytes < kShortChannelRunBytes);
    plan.chunks = cut_into_chunks(s, plan.width, device);
    return short_runs || plan.chunks.parts >= kSlicesFromParts;
}

void plan_gn_forward_chunks(GnForwardPlan& plan) {
    plan.needs = forward_scratch_needs(plan.chunks, plan.walk.shape.group_count());
}

int slice_terms_threads(std::int64_t partials, int wave_size) {
    const std::int64_t wave = std::max(1, std::min(wave_size, kSliceTermsMaxThreads));
    const std::int64_t wanted = ceil_div(ceil_div(partials, kSliceTermsBatch), wave) * wave;
    return static_cast<int>(std::max(wave, std::min(wanted, kSliceTermsMaxThreads / wave * wave)));
}

namespace {

// The packed walk (gn_layout.hpp) of the slices' last launch over `data`
// (x first), vectors 0 where they are not all packed in one order, 16-byte
// aligned, in whole vectors along the innermost dimension and under 2^31
// vectors and slices (int indices).
GnPackedWalk plan_packed_walk(const GnShape& shape, std::initializer_list<const TensorArg*> data) {
    GnPackedWalk w{};
    const TensorArg& x = **data.begin();
    if (!packed_alike(data)) return w;
    const bool inner = x.order == MemoryOrder::packed_nhwc;
    const std::int64_t width = 16 / static_cast<std::int64_t>(dtype_size(x.dtype));
    const std::int64_t channels = shape.len[kC];
    const std::int64_t positions = shape.spatial_size();
    if ((inner ? channels : positions) % width != 0) return w;
    const std::int64_t vectors = x.element_count() / width;
    // Vector indices past the last (a thread's whole batches) stay in int.
    const std::int64_t most =
        INT_MAX - static_cast<std::int64_t>(kPackedWalkBatch) * kPackedInnerBatches * kPackedWalkMostThreads;
    if (vectors == 0 || vectors > most || shape.len[kN] * channels > INT_MAX) return w;
    w.vectors = static_cast<int>(vectors);
    w.channels_inner = inner;
    w.channels = static_cast<int>(channels);
    w.threads = kPackedWalkThreads;
    w.batches = 1;
    if (inner) {
        w.row_vectors = static_cast<int>(channels / width);
        if (w.row_vectors <= kPackedWalkMostThreads)
            w.threads = kPackedWalkMostThreads / w.row_vectors * w.row_vectors;
        w.by_row = make_divisor(w.row_vectors);
        w.by_sample = make_divisor(static_cast<int>(positions * w.row_vectors));
    } else {
        w.by_plane = make_divisor(static_cast<int>(positions / width));
    }
    return w;
}

}  // namespace

void plan_gn_forward_slices(const GnForward& p, const DeviceShape& device, GnForwardPlan& plan) {
    SlotTensors tensors;
    tensors.slot[kSlotX] = &p.x;
    tensors.slot[kSlotY] = &p.y;
    plan.slices = plan_slices(p.shape, tensors, device);
    const GnGroupShape& shape = plan.slices.order.shape;
    plan.slices.terms_threads = slice_terms_threads(shape.channels * plan.slices.layout.splits, device.wave_size);
    // Channels inner, 16-bit vectors need 8 channels' factors each, loaded
    // anew for every 4 vectors a thread: the packed walk lost there (H200,
    // 1x128x512x512 and 1x256x256x256 NHWC, 0.65x-0.72x; float 1.04x-1.09x).
    GnPackedWalk& packed = plan.slices.packed;
    packed = plan_packed_walk(p.shape, {&p.x, &p.y});
    if (packed.channels_inner && dtype_size(p.x.dtype) < 4) packed = GnPackedWalk{};
    plan.needs = GnScratchNeeds{scratch_bytes(plan.slices.layout), 0};
}

void plan_gn_backward_slices(const GnBackward& p, const DeviceShape& device, GnBackwardPlan& plan) {
    SlotTensors tensors;
    tensors.slot[kSlotX] = &p.x;
    tensors.slot[kSlotY] = &p.dy;
    tensors.slot[kSlotDx] = &p.dx;
    const Lengths& len = p.shape.len;
    plan.slices = plan_slices(p.shape, tensors, device);
    // Positions inner, bfloat16 stays on the feature walk: its packed apply
    // (74-78 registers, three blocks a multiprocessor) lost 0.94x-0.95x
    // where float and half gained up to 1.09x (H200, 1x256x256x256 and
    // 1x128x512x512 NCHW, two rounds).  Channels inner, dx's terms differ
    // lane by lane (weight, and bias under the activation, per channel):
    // each thread finds its lanes' terms once for kPackedInnerBatches
    // batches of vectors (ncu, 1x128x512x512 fp16 NHWC: the feature walk's
    // apply 56.9 us at 68% of DRAM bandwidth, NCHW's packed apply 45.6 at
    // 83%; the packed apply 1.04x-1.09x on the NHWC VAE backward, H200).
    // Its blocks are whole waves of whole rows, or the feature walk runs.
    GnPackedWalk& packed = plan.slices.packed;
    packed = plan_packed_walk(p.shape, {&p.x, &p.dy, &p.dx});
    if (packed.channels_inner) {
        const int rows_of_waves = std::lcm(packed.row_vectors, std::max(1, device.wave_size));
        packed.threads = kPackedWalkMostThreads / rows_of_waves * rows_of_waves;
        packed.batches = kPackedInnerBatches;
        if (packed.threads == 0) packed = GnPackedWalk{};
    } else if (p.x.dtype == DType::bf16) {
        packed = GnPackedWalk{};
    }
    const FeatureLayout& layout = plan.slices.layout;
    plan.needs = backward_scratch_needs(layout.feature.size, layout.splits, len[kN] * p.shape.groups);
}

}  // namespace gpu
}  // namespace mbn
