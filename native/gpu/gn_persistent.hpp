// Group norm as a persistent launch over packed tensors too large for the
// on-chip tiles (the algorithm gn_persistent): the forward's kernel is
// gn_persistent_forward.h (launched by gn_forward_persistent.hip), the
// backward's gn_persistent_backward.h (gn_backward_persistent.hip).
//
// One block a multiprocessor, all resident at once.  Each block takes a
// contiguous share of x's 16-byte vectors (channels inner: whole rows of
// C / W vectors of one sample) and each thread the vectors start + k *
// threads + t of it, its slots k.  The first R stay in registers
// (gn_persistent_forward_register_slots; the backward's own below), the
// next shared_slots in shared memory; the rest are
// streamed: read for the sums, read again for the output, newest first,
// from L2 as far as it holds them (the planner bounds them to
// kGnPersistentStreamedL2s times its size).  The block's per-group sums of x
// minus its group's first element go to the scratch, the grid meets once
// (grid_barrier.h), each block merges the sums of the groups it touches in
// block order, then writes y from what it holds: DRAM sees x once where
// the streamed bytes stay in L2, and x plus the streamed bytes L2 no
// longer holds beyond, against twice x for the slices.
//
// The backward walks the same shares holding x and dy a slot: the sums of
// g and g * xhat per slice (positions inner) or per channel (channels
// inner) before the barrier, dx from what the block holds after, against
// x and dy read twice by the slices.
#pragma once

#include "common/group_norm_problem.hpp"
#include "gpu/divisor.hpp"
#include "gpu/feature_plan.hpp"
#include "gpu/gn_layout.hpp"

#include <cstddef>
#include <cstdint>

