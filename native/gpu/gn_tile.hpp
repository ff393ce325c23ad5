// How the on-chip group-norm kernels (gn_tile_forward.hip,
// gn_tile_backward.hip) cut a problem: one launch, each element read once
// into registers, statistics shared on chip, output written from the
// registers.  Plain data only: shared by the host planner (g++) and the
// kernels (hipcc / nvcc).
//
// A tile is what one cluster of blocks (Hopper's thread-block clusters;
// one block elsewhere) normalizes alone: sample n and `tile_groups`
// consecutive groups.  In memory it is `rows` rows of `vectors` 16-byte
// vectors of W elements (contiguous along a row, `row_stride` apart):
//   positions fastest (NCHW-like): a row is a channel (rows = C/G) of S
//     positions; one group per tile;
//   channels fastest (NHWC-like): a row is a position (rows = S) of the
//     tile's tile_groups * C/G channels; a vector may straddle two groups
//     (C/G >= W, so never more).
// The cluster's K blocks (a power of two, at most kGnTileMaxCluster) split
// the position axis: vectors of each row (positions fastest) or rows
// (channels fastest), in K near-equal parts.
//
// Inside a block, thread t is (tx, ty) = (t % columns, t / columns); it
// holds vector tx of rows ty, ty + row_threads, ... of its part: at most
// `slots` rows (the kernels' register arrays; a streamed part, more:
// GnTileWalk::streamed).  So a thread's data are one
// column: its lanes are fixed channels (channels fastest), or its slots are
// fixed channels (positions fastest), and per-channel sums need no
// division.  Channels fastest, columns = the tile's vectors (5 in Stable
// Diffusion's rows of 80 bytes: every lane busy; threads past
// columns * row_threads idle) and the block adds a column's partials in
// shared memory; positions fastest, columns is a power of two (at least the
// part's vectors) and a row's partials add by shuffles first.
#pragma once

#include "gpu/divisor.hpp"
#include "gpu/feature_layout.hpp"

#include <cstdint>

