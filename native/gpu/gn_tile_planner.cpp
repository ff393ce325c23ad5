#include "gpu/gn_tile_planner.hpp"

#include "common/dtype.hpp"
#include "gpu/feature_plan.hpp"

#include <algorithm>
#include <climits>
#include <cstdint>

namespace mbn {
namespace gpu {
namespace {

constexpr int kPositionDims[] = {kD, kH, kW};

// A tile is split over more blocks of its cluster (to use more
// multiprocessors) only while each keeps at least this many bytes of x:
// below that, one block loads its part in a single round trip anyway, and
// the cluster's barriers would cost more than they save.
constexpr std::int64_t kMinBlockBytes = 16 * 1024;
// A small tile: at most this size.  A small forward tile stays one block
// (no cluster; channels fastest, only where that block holds it at
// kSpreadSlots): measured on the H200, the 16x16-plane UNet rows (20 KB
// tiles) ran 2-5% faster whole, and the 40 KB float tiles 5-9%
// (2x1280x16x16 fp32 9.2 -> 8.4 us; 40 KB half tiles at par), while 80 KB
// tiles lost when their blocks grew (NHWC up to 14%), and so did every
// backward tile kernel.  A small channels-fastest tile takes a block a
// group in both directions where one holds the group (plan_gn_tiles).
constexpr std::int64_t kSmallTileBytes = 48 * 1024;
// The slots a thread holds at most where its rows can spread wider (over
// more threads, or a forward tile over more blocks: plan_gn_tiles).
constexpr int kSpreadSlots = 2;
// A forward plan of this many rounds of clusters runs long (gn_tiles_run_long).
constexpr std::int64_t kGnTilesLongRounds = 3;

std::int64_t ceil_div(std::int64_t a, std::int64_t b) { return (a + b - 1) / b; }

std::int64_t pow2_at_least(std::int64_t v) {
    std::int64_t p = 1;
    while (p < v) p *= 2;
    return p;
}

// The pitch of linear positions (position s at s * pitch; 0 for a single
// position), or -1 when the spatial dimensions do not nest evenly.
std::int64_t position_pitch(const TensorArg& t) {
    std::int64_t pitch = 0;
    std::int64_t next = -1;  // the stride that continues the line
    for (int i = 2; i >= 0; --i) {
        const int dim = kPositionDims[i];
        if (t.len[dim] == 1) continue;
        if (next < 0)
            pitch = t.stride[dim];
        else if (t.stride[dim] != next)
            return -1;
        next = t.stride[dim] * t.len[dim];
    }
    return pitch;
}

bool same_strides(const TensorArg& a, const TensorArg& b) {
    for (int d = 0; d < kDims; ++d)
        if (a.len[d] > 1 && a.stride[d] != b.stride[d]) return false;
    return true;
}

// A block for parts of `rows` x `vectors` (gn_tile.hpp): `columns` threads
// along a row (channels fastest: the vectors; positions fastest: a power of
// two, at least the vectors), the rows spread over threads / columns rows
// of threads, `slots` per thread at most.  threads == 0 when it does not fit.
struct BlockShape {
    int threads, columns, row_threads, slots_used;
    std::int64_t rows, vectors;  // the part's
};

BlockShape block_shape(bool channels_inner, std::int64_t rows, std::int64_t vectors, int threads, int slots) {
    const std::int64_t columns = channels_inner ? vectors : pow2_at_least(vectors);
    if (columns > threads) return BlockShape{};
    const std::int64_t row_threads = threads / columns;
    const std::int64_t used = ceil_div(rows, row_threads);
    if (used > slots) return BlockShape{};
    return BlockShape{threads, static_cast<int>(columns), static_cast<int>(row_threads), static_cast<int>(used), rows,
                      vectors};
}

// The largest part of a tile among `cluster` blocks (gn_tile.hpp, tile_part).
BlockShape part_shape(const GnTileWalk& w, int cluster, int threads, int slots) {
    const std::int64_t rows = w.channels_inner ? ceil_div(w.rows, cluster) : w.rows;
    const std::int64_t vectors = w.channels_inner ? w.vectors : ceil_div(w.vectors, cluster);
    return block_shape(w.channels_inner, rows, vectors, threads, slots);
}

// One block a group of a whole channels-fastest tile
// (GnTileWalk::group_blocks): a column for each vector a group's channels
// touch (the most any group of the tile touches), the fewest threads (from
// `least`, at most `most`) that leave each at most kSpreadSlots rows, else
// the most a block takes if they hold the group in `slots` rows.
// threads == 0 where none does.
BlockShape group_block_shape(const GnTileWalk& w, int width, int least, int most, int slots) {
    std::int64_t touched = 0;
    for (std::int64_t g = 0; g < w.tile_groups; ++g)
        touched = std::max(touched, ((g + 1) * w.channels - 1) / width - g * w.channels / width + 1);
    BlockShape chosen{};
    for (int threads = least; threads <= most; threads *= 2) {
        const BlockShape s = block_shape(true, w.rows, touched, threads, slots);
        if (s.threads == 0) continue;
        chosen = s;
        if (s.slots_used <= kSpreadSlots) break;
    }
    return chosen;
}

// The cluster sizes a tile may take, smallest first: any with channels
// fastest (rows split evenly), powers of two with positions fastest (the
// parts' vectors stay whole).
int next_cluster_size(const GnTileWalk& w, int k) { return w.channels_inner ? k + 1 : 2 * k; }

// A kernel's streamed form (gn_tile.hpp): its blocks' threads, the slots
// a thread holds in all and in registers, the data tensors it streams (x;
// the backward x and dy), and its blocks a multiprocessor (the device's
// resident clusters of that form; the forward 0).
struct StreamedForm {
    int threads, slots, register_slots, tensors, backward_blocks;
};

constexpr StreamedForm kForwardStream{kGnTileForwardThreads, kGnTileStreamSlots, kGnTileStreamRegisterSlots, 1, 0};
constexpr StreamedForm kBackwardStream{kGnTileBackwardThreads, kGnTileBackwardStreamSlots,
                                       kGnTileBackwardStreamRegisterSlots, 2, kGnTileBackwardStreamBlocks};
constexpr StreamedForm kBackwardWideStream{kGnTileBackwardWideThreads, kGnTileBackwardStreamSlots,
                                           kGnTileBackwardStreamRegisterSlots, 2, 1};

// A kernel's streamed form where its register-only clusters would not all
// run at once (or do not fit): the largest cluster of which every one runs
// at once (the forward's blocks each a whole multiprocessor, the
// backward's half of one: the most multiprocessors busy, one round), whose
// parts a thread holds in at most `form.slots` slots, and whose streamed
// bytes (those past the registers, of every streamed tensor, read twice)
// fill at most half the L2: they are read again after the rest of the data
// and the other streamed bytes went through it, newest first, while the
// output's stores go through it too.  0 where none serves (the
// register-only plan stands).
int plan_streamed_cluster(const GnTileWalk& w, const DeviceShape& device, int cluster_limit, std::int64_t tiles,
                          const StreamedForm& form) {
    const std::int64_t l2 = device.l2_or_assumed();
    int chosen = 0;
    for (int k = 1; k <= cluster_limit; k = next_cluster_size(w, k)) {
        if (device.resident_clusters(k, form.backward_blocks) < tiles) continue;
        const BlockShape s = part_shape(w, k, form.threads, form.slots);
        if (s.threads == 0) continue;
        const std::int64_t in_registers = static_cast<std::int64_t>(form.register_slots) * s.row_threads;
        const std::int64_t streamed_rows = std::max<std::int64_t>(0, s.rows - in_registers);
        const std::int64_t streamed_bytes = tiles * k * streamed_rows * s.vectors * 16 * form.tensors;
        if (streamed_bytes <= l2 / 2) chosen = k;
    }
    return chosen;
}

// Rows, vectors and strides of the tiles, or why there are none.
const char* cut_tiles(const GnShape& shape, const TensorArg& x, int width, GnTileWalk& w) {
    const std::int64_t channels = shape.len[kC];
    w.samples = shape.len[kN];
    w.groups = shape.groups;
    w.channels = shape.channels_per_group();
    w.positions = shape.spatial_size();
    const std::int64_t pitch = position_pitch(x);
    if (pitch < 0) return "its positions are not evenly spaced in memory";
    w.channels_inner = w.positions == 1 || (channels > 1 && x.stride[kC] == 1);
    if (w.channels_inner) {
        if (channels > 1 && x.stride[kC] != 1) return "its channels are not contiguous";
        if (w.channels < width) return "its groups hold fewer channels than a 16-byte vector";
        if (w.positions > 1 && pitch % width != 0) return "its rows of channels are not 16-byte aligned";
        // The fewest whole groups whose channels fill whole vectors.
        w.tile_groups = 0;
        for (std::int64_t t = 1; t <= w.groups && t * w.channels <= width * kGnTileMaxThreads; ++t)
            if (w.groups % t == 0 && t * w.channels % width == 0) {
                w.tile_groups = static_cast<int>(t);
                break;
            }
        if (w.tile_groups == 0) return "no whole number of its groups fills whole 16-byte vectors";
        w.rows = w.positions;
        w.vectors = w.tile_groups * w.channels / width;
        w.row_stride = w.positions > 1 ? pitch : 0;
    } else {
        if (pitch != 1) return "neither its channels nor its positions are contiguous";
        if (w.positions % width != 0) return "its positions per channel are not a multiple of a 16-byte vector";
        if (channels > 1 && x.stride[kC] % width != 0) return "its channels are not 16-byte aligned";
        w.tile_groups = 1;
        w.rows = w.channels;
        w.vectors = w.positions / width;
        w.row_stride = channels > 1 ? x.stride[kC] : w.positions;
    }
    if (w.samples > 1 && x.stride[kN] % width != 0) return "its samples are not 16-byte aligned";
    w.sample_stride = x.stride[kN];
    w.tiles_per_sample = w.groups / w.tile_groups;
    return nullptr;
}

// The backward's samples of a one-block tile as one cluster, where such
// clusters launch and all of a sample's tiles' clusters run at once: the
// first block adds the samples' dweight/dbias sums from the others' shared
// memory, where an arrival through global memory (a fence, an atomic and
// reloads on the last block's path) took 1.5-2.3 us (H200, N = 2 UNet rows).
void set_sample_cluster(GnTileWalk& w, const DeviceShape& device) {
    w.sample_cluster = 1;
    if (w.cluster == 1 && w.samples > 1 && w.samples <= kGnTileMaxCluster && device.cluster_blocks > 1 &&
        device.resident_clusters(static_cast<int>(w.samples), w.backward_blocks) >= w.tiles_per_sample)
        w.sample_cluster = static_cast<int>(w.samples);
}

// The walk's divisors, then the walk out.
const char* finish_walk(GnTileWalk& w, GnTileWalk& walk) {
    if (w.tiles() > INT_MAX / w.cluster) return "it has too many groups for one launch";
    w.by_sample_cluster = make_divisor(w.sample_cluster);
    w.by_cluster = make_divisor(w.cluster);
    w.by_tiles_per_sample = make_divisor(static_cast<int>(w.tiles_per_sample));
    w.by_columns = make_divisor(w.columns);
    w.by_row_threads = make_divisor(w.row_threads);
    w.by_channels = make_divisor(static_cast<int>(w.channels));
    walk = w;
    return nullptr;
}

}  // namespace

const char* plan_gn_tiles(const GnShape& shape, std::initializer_list<const TensorArg*> data, bool backward,
                          const DeviceShape& device, GnTileWalk& walk) {
    const TensorArg& x = **data.begin();
    if (x.dtype == DType::f64) return "its data are float64";
    const int size = static_cast<int>(dtype_size(x.dtype));
    const int width = 16 / size;
    for (const TensorArg* t : data) {
        if (!same_strides(x, *t)) return "its data tensors differ in layout";
        if (!aligned16(*t)) return "a data tensor is not 16-byte aligned";
    }
    GnTileWalk w{};
    if (const char* why = cut_tiles(shape, x, width, w)) return why;
    w.exact = backward && x.dtype == DType::f32 && w.group_size() < kGnTileExactGroup;
    w.inv_group_size = 1.0 / static_cast<double>(w.group_size());

    // Blocks per tile (one cluster): the fewest whose parts fit the
    // registers, more when tiles are too few to give every multiprocessor a
    // block, but only while every cluster runs at once (a cluster must fit
    // one GPC, so clusters of 4 or 8 blocks fill fewer multiprocessors than
    // pairs do, and a grid of one cluster too many takes two rounds: 2x).
    // Channels fastest, any size up to the device's largest (rows split
    // evenly); positions fastest, powers of two (the parts' vectors stay
    // one).  At its most threads a forward block takes a whole
    // multiprocessor, a backward block one or half of one by its form
    // (the device's resident clusters count each kernel's and form's own);
    // fewer threads only make more of them fit.
    const int slots = !backward ? kGnTileForwardSlots : w.exact ? kGnTileExactBackwardSlots : kGnTileBackwardSlots;
    const int most_threads = backward ? kGnTileBackwardThreads : kGnTileForwardThreads;
    const std::int64_t axis = w.channels_inner ? w.rows : w.vectors;
    const int cluster_limit = static_cast<int>(std::min<std::int64_t>(
        w.channels_inner ? kGnTileMaxCluster : std::max(1, device.cluster_blocks), axis));
    const std::int64_t tiles = w.samples * w.tiles_per_sample;
    const std::int64_t tile_bytes = static_cast<std::int64_t>(w.tile_groups) * w.group_size() * size;
    const std::int64_t to_fill = std::max<std::int64_t>(1, device.multiprocessors / tiles);
    const std::int64_t split_limit = std::min<std::int64_t>(cluster_limit, to_fill);
    std::int64_t wanted = std::min<std::int64_t>(split_limit, ceil_div(tile_bytes, kMinBlockBytes));
    if (w.channels_inner && !w.exact && tile_bytes <= kSmallTileBytes) {
        // A block a group, each summing only its group's lanes: the tile
        // kernel's threads split theirs between two groups and merge them in
        // double (H200, bench/RESULTS.md, forty-seventh session: the
        // forward; forty-eighth: the backward).  The backward's blocks take
        // at most kGnTileBackwardThreads threads (kGnBlockBackwardSlots
        // slots a thread): blocks of 512 threads at 2 slots measured
        // 0.89x-0.96x against the tile kernel on one sample's 16x16 planes,
        // whose clusters spread over more multiprocessors, where 256 threads
        // at 4 slots measured 1.06x-1.14x (run249, run251); and tiles past
        // this size (NHWC 32x32 planes) 0.66x-0.75x.
        const BlockShape s =
            backward ? group_block_shape(w, width, std::max(kGnTileMinThreads, device.wave_size),
                                         kGnTileBackwardThreads, kGnBlockBackwardSlots)
                     : group_block_shape(w, width, std::max(kGnTileMinThreads, device.wave_size),
                                         kGnTileForwardThreads, kGnTileForwardSlots);
        if (s.threads != 0) {
            w.group_blocks = true;
            w.tile_groups = 1;
            w.tiles_per_sample = w.groups;
            w.vectors = s.vectors;
            w.cluster = 1;
            w.sample_cluster = 1;
            w.threads = s.threads;
            w.columns = s.columns;
            w.row_threads = s.row_threads;
            if (backward) {
                // Counted as the one-block form where a form matters (the
                // resident clusters of samples: fewer than the block's own).
                w.backward_blocks = 1;
                w.shared_bytes = tile_shared(w, true).bytes;
                set_sample_cluster(w, device);
            }
            return finish_walk(w, walk);
        }
    }
    if (!backward && tile_bytes <= kSmallTileBytes) {
        wanted = 1;
        // Channels fastest, a wave issues nearly twice a positions-fastest
        // one's instructions (both groups' lanes, sums shuffled by column;
        // ncu on 2x320x16x16 half: 961 against 486 a wave), so a whole tile
        // whose one block needs more than kSpreadSlots slots a thread is
        // the launch's long pole (there 16 blocks of 512 threads at 3
        // slots, 1.3x the NCHW time).  Such a tile spreads over the fewest
        // blocks whose parts half a block holds at kSpreadSlots (the NCHW
        // shape: 2 slots, 8 waves a multiprocessor) where idle
        // multiprocessors allow it, all clusters at once; short of that
        // shape (clusters of 2 blocks of 512 threads) whole tiles measured
        // faster, as above.
        const int half = most_threads / 2;
        if (w.channels_inner && part_shape(w, 1, most_threads, kSpreadSlots).threads == 0) {
            for (int k = 1; k <= split_limit; k = next_cluster_size(w, k))
                if (part_shape(w, k, half, kSpreadSlots).threads != 0) {
                    if (device.resident_clusters(k) >= tiles) wanted = k;
                    break;
                }
        }
    }
    // The cluster for the kernel form of `blocks` (0: the forward), 0 where
    // none fits.
    auto cluster_for = [&](int blocks) {
        int needed = 0;
        for (int k = 1; k <= cluster_limit && needed == 0; k = next_cluster_size(w, k))
            if (device.resident_clusters(k, blocks) > 0 && part_shape(w, k, most_threads, slots).threads != 0)
                needed = k;
        int cluster = needed;
        for (int k = next_cluster_size(w, needed); needed != 0 && k <= wanted; k = next_cluster_size(w, k))
            if (device.resident_clusters(k, blocks) >= tiles) cluster = k;
        return cluster;
    };
    // The backward's form: g kept in float (one block a multiprocessor,
    // fewer instructions) where that runs every cluster at once, else two
    // blocks a multiprocessor (half the registers, g found again), whose
    // clusters are as many again.  H200 A/B, us, one block -> two: where
    // one block took two rounds, 1x640x64x64 fp16 NCHW 23.9 (the slices)
    // -> 20.4, bf16 NHWC 30.0 -> 25.5, 1x512x64x64 fp16 NCHW 22.9 -> 18.4;
    // where one round sufficed, 1x512x64x64 fp16 NHWC 19.1 -> 23.7,
    // 2x320x64x64 fp16 NCHW 16.7 -> 19.4.  Where neither form runs every
    // cluster at once, the two-block form takes fewer rounds (2x1280x64x64
    // NHWC: bf16 68.9 -> 62.6, though fp16 58.1 -> 62.0).  The exact walk
    // has the two-block form only.
    w.backward_blocks = !backward ? 0 : w.exact ? kGnTileExactBackwardBlocks : 1;
    w.cluster = cluster_for(w.backward_blocks);
    if (backward && !w.exact && (w.cluster == 0 || device.resident_clusters(w.cluster, 1) < tiles)) {
        w.backward_blocks = kGnTileBackwardMostBlocks;
        w.cluster = cluster_for(w.backward_blocks);
    } else if (backward && !w.exact && tiles * w.cluster * 2 <= device.multiprocessors) {
        // The one-block form on at most half the multiprocessors (few
        // tiles, its larger clusters too few at once): the two-block form
        // in larger clusters, all at once, spreads each tile over more of
        // them, one block each.  H200 A/B (run129), 1x320x64x64 and
        // 1x1280x32x32 16-bit, 1x640x32x32 float NCHW (clusters of 2 -> 4):
        // 1.02x-1.06x (1x320x64x64 fp16 12.4 -> 11.7 us).
        const int spread = cluster_for(kGnTileBackwardMostBlocks);
        if (spread > w.cluster) {
            w.backward_blocks = kGnTileBackwardMostBlocks;
            w.cluster = spread;
        }
    }
    // Each kernel streams what its registers cannot hold where the
    // register-only clusters take more than one round (or do not fit), but
    // only onto at least as many multiprocessors as a round of those
    // clusters keeps busy: on fewer, each block's streamed bytes outweigh
    // the rounds saved (H200, run86, forward+swish, streamed against
    // register-only: 64 blocks for 1x1280x64x64 half NCHW's 3 rounds of
    // 120, 0.88x; 96 for 2x640x64x64 bfloat16 NHWC's 2 rounds of 102, 0.89x;
    // 128 blocks for 2x640x64x64 NCHW's 3 rounds of 120, 1.32x-1.37x).  A
    // forward block takes a whole multiprocessor; the backward's two-block
    // form half of one in a full round, while its streamed blocks, fewer
    // than a full round, are taken to spread one a multiprocessor (the
    // block scheduler's way with idle ones).  The exact walk's groups are
    // small: it never streams.
    // The backward's two streamed forms (gn_tile.hpp): positions fastest,
    // the wide one first (H200, run123-124, against the two-block form:
    // 2x640x64x64, 2x320x64x64 float and 2x1280x32x32 float NCHW
    // 1.09x-1.13x); channels fastest, the two-block form, and the wide one
    // only where no register-only plan exists either (1x320x128x128 16-bit
    // NHWC: 1.21x over the slices; in place of a register-only plan of
    // several rounds it measured 0.96x-0.98x: 2x640x64x64 and 2x1280x32x32
    // float).
    const StreamedForm* forms[2] = {&kForwardStream, nullptr};
    if (backward && !w.channels_inner) {
        forms[0] = &kBackwardWideStream;
        forms[1] = &kBackwardStream;
    } else if (backward) {
        forms[0] = &kBackwardStream;
        forms[1] = w.cluster == 0 ? &kBackwardWideStream : nullptr;
    }
    int slots_limit = slots, in_registers = slots, block_threads = most_threads;
    const int form_blocks = std::max(1, w.backward_blocks);
    if (!w.exact && (w.cluster == 0 || device.resident_clusters(w.cluster, w.backward_blocks) < tiles)) {
        const std::int64_t register_round =
            w.cluster == 0 ? 0
                           : static_cast<std::int64_t>(device.resident_clusters(w.cluster, w.backward_blocks)) *
                                 w.cluster / form_blocks;
        for (const StreamedForm* form : forms) {
            if (form == nullptr) break;
            const int streamed_cluster = plan_streamed_cluster(w, device, cluster_limit, tiles, *form);
            const std::int64_t streamed_busy =
                std::min<std::int64_t>(tiles * streamed_cluster, device.multiprocessors);
            if (streamed_cluster != 0 && streamed_busy >= register_round) {
                w.cluster = streamed_cluster;
                if (backward) w.backward_blocks = form->backward_blocks;
                slots_limit = form->slots;
                in_registers = form->register_slots;
                block_threads = form->threads;
                break;
            }
        }
    }
    if (w.cluster == 0) return "its groups are too large to stay on chip";

    // Threads: the fewest that leave each at most two slots, else as many
    // as a block takes.  The kernels are bound by instruction issue once
    // the data arrive, so a block's work is best spread over many waves;
    // beyond two slots a thread's loads are in flight together anyway.
    BlockShape chosen{};
    const int least = std::max(kGnTileMinThreads, device.wave_size);
    for (int threads = least; threads <= block_threads && chosen.threads == 0; threads *= 2) {
        const BlockShape s = part_shape(w, w.cluster, threads, slots_limit);
        if (s.threads != 0 && s.slots_used <= kSpreadSlots) chosen = s;
    }
    if (chosen.threads == 0) chosen = part_shape(w, w.cluster, block_threads, slots_limit);
    w.threads = chosen.threads;
    w.columns = chosen.columns;
    w.row_threads = chosen.row_threads;
    w.streamed = std::max(0, chosen.slots_used - in_registers);

    w.shared_bytes = tile_shared(w, backward).bytes;
    if (w.shared_bytes > kGnTileMaxSharedBytes) return "its tiles hold too many channels for shared memory";
    w.sample_cluster = 1;
    if (backward) set_sample_cluster(w, device);
    return finish_walk(w, walk);
}

namespace {

std::int64_t cluster_rounds(const GnTileWalk& walk, const DeviceShape& device) {
    std::int64_t resident = device.resident_clusters(walk.cluster, walk.backward_blocks);
    // Blocks a group: those of fewer threads share a multiprocessor (a
    // thread's registers are the tile kernel's).
    if (walk.group_blocks) resident *= kGnTileForwardThreads / walk.threads;
    return resident > 0 ? ceil_div(walk.tiles(), resident) : 0;
}

}  // namespace

bool gn_tiles_run_long(const GnTileWalk& walk, const DeviceShape& device) {
    return cluster_rounds(walk, device) >= kGnTilesLongRounds || walk.streamed > 2 * kGnTileStreamRegisterSlots;
}

bool gn_backward_tiles_yield(const GnTileWalk& walk, const DeviceShape& device) {
    if (walk.channels_inner) return cluster_rounds(walk, device) >= kGnTilesLongRounds;
    return walk.streamed > 0 && walk.backward_blocks == kGnTileBackwardStreamBlocks;
}

}  // namespace gpu
}  // namespace mbn
