#include "gpu/gn_persistent.hpp"

#include "common/dtype.hpp"
#include "gpu/gn_tile.hpp"

#include <algorithm>
#include <climits>
#include <cstdint>

namespace mbn {
namespace gpu {
namespace {

// Under the size rule, x of at least this many bytes (NCHW-like, NHWC-like),
// where the slices it replaces lost (H200, forward + swish, the tiles
// refusing: NCHW float 16-128 MB 1.11x-1.25x, NHWC 4-128 MB 1.07x-1.40x);
// below, its fixed cost (one barrier, two channels inner, each a chain of
// latencies) is most of the call.
constexpr std::int64_t kGnPersistentLeastBytes[2] = {8ll << 20, 4ll << 20};

constexpr const char* kPastTwiceTheL2 = "what a grid cannot hold on chip exceeds twice the L2";
constexpr const char* kGroupsPastShares = "its groups are smaller than a block's share";
// Under the size rule a round of the forward takes at least this much of
// x: smaller rounds pay the launch and the grid's chain each for too little
// data.  H200, NCHW forwards that took the slices, in rounds (bench/RESULTS.md,
// forty-fourth session): rounds of 42 MB (8x320x128x128) 1.05x-1.42x, of
// 33.5 MB (float 16x512x64x64) 0.88x-0.90x.
constexpr std::int64_t kGnPersistentRoundLeastBytes = 40ll << 20;

std::int64_t ceil_div(std::int64_t a, std::int64_t b) { return (a + b - 1) / b; }

std::int64_t gcd(std::int64_t a, std::int64_t b) { return b == 0 ? a : gcd(b, a % b); }

// What differs between the directions: the tensors held a slot (the
// forward x, the backward x and dy), a thread's register slots, and the
// shared memory before the held vectors (gn_persistent.hpp), which depends
// on the walk's threads.
struct Direction {
    bool backward;
    int register_slots;
    int inputs() const { return backward ? 2 : 1; }
};

Direction forward_direction(bool channels_inner) {
    return Direction{false, gn_persistent_forward_register_slots(channels_inner)};
}

// The bytes a walk streams (reads twice: x, and the backward's dy), over
// the grid: each thread's slots past its registers and shared memory.
std::int64_t streamed_bytes(const GnPersistentWalk& w, const Direction& d) {
    const std::int64_t beyond_registers = std::max(0, w.slots - d.register_slots);
    return (beyond_registers - w.shared_slots) * w.threads * 16ll * d.inputs() * w.blocks;
}

std::size_t fixed_shared_bytes(const GnPersistentWalk& w, const Direction& d, int width) {
    if (!d.backward)
        return gn_persistent_sums_bytes(w.threads) + gn_persistent_stats_bytes(w.block_groups) +
               gn_persistent_params_bytes(w.block_channels);
    const int lanes = gn_persistent_backward_sum_lanes(w.channels_inner, width, w.block_slices);
    return gn_persistent_backward_sums_bytes(w.threads, lanes) + gn_persistent_backward_groups_bytes(w.block_groups) +
           gn_persistent_params_bytes(w.block_channels);
}

const char* plan_walk(const GnShape& shape, const TensorArg& x, bool packed, const DeviceShape& device, PlanRule rule,
                      const Direction& d, GnPersistentWalk& walk) {
    if (x.dtype != DType::f32 && x.dtype != DType::f16 && x.dtype != DType::bf16) return "its data are float64";
    if (x.order != MemoryOrder::packed_nchw && x.order != MemoryOrder::packed_nhwc)
        return "its data are not packed NCHW-like or NHWC-like";
    if (!packed) return "its tensors differ in layout or are not 16-byte aligned";
    if (device.shared_bytes_per_block <= 0) return "the device's shared memory is unknown";
    // The backward's element arithmetic is float: small float32 groups,
    // where dx cancels, need double (kGnTileExactGroup).
    if (d.backward && x.dtype == DType::f32 && shape.group_size() < kGnTileExactGroup)
        return "its float32 groups are small enough to need double arithmetic";
    const std::int64_t size = static_cast<std::int64_t>(dtype_size(x.dtype));
    const std::int64_t width = 16 / size;
    const std::int64_t samples = shape.len[kN];
    const std::int64_t channels = shape.len[kC];
    const std::int64_t positions = shape.spatial_size();
    const std::int64_t group_channels = shape.channels_per_group();
    const bool inner = x.order == MemoryOrder::packed_nhwc;
    const std::int64_t vectors = x.element_count() / width;
    if ((inner ? channels : positions) % width != 0) return "its innermost dimension is not whole 16-byte vectors";
    if (vectors == 0 || vectors > INT_MAX / 2 || samples * channels > INT_MAX) return "it is too large for int indices";
    if (rule == PlanRule::size_rule && vectors * 16 < kGnPersistentLeastBytes[inner ? 1 : 0])
        return "x is small enough for the slices' second read to come from L2";

    GnPersistentWalk w{};
    w.vectors = static_cast<int>(vectors);
    w.channels_inner = inner;
    w.channels = static_cast<int>(channels);
    w.slices = static_cast<int>(samples * channels);
    w.group_channels = static_cast<int>(group_channels);
    w.groups = static_cast<int>(shape.groups);
    const std::int64_t wave = std::max(1, device.wave_size);
    const std::int64_t processors = std::max(1, device.multiprocessors);
    std::int64_t threads = kGnPersistentThreads;
    std::int64_t block_vectors = 0;
    if (inner) {
        // A thread's lanes keep their channels: blocks of whole rows, and
        // a thread's lanes in at most kGnPersistentThreadGroups groups.
        if (group_channels % width != 0 && width % group_channels != 0)
            return "its groups' channels neither fill nor divide a 16-byte vector";
        if (width / group_channels > kGnPersistentThreadGroups) return "a 16-byte vector holds more than two groups";
        const std::int64_t rows = channels / width;
        const std::int64_t unit = rows / gcd(rows, wave) * wave;
        threads = kGnPersistentThreads / unit * unit;
        if (threads < kGnPersistentLeastThreads) return "its rows of channels are too long for a block";
        if (samples > processors) return "it has more samples than the device has multiprocessors";
        w.row_vectors = static_cast<int>(rows);
        w.sample_blocks = static_cast<int>(processors / samples);
        w.sample_vectors = static_cast<int>(positions * rows);
        w.blocks = static_cast<int>(samples) * w.sample_blocks;
        block_vectors = ceil_div(positions, w.sample_blocks) * rows;
        w.block_groups = w.groups;
        w.block_channels = w.channels;
    } else {
        const std::int64_t group_vectors = group_channels * positions / width;
        const std::int64_t plane_vectors = positions / width;
        w.blocks = static_cast<int>(std::min(processors, vectors));
        block_vectors = ceil_div(vectors, w.blocks);
        if (block_vectors > group_vectors) return kGroupsPastShares;
        w.blocks = static_cast<int>(ceil_div(vectors, block_vectors));
        w.block_groups = kGnPersistentThreadGroups;
        w.group_vectors = static_cast<int>(group_vectors);
        w.by_group = make_divisor(w.group_vectors);
        w.plane_vectors = static_cast<int>(plane_vectors);
        w.by_plane = make_divisor(w.plane_vectors);
        if (d.backward) {
            // A share of block_vectors from any vector on touches at most this many slices.
            w.block_slices = static_cast<int>(ceil_div(block_vectors - 1, plane_vectors) + 1);
            if (w.block_slices > kGnPersistentBackwardSlices) return "its planes are too short for a block's share";
            w.block_channels = w.block_slices;
        } else {
            w.block_channels = static_cast<int>(kGnPersistentThreadGroups * group_channels);
        }
    }
    w.threads = static_cast<int>(threads);
    w.block_vectors = static_cast<int>(block_vectors);
    if (!inner) w.by_share = make_divisor(w.block_vectors);
    w.slots = static_cast<int>(ceil_div(block_vectors, threads));
    w.inv_group_size = 1.0 / static_cast<double>(shape.group_size());

    // Shared memory: the sums, statistics, weights and biases first, then as
    // many slots as fit.
    const std::size_t fixed = fixed_shared_bytes(w, d, static_cast<int>(width));
    const std::int64_t shared = device.shared_bytes_per_block;
    if (static_cast<std::int64_t>(fixed) > shared) return "its groups are too many for shared memory";
    const std::int64_t slot_bytes = threads * 16 * d.inputs();
    const std::int64_t room = (shared - static_cast<std::int64_t>(fixed)) / slot_bytes;
    const std::int64_t beyond_registers = std::max<std::int64_t>(0, w.slots - d.register_slots);
    w.shared_slots = static_cast<int>(std::min(room, beyond_registers));
    w.shared_bytes = fixed + static_cast<std::size_t>(w.shared_slots) * slot_bytes;

    // The streamed bytes are read again after the whole grid's: from L2 as
    // far as it still holds them, the rest from DRAM (kGnPersistentStreamedL2s).
    if (streamed_bytes(w, d) > kGnPersistentStreamedL2s * device.l2_or_assumed()) return kPastTwiceTheL2;
    walk = w;
    return nullptr;
}

// Whether the forward can run as `rounds` equal runs of whole groups in
// memory order: whole samples each, or an equal part of one sample's groups.
bool rounds_split(const GnShape& shape, std::int64_t rounds) {
    const std::int64_t samples = shape.len[kN];
    if (samples % rounds == 0) return true;
    return rounds % samples == 0 && shape.groups % (rounds / samples) == 0;
}

TensorArg offset_by(const TensorArg& t, std::int64_t elements) {
    TensorArg moved = t;
    if (t.present()) moved.data = static_cast<char*>(t.data) + elements * static_cast<std::int64_t>(dtype_size(t.dtype));
    return moved;
}

}  // namespace

GnForward gn_persistent_round(const GnForward& p, int rounds, int r) {
    GnForward q = p;
    const std::int64_t samples = p.shape.len[kN];
    if (samples % rounds == 0) {
        const std::int64_t per_round = samples / rounds;
        const std::int64_t n = per_round * r;
        q.shape.len[kN] = per_round;
        for (TensorArg* t : {&q.x, &q.y, &q.mean, &q.rstd}) {
            *t = offset_by(*t, n * t->stride[kN]);
            t->len[kN] = per_round;
        }
        return q;
    }
    // An equal part of one sample's groups: channels [c, c + C') of sample n.
    const std::int64_t parts = rounds / samples;
    const std::int64_t n = r / parts;
    const std::int64_t groups = p.shape.groups / parts;
    const std::int64_t g = (r % parts) * groups;
    const std::int64_t channels = groups * p.shape.channels_per_group();
    const std::int64_t c = g * p.shape.channels_per_group();
    q.shape.len[kN] = 1;
    q.shape.len[kC] = channels;
    q.shape.groups = groups;
    for (TensorArg* t : {&q.x, &q.y}) {
        *t = offset_by(*t, n * t->stride[kN] + c * t->stride[kC]);
        t->len[kN] = 1;
        t->len[kC] = channels;
    }
    for (TensorArg* t : {&q.weight, &q.bias}) {
        *t = offset_by(*t, c * t->stride[kC]);
        t->len[kC] = channels;
    }
    for (TensorArg* t : {&q.mean, &q.rstd}) {
        *t = offset_by(*t, n * t->stride[kN] + g * t->stride[kC]);
        t->len[kN] = 1;
        t->len[kC] = groups;
    }
    return q;
}

const char* plan_gn_persistent(const GnForward& p, const DeviceShape& device, PlanRule rule, GnPersistentWalk& walk) {
    return plan_walk(p.shape, p.x, packed_alike({&p.x, &p.y}), device, rule,
                     forward_direction(p.x.order == MemoryOrder::packed_nhwc), walk);
}

const char* plan_gn_persistent_rounds(const GnForward& p, const DeviceShape& device, PlanRule rule,
                                      GnPersistentWalk& walk, int& rounds) {
    rounds = 1;
    const char* why = plan_gn_persistent(p, device, rule, walk);
    const std::int64_t half_l2 = device.l2_or_assumed() / 2;
    // Rounds serve NCHW-like forwards that stream past half the L2 (or past
    // twice it), and those where a block's share of the whole x would pass
    // a group (many samples: a round's shares are smaller).  Channels-last,
    // only samples could split (a sample's groups interleave in every row),
    // and there a round per sample ran 0.96x-0.98x of the one launch (H200,
    // half 2x128x512x512: its two-barrier chain, paid per round, outweighed
    // the streamed slots read again from DRAM).
    if (p.x.order != MemoryOrder::packed_nchw) return why;
    const Direction forward = forward_direction(false);
    const bool split = why == nullptr ? streamed_bytes(walk, forward) > half_l2
                                      : why == kPastTwiceTheL2 || why == kGroupsPastShares;
    if (!split) return why;
    const std::int64_t bytes = p.x.element_count() * static_cast<std::int64_t>(dtype_size(p.x.dtype));
    const std::int64_t least = rule == PlanRule::size_rule ? kGnPersistentRoundLeastBytes : 0;
    const std::int64_t most = p.shape.len[kN] * p.shape.groups;
    for (std::int64_t r = 2; r <= most && r <= INT_MAX && bytes / r >= least; ++r) {
        if (!rounds_split(p.shape, r)) continue;
        GnPersistentWalk w{};
        if (plan_gn_persistent(gn_persistent_round(p, static_cast<int>(r), 0), device, rule, w) != nullptr) continue;
        if (streamed_bytes(w, forward) > half_l2) continue;
        walk = w;
        rounds = static_cast<int>(r);
        return nullptr;
    }
    return why;
}

const char* plan_gn_persistent_backward(const GnBackward& p, const DeviceShape& device, PlanRule rule,
                                        GnPersistentWalk& walk) {
    const bool inner = p.x.order == MemoryOrder::packed_nhwc;
    const Direction backward{true, gn_persistent_backward_register_slots(inner, p.activation == Activation::swish)};
    return plan_walk(p.shape, p.x, packed_alike({&p.x, &p.dy, &p.dx}), device, rule, backward, walk);
}

}  // namespace gpu
}  // namespace mbn