namespace mbn {
namespace gpu {

constexpr int kGnPersistentThreads = 512;       // the most a block has
// The grid's streamed bytes, at most this many times the L2.  Past half the
// L2 their second read comes partly from DRAM, but the slices read all of
// x twice.  H200 (50 MB L2, bench/RESULTS.md, thirty-fifth session), the
// persistent launch against the slices: x of 128 MB (streamed ~1.7 L2)
// 1.02x-1.16x, 160 MB (~2.3) 0.99x-1.01x, 192 MB float NCHW (~2.9) 0.95x,
// 256 MB float NCHW (~4.2) 0.90x.
constexpr int kGnPersistentStreamedL2s = 2;
constexpr int kGnPersistentLeastThreads = 128;  // fewer leave the multiprocessor's loads too few
// Blocks of at least this many threads take a forward the tiles would run
// long (gn_tiles_run_long): 1x1280x64x64 float NHWC, whose rows of 320
// vectors leave 320 threads, lost to its tiles (24.0 -> 28.0 us).
constexpr int kGnPersistentFullThreads = 448;
// The forward's slots of x a thread holds in registers: 16 (256 bytes;
// bfloat16 too, its held vectors packed between the passes, widen_in_pass)
// positions inner, 12 channels inner, where each lane's sums and factors
// take registers too, so that the shared and streamed slots can load
// kGnPersistentForwardBatch at a time without stack.
MBN_HOST_DEVICE constexpr int gn_persistent_forward_register_slots(bool inner) { return inner ? 12 : 16; }
// Shared and streamed slots the forward loads a batch at a time: 8 against
// 4 (channels inner with 4 fewer register slots), H200 (bench/RESULTS.md,
// thirty-seventh session): 1.010x over the large rows it serves, 16-bit
// NCHW 64 MB 1.02x-1.04x, 2x1280x64x64 float 1.03x-1.07x.
constexpr int kGnPersistentForwardBatch = 8;
// The backward holds x and dy: 8 slots of each, channels inner 5 (4 under
// the activation), where each lane keeps its sums (and its scaled weight
// and bias): the most without stack (nvcc sm_90, 128 registers; one more
// slot spilled 8-48 bytes).
MBN_HOST_DEVICE constexpr int gn_persistent_backward_register_slots(bool inner, bool swish) {
    return !inner ? 8 : swish ? 4 : 5;
}
// Positions inner, the backward's threads keep a running sum per slice of
// the block's share in shared memory: a share may touch at most this many.
constexpr int kGnPersistentBackwardSlices = 16;
constexpr int kGnPersistentBackwardBatch = 4;  // the backward's shared and streamed slot pairs loaded at a time
// The groups a thread's sums go to: positions inner, the groups its block
// touches (a block's share is at most one group, so it straddles at most
// one boundary); channels inner, the groups its W lanes fall in.
constexpr int kGnPersistentThreadGroups = 2;

struct GnPersistentWalk {
    int blocks;          // the grid: every block resident at once
    int threads;         // a block's; channels inner a multiple of row_vectors
    int vectors;         // of x
    int block_vectors;   // a block's share (the last of a sample or of x may be shorter)
    int slots;           // a thread's in all: ceil(block_vectors / threads)
    int shared_slots;    // of them in shared memory, after the register slots
    bool channels_inner;
    int channels;        // C
    int slices;          // N * C
    int group_channels;  // C / G
    int groups;          // G
    int row_vectors;     // channels inner: C / W
    int sample_blocks;   // channels inner: blocks a sample (each within one sample)
    int sample_vectors;  // channels inner: S * C / W
    int block_groups;    // partials a block stores: positions inner kGnPersistentThreadGroups, channels inner G
    int block_channels;  // weights and biases a block stages: channels inner C, positions inner its slices
                         // (forward 2 C / G, backward block_slices)
    int block_slices;    // backward, positions inner: the slices a block's share touches at most
    int group_vectors;   // positions inner: the vectors of a group, C / G * S / W
    Divisor by_group;    // positions inner: group_vectors
    int plane_vectors;   // positions inner: the vectors of a slice, S / W
    Divisor by_plane;    // positions inner: plane_vectors
    Divisor by_share;    // positions inner: block_vectors (the blocks a group or a slice spans)
    double inv_group_size;
    std::size_t shared_bytes;  // dynamic: the thread sums, group statistics, weights and biases, held vectors
};

// Bytes of the dynamic shared memory before the held vectors: the threads'
// sums (two floats per thread group), the groups' statistics, the channels'
// weights and biases (staged before the grid's barrier, so that the
// output's first factors wait on no load after it).
MBN_HOST_DEVICE constexpr std::size_t gn_persistent_sums_bytes(int threads) {
    return static_cast<std::size_t>(threads) * kGnPersistentThreadGroups * 2 * sizeof(float);
}
MBN_HOST_DEVICE constexpr std::size_t gn_persistent_stats_bytes(int groups) {
    return (static_cast<std::size_t>(groups) * sizeof(GnGroupStats) + 15) / 16 * 16;
}
// ... and the weight and bias of each channel the block writes (two floats).
MBN_HOST_DEVICE constexpr std::size_t gn_persistent_params_bytes(int channels) {
    return (static_cast<std::size_t>(channels) * 2 * sizeof(float) + 15) / 16 * 16;
}

// The backward's shared memory before the held vectors: the threads' sums
// of g and g * xhat (per lane channels inner, per slice of the share positions
// inner), the groups' terms (GnBackwardGroupTerms), the channels' weights and
// biases.
struct GnBackwardGroupTerms {
    float mean, rstd;
    float dx_d, dx_c;  // dx = rstd w g + dx_d (x - mean) + dx_c (gn_persistent_backward.h)
};
MBN_HOST_DEVICE constexpr std::size_t gn_persistent_backward_sums_bytes(int threads, int lanes) {
    return static_cast<std::size_t>(threads) * lanes * 2 * sizeof(float);
}
// The lanes of a thread's sums: channels inner the vector's W, positions
// inner the share's slices, but at least kGnPersistentMergeLanes: after the
// grid's barrier the same space holds each thread's terms of the block's
// two groups (two doubles each) for their merge.
constexpr int kGnPersistentMergeLanes = 2 * kGnPersistentThreadGroups;
MBN_HOST_DEVICE constexpr int gn_persistent_backward_sum_lanes(bool inner, int width, int block_slices) {
    return inner ? width : block_slices > kGnPersistentMergeLanes ? block_slices : kGnPersistentMergeLanes;
}
MBN_HOST_DEVICE constexpr std::size_t gn_persistent_backward_groups_bytes(int groups) {
    return static_cast<std::size_t>(groups) * sizeof(GnBackwardGroupTerms);
}

// nullptr where the walk serves the call (filled in), else why not.  Under
// the size rule only x of at least kGnPersistentLeastBytes
// (gn_persistent_planner.cpp: below, the fixed cost is most of the call),
// and for the NCHW-like backward x and dy past the L2.
const char* plan_gn_persistent(const GnForward& p, const DeviceShape& device, PlanRule rule, GnPersistentWalk& walk);

// The NCHW-like forward in rounds.  Where a grid's streamed slots would pass
// half the L2, their second read comes partly from DRAM; a forward has no
// sum across its groups, so it runs instead as `rounds` launches over equal
// runs of whole groups in memory order (whole samples, or an equal part of
// each sample's groups), each read once: the fewest rounds whose streamed
// slots stay within half the L2.  Likewise where a block's share of the
// whole x would pass a group (many samples), which a round's share does
// not.  `walk` is every round's (they are alike); rounds is 1 where one
// launch serves.
const char* plan_gn_persistent_rounds(const GnForward& p, const DeviceShape& device, PlanRule rule,
                                      GnPersistentWalk& walk, int& rounds);
// Round r of `rounds` as a problem of its own: its samples or its groups of
// one sample, their weights, biases, means and rstds.
GnForward gn_persistent_round(const GnForward& p, int rounds, int r);
const char* plan_gn_persistent_backward(const GnBackward& p, const DeviceShape& device, PlanRule rule,
                                        GnPersistentWalk& walk);

// Scratch: per block, block_groups pairs of double sums; channels inner
// then each group's statistics (from 256 bytes on); one barrier counter.
inline std::size_t gn_persistent_sums_scratch_bytes(const GnPersistentWalk& walk) {
    return (static_cast<std::size_t>(walk.blocks) * walk.block_groups * 2 * sizeof(double) + 255) / 256 * 256;
}
inline std::size_t gn_persistent_scratch_bytes(const GnPersistentWalk& walk) {
    const std::size_t samples = walk.channels_inner ? static_cast<std::size_t>(walk.blocks / walk.sample_blocks) : 0;
    const std::size_t groups = samples * static_cast<std::size_t>(walk.groups);
    return gn_persistent_sums_scratch_bytes(walk) + groups * sizeof(GnGroupStats);
}

// The backward's scratch: the blocks' double sums of g and g * xhat, per
// block and slice of its share positions inner ([block * block_slices + j]),
// per channel and block channels inner ([(n * C + c) * sample_blocks + i]);
// channels inner then each channel's totals over its sample ([n * C + c],
// from 256 bytes on); one barrier counter.
inline std::size_t gn_persistent_backward_sums_scratch_bytes(const GnPersistentWalk& walk) {
    const std::size_t partials = walk.channels_inner
                                     ? static_cast<std::size_t>(walk.slices) * walk.sample_blocks
                                     : static_cast<std::size_t>(walk.blocks) * walk.block_slices;
    return (partials * 2 * sizeof(double) + 255) / 256 * 256;
}
inline std::size_t gn_persistent_backward_scratch_bytes(const GnPersistentWalk& walk) {
    const std::size_t totals = walk.channels_inner ? static_cast<std::size_t>(walk.slices) : 0;
    return gn_persistent_backward_sums_scratch_bytes(walk) + totals * 2 * sizeof(double);
}

}  // namespace gpu
}  // namespace mbn