namespace mbn {
namespace gpu {

// Per kernel: the most threads of a block and the 16-byte vectors of x each
// thread holds, within the registers a multiprocessor has (no spills): the
// forward 64 KB of x per block, one block a multiprocessor; the backward
// 44 KB of x and 44 KB of dy per block, in one of two forms
// (GnTileWalk::backward_blocks, its __launch_bounds__):
//   1 block a multiprocessor: g of every element kept in float for dx (up
//     to 255 registers a thread: x packed 44, g 88);
//   2 blocks: x and dy kept packed (88 of 128 registers), g found again
//     for dx (with the swish a second exponential).
constexpr int kGnTileForwardThreads = 512;
constexpr int kGnTileForwardSlots = 8;
// A forward tile too large for one round of clusters whose registers hold
// it (gn_tile_planner.cpp) goes to fewer blocks, each thread holding slots
// 0 .. kGnTileStreamRegisterSlots - 1 in registers and STREAMING the rest
// of its part (GnTileWalk::streamed), up to kGnTileStreamSlots slots in
// all: read for the statistics and read again, from L2, for the output (x
// leaves DRAM once).  kGnTileStreamBatch loads of a thread are in flight
// together.  Two register slots fewer than the register-only form leave
// the batches their registers: with 8, the 16-bit NHWC instances spilled
// 32-168 bytes (now 0-8 for fp16, up to 88 for bf16, whose lanes widen
// into more registers).
constexpr int kGnTileStreamSlots = 4 * kGnTileForwardSlots;
constexpr int kGnTileStreamRegisterSlots = 6;
constexpr int kGnTileStreamBatch = 4;
constexpr int kGnTileBackwardThreads = 256;
constexpr int kGnTileBackwardSlots = 11;
constexpr int kGnTileBackwardMostBlocks = 2;
// The backward streams as the forward does (kGnTileStreamSlots, above) where
// its register-only clusters take more than one round: the two-block form
// (128 registers a thread, g found again for dx), slots 0 ..
// kGnTileBackwardStreamRegisterSlots - 1 of x and dy packed in registers,
// the rest of the part (up to kGnTileBackwardStreamSlots slots in all) read
// for the sums in batches of kGnTileBackwardStreamBatch slots and read
// again, from L2, for dx in batches of kGnTileBackwardStreamDxBatch (x and
// dy: twice as many loads in flight).  The sums' batches share the
// registers with the register slots (and, channels fastest, every lane's
// sums): batches of 4 there made ptxas spill the register slots (up to 280
// bytes); dx's batches come after the register slots' dx, with their
// registers free.  Its wide form runs the same code in blocks of
// kGnTileBackwardWideThreads threads, one a multiprocessor (the same 128
// registers a thread), where a round of such clusters takes every tile:
// twice the waves, so twice the loads in flight, of two-block-form blocks
// spread one a multiprocessor over idle ones (gn_tile_planner.cpp says
// where each form is taken).
constexpr int kGnTileBackwardStreamSlots = 32;
constexpr int kGnTileBackwardWideThreads = 512;
constexpr int kGnTileBackwardStreamRegisterSlots = 6;
constexpr int kGnTileBackwardStreamBatch = 3;
constexpr int kGnTileBackwardStreamDxBatch = 4;
constexpr int kGnTileBackwardStreamBlocks = 2;
// The backward of float32 groups under kGnTileExactGroup values runs its
// element arithmetic in double (GnTileWalk::exact; the slices backward
// off chip follows the same rule, gn_backward_walks.h): there
// dx = rstd (w g - mean(w g) - xhat mean(w g xhat)) cancels (in a 2-value
// group, to rounding), and float would leave errors of rstd * 1e-7, beyond
// float32's tolerance once the group's values lie close together.  Its
// double sums take registers: fewer slots, and one form, two blocks a
// multiprocessor (110-124 registers; its groups are small, its tiles one
// block each).
constexpr std::int64_t kGnTileExactGroup = 64;
constexpr int kGnTileExactBackwardSlots = 4;
constexpr int kGnTileExactBackwardBlocks = 2;
// The backward's block a group (GnTileWalk::group_blocks, at most
// kGnTileBackwardThreads threads) holds a thread's x and dy of at most this
// many slots, and g of each in float for dx.
constexpr int kGnBlockBackwardSlots = 4;
constexpr int kGnTileMaxThreads = 512;
constexpr int kGnTileMinThreads = 64;   // at least one wave on every target
constexpr int kGnTileMaxCluster = 8;    // the portable cluster size
// Static limit of shared memory without an opt-in attribute.
constexpr int kGnTileMaxSharedBytes = 48 * 1024;
// Waves are at least this wide: shared arrays indexed by wave are sized by it.
constexpr int kGnTileNarrowestWave = 32;

struct GnTileWalk {
    // The problem.
    std::int64_t samples;       // N
    std::int64_t groups;        // G
    std::int64_t channels;      // C / G
    std::int64_t positions;     // S
    int tile_groups;            // groups per tile: 1 when positions are fastest
    std::int64_t tiles_per_sample;  // G / tile_groups
    bool channels_inner;
    // Memory, in elements, the same for every data tensor of the call.
    std::int64_t sample_stride;
    std::int64_t row_stride;
    // A tile: rows x vectors (of the kernels' vector width W).
    std::int64_t rows;
    std::int64_t vectors;
    // The launch: tiles * cluster blocks of `threads` threads.
    int cluster;      // K blocks per tile, one cluster
    int threads;      // T, a power of two
    int columns;      // threads along a row
    int row_threads;  // rows of threads: T / columns, rounded down
    int shared_bytes; // dynamic shared memory per block
    bool exact;       // backward: element arithmetic in double (kGnTileExactGroup)
    // Channels fastest, where a tile would be small: one block a group
    // instead (gn_block_forward_group, gn_block_backward_group), holding
    // the `vectors` vectors its channels touch; tile_groups is 1 and
    // tiles_per_sample G, so tile_base is the group's first element.
    bool group_blocks;
    int backward_blocks;  // backward: its form, by blocks a multiprocessor (1 or 2; the forward: 0)
    int streamed;     // the most slots a thread streams past the registers' (kGnTileStreamRegisterSlots,
                      // backward kGnTileBackwardStreamRegisterSlots; 0: none)
    // Backward with dweight/dbias and one block a tile: the tile's N samples
    // as one thread-block cluster (N blocks, 2 <= N <= kGnTileMaxCluster),
    // whose first block adds their sums from the others' shared memory in
    // place of the arrival through global memory (0 or 1: none; the host
    // sets it where clusters launch).
    int sample_cluster;
    double inv_group_size;  // 1 / group_size(): the finishing threads multiply, not divide
    // The kernels' divisors (set with the fields they divide by).
    Divisor by_cluster, by_tiles_per_sample, by_columns, by_row_threads, by_channels, by_sample_cluster;

    MBN_HOST_DEVICE std::int64_t tiles() const { return samples * tiles_per_sample; }
    // Blocks of one hardware cluster: the tile's, or the samples'.
    MBN_HOST_DEVICE int launch_cluster() const { return sample_cluster > 1 ? sample_cluster : cluster; }
    MBN_HOST_DEVICE std::int64_t group_size() const { return channels * positions; }
    MBN_HOST_DEVICE std::int64_t tile_channels() const { return channels * tile_groups; }
    // Offset of the tile's first element (channel 0, position 0).
    MBN_HOST_DEVICE std::int64_t tile_base(std::int64_t n, std::int64_t tile) const {
        const std::int64_t channel_stride = channels_inner ? 1 : row_stride;
        return n * sample_stride + tile * tile_channels() * channel_stride;
    }
    // Channels whose sums a block keeps: the tile's (channels fastest), or
    // its rows (positions fastest, one group).
    MBN_HOST_DEVICE std::int64_t block_channels() const { return channels_inner ? tile_channels() : rows; }
};

// The part of a tile block `rank` of its cluster holds.  A tile fits a
// cluster's registers (streamed, a few times them), so its rows and
// vectors (and the tiles of a launch, the planner checks) count in int: no
// 64-bit division in the kernels.
struct GnTilePart {
    int row0, rows;
    int vector0, vectors;
};

MBN_HOST_DEVICE inline GnTilePart tile_part(const GnTileWalk& w, int rank) {
    const int axis = static_cast<int>(w.channels_inner ? w.rows : w.vectors);
    const int begin = w.by_cluster.divide(axis * rank);
    const int end = w.by_cluster.divide(axis * (rank + 1));
    if (w.channels_inner) return GnTilePart{begin, end - begin, 0, static_cast<int>(w.vectors)};
    return GnTilePart{0, static_cast<int>(w.rows), begin, end - begin};
}

// The forward, channels fastest: whether each wave adds up its lanes'
// partials before they go to shared memory, one entry row per wave.  It
// can where the tile is one group (every lane adds to it), or where a wave
// holds each column more than once (fewer columns than the narrowest wave:
// lanes `columns` apart hold the same channels).  Otherwise every thread
// stores its own (a row of threads per entry row).
MBN_HOST_DEVICE inline bool forward_wave_entries(const GnTileWalk& w) {
    return w.tile_groups == 1 || w.columns < kGnTileNarrowestWave;
}

// Partials per channel (or group) before the block folds them, sized for
// the narrowest wave:
//   forward: `entry_rows` x `entry_columns` (lo group, hi group) triples:
//     one per wave (positions fastest, the block one group; channels
//     fastest, forward_wave_entries: one per column of the wave, or one
//     in all for a tile of one group) or one per thread;
//   backward: `entry_rows` x block_channels() pairs of sums: one per wave
//     along a row (positions fastest) or per row of threads.
MBN_HOST_DEVICE inline int entry_rows(const GnTileWalk& w, bool backward, int wave) {
    if (!backward && (!w.channels_inner || forward_wave_entries(w))) return w.threads / wave;
    if (w.channels_inner) return w.row_threads;
    return w.columns > wave ? w.columns / wave : 1;
}
MBN_HOST_DEVICE inline int entry_columns(const GnTileWalk& w) { return w.channels_inner ? w.columns : 1; }

// Byte offsets of the kernels' shared arrays (dynamic shared memory).
struct GnTileShared {
    int entries;  // forward: 6 doubles per entry; backward: 2 floats (exact: 2 doubles)
    int block;    // forward: 3 doubles per group; backward: 2 doubles per channel
    int totals;   // forward: 2 doubles per group (offset, rstd); backward: 2 doubles per channel
    int terms;    // backward: 2 doubles per group
    int params;   // backward: the block's channels' weight and bias, 2 floats each
    int stats;    // backward, tile_dx_factors: the tile's groups' saved mean and rstd, 2 floats each
    int coefs;    // backward, tile_dx_factors: dx's factors of the block's channels, 4 floats each
    int flag;     // backward: the last-arrival flag
    int bytes;
};

constexpr int kGnForwardEntryDoubles = 6;  // A, B, C of the lo and hi groups

MBN_HOST_DEVICE inline int round_up_16(std::int64_t bytes) { return static_cast<int>((bytes + 15) / 16 * 16); }

// Whether the backward kernel's form takes dx from per-channel factors
// (gn_tile_backward.hip, GnDxCoefs): channels fastest, two blocks a
// multiprocessor, nothing streamed, float arithmetic.
MBN_HOST_DEVICE inline bool tile_dx_factors(const GnTileWalk& w) {
    return w.channels_inner && w.backward_blocks == kGnTileBackwardMostBlocks && w.streamed == 0 && !w.exact;
}

MBN_HOST_DEVICE inline GnTileShared tile_shared(const GnTileWalk& w, bool backward) {
    const std::int64_t rows = entry_rows(w, backward, kGnTileNarrowestWave);
    GnTileShared s{};
    std::int64_t at = 0;
    s.entries = 0;
    if (backward) {
        const std::int64_t channels = w.block_channels();
        at += round_up_16(rows * channels * 2 * (w.exact ? 8 : 4));
        s.block = static_cast<int>(at);
        at += round_up_16(channels * 2 * 8);
        s.totals = static_cast<int>(at);
        at += round_up_16(channels * 2 * 8);
        s.terms = static_cast<int>(at);
        at += round_up_16(static_cast<std::int64_t>(w.tile_groups) * 2 * 8);
        s.params = static_cast<int>(at);
        at += round_up_16(channels * 2 * 4);
        const bool factors = tile_dx_factors(w);
        s.stats = static_cast<int>(at);
        at += factors ? round_up_16(static_cast<std::int64_t>(w.tile_groups) * 2 * 4) : 0;
        s.coefs = static_cast<int>(at);
        at += factors ? round_up_16(channels * 4 * 4) : 0;
        s.flag = static_cast<int>(at);
        at += 16;
    } else {
        at += round_up_16(rows * entry_columns(w) * kGnForwardEntryDoubles * 8);
        s.block = static_cast<int>(at);
        at += round_up_16(static_cast<std::int64_t>(w.tile_groups) * 3 * 8);
        s.totals = static_cast<int>(at);
        at += round_up_16(static_cast<std::int64_t>(w.tile_groups) * 2 * 8);
        s.terms = s.params = s.stats = s.coefs = s.flag = static_cast<int>(at);
    }
    s.bytes = at > (std::int64_t(1) << 30) ? (1 << 30) : static_cast<int>(at);
    return s;
}

}  // namespace gpu
}  // namespace mbn
