// Forward group norm on chip (gn_tile.hpp), one launch: each block loads
// its part of a tile into registers (x read once), takes each group's
// moments, the tile's blocks add theirs up through the cluster's shared
// memory, and each block writes
//     y = act(((x - shift) - offset) * rstd * w[c] + b[c])
// from its registers; shift is the group's first element, so float
// arithmetic sees deviations only.  A streamed walk (kStream,
// GnTileWalk::streamed) holds a thread's first kGnTileStreamRegisterSlots
// slots so and reads the rest twice: in batches for the moments, and again
// (from L2, newest first) for the output.
//
// Moments, exactly and in a fixed order (bitwise repeatable): a thread
// takes the mean m and M2 of its values of a group two-pass in registers;
// the block and then the cluster add (n m, n m^2, M2) in double, in an
// order fixed by thread and rank, never by timing (GnMomentSums).
//
// A tile of one group that one block holds with positions fastest takes a
// leaner form of its own (gn_block_forward, below): float sums over the
// block, in a fixed order too; and where a channels-fastest tile would be
// one block, each of its groups takes a block of that form
// (gn_block_forward_group).
#include "gpu/gn_activation.h"
#include "gpu/gn_launch.hpp"
#include "gpu/gn_stat_io.h"
#include "gpu/gn_tile_device.h"
#include "gpu/gn_tile_launch.h"
#include "gpu/type_dispatch.hpp"

#include <algorithm>
#include <type_traits>

namespace mbn {
namespace gpu {
namespace {

template <typename P>
struct GnTileForwardArgs {
    GnTileWalk walk;
    const P* weight;  // nullptr: weight 1 and bias 0
    const P* bias;
    std::int64_t weight_stride;
    std::int64_t bias_stride;
    GnStatTensor mean;  // written when present
    GnStatTensor rstd;
    double epsilon;
    bool swish;
    // Weight and bias contiguous (stride 1) and 16-byte aligned: channels
    // fastest, a thread's W channels are read 16 bytes at a time.
    bool params_packed;
    float swish_beta;
    // Set on the host: per thread, the shared layout and the parameters'
    // steps from slot to slot (positions fastest) took ~20 integer
    // instructions of every warp's ~110 before its first load.
    GnTileShared layout;          // tile_shared(walk, false)
    std::int64_t weight_slot_step;  // row_threads * weight_stride
    std::int64_t bias_slot_step;
};

// W consecutive parameters at p (16-byte aligned; W of them fill whole 16
// bytes, as sizeof(P) >= sizeof(T)) as float, 16 bytes a load.
template <int W, typename P>
__device__ __forceinline__ void load_channel_params(const P* p, float (&out)[W]) {
    constexpr int kLanes = static_cast<int>(16 / sizeof(P));
    static_assert(W % kLanes == 0, "a thread's parameters fill whole 16-byte loads");
#pragma unroll
    for (int i = 0; i < W / kLanes; ++i) {
        const Pack<P, kLanes> pack = load_pack<kLanes>(p + i * kLanes);
#pragma unroll
        for (int j = 0; j < kLanes; ++j) out[i * kLanes + j] = static_cast<float>(widen(pack.lane[j]));
    }
}

// y's term t beside its scale s = rstd w: y = d s + t with d = x - shift
// and t = b - offset s, one fused multiply-add an element.  Its error
// beside the form (d - offset) s + b is |offset s| 2^-24, offset the
// group's mean less its first element: negligible for 16-bit outputs;
// float32 outputs keep that form (t = b).
template <typename T>
__device__ __forceinline__ float normalize_term(float bias, float offset, float scale) {
    return sizeof(T) == 2 ? bias - offset * scale : bias;
}

// One lane's output from d = x - shift (normalize_term's two forms).
template <typename T, bool kSwish>
__device__ __forceinline__ T normalized_lane(float d, float offset, float scale, float term, float swish_constant,
                                             int lane) {
    float v = sizeof(T) == 2 ? d * scale + term : (d - offset) * scale + term;
    if (kSwish) v = fast_swish_lane<T>(v, swish_constant, lane);
    return narrow<T>(v);
}

__device__ __forceinline__ GnMomentSums moment_sums(float count, float mean, float m2) {
    const double a = static_cast<double>(count) * static_cast<double>(mean);
    return GnMomentSums{a, a * static_cast<double>(mean), static_cast<double>(m2)};
}

// This thread's moment sums of its lo and hi groups (lanes below / from
// `split`), each about the group's shift (`shift[j]`, per lane).  Sums run
// per lane and join their group once, so no element chooses a group.
// `slots`: the thread holds slots 0 .. slots - 1 (held_slots is a prefix),
// so each loop stops at the first slot not held: one branch out of the
// loop, where a test per slot put a branch and its reconvergence around
// every slot.  Sums start at -0.0, which x + (-0.0) = x leaves out of the
// code (from +0.0 the first slot took an add per lane).
template <int R, int W, typename T>
__device__ void thread_moments(const Pack<T, W> (&raw)[R], int slots, int split, const float (&shift)[W],
                               GnMomentSums& lo, GnMomentSums& hi) {
    float lane_sum[W];
#pragma unroll
    for (int j = 0; j < W; ++j) lane_sum[j] = -0.0f;
#pragma unroll
    for (int a = 0; a < R; ++a) {
        if (a >= slots) MBN_UNROLLED_EXIT;
#pragma unroll
        for (int j = 0; j < W; ++j) lane_sum[j] += widen(raw[a].lane[j]) - shift[j];
    }
    float sum_lo = -0.0f, sum_hi = -0.0f;
#pragma unroll
    for (int j = 0; j < W; ++j) (j < split ? sum_lo : sum_hi) += lane_sum[j];
    const float count_lo = static_cast<float>(slots * split);
    const float count_hi = static_cast<float>(slots * (W - split));
    const float mean_lo = count_lo > 0.0f ? sum_lo / count_lo : 0.0f;
    const float mean_hi = count_hi > 0.0f ? sum_hi / count_hi : 0.0f;
    float lane_mean[W], lane_m2[W];
#pragma unroll
    for (int j = 0; j < W; ++j) {
        lane_mean[j] = j < split ? mean_lo : mean_hi;
        lane_m2[j] = -0.0f;
    }
    // 16-bit data: the deviations about shift + mean in one subtraction.
    // The rounding of that centre (|x| 2^-24) moves M2 by n times its
    // square, negligible beside any spread 16-bit values can hold (their
    // own spacing is |x| 2^-11).  float32 data keep the exact deviations.
    constexpr bool kFoldCentre = sizeof(T) == 2;
    float centre[W];
#pragma unroll
    for (int j = 0; j < W; ++j) centre[j] = kFoldCentre ? shift[j] + lane_mean[j] : lane_mean[j];
#pragma unroll
    for (int a = 0; a < R; ++a) {
        if (a >= slots) MBN_UNROLLED_EXIT;
#pragma unroll
        for (int j = 0; j < W; ++j) {
            const float e = kFoldCentre ? widen(raw[a].lane[j]) - centre[j]
                                        : (widen(raw[a].lane[j]) - shift[j]) - centre[j];
            lane_m2[j] += e * e;
        }
    }
    float m2_lo = -0.0f, m2_hi = -0.0f;
#pragma unroll
    for (int j = 0; j < W; ++j) (j < split ? m2_lo : m2_hi) += lane_m2[j];
    lo = moment_sums(count_lo, mean_lo, m2_lo);
    hi = moment_sums(count_hi, mean_hi, m2_hi);
}

// The moments of the thread's streamed slots (R .. at.slots - 1) added to
// lo and hi: kGnTileStreamBatch slots at a time, their loads in flight
// together, each batch's mean and M2 two-pass in registers as the register
// slots' (thread_moments) and its sums added in double, in slot order.
template <int R, int W, typename T>
__device__ void stream_moments(const T* x, const GnTileThread& at, int split, const float (&shift)[W],
                               GnMomentSums& lo, GnMomentSums& hi) {
    constexpr int B = kGnTileStreamBatch;
    const T* slot_x = x + at.offset(R);
    for (int a0 = R; a0 < at.slots; a0 += B) {
        const int count = at.slots - a0 < B ? at.slots - a0 : B;
        Pack<T, W> batch[B];
#pragma unroll
        for (int i = 0; i < B; ++i) {
            if (i >= count) MBN_UNROLLED_EXIT;
            batch[i] = load_pack<W>(slot_x);
            slot_x += at.step;
        }
        GnMomentSums batch_lo, batch_hi;
        thread_moments<B, W>(batch, count, split, shift, batch_lo, batch_hi);
        lo = lo + batch_lo;
        hi = hi + batch_hi;
    }
}

// The block's moment sums of each of the tile's groups into `block_sums`
// (every thread calls).  First each wave adds up what it can by shuffles,
// and its entries go to shared memory (gn_tile.hpp, entry_rows):
//   positions fastest, and channels fastest with the tile one group: the
//     wave's sum, one entry (its lo side; lane 0 stores);
//   channels fastest with fewer columns than a wave: lanes `columns` apart
//     hold the same column (a thread's column is its index modulo
//     `columns`), so lanes 0 .. columns - 1 gather the wave's sums of each
//     column, lo and hi side, and store them;
//   else every thread stores its own.
// Then a wave per group adds the entries of its columns; its lane 0 stores
// the group's sums for the cluster (block_sums) or, a block alone, finishes
// the group at once (`finish`, with no barrier between).  No barrier at the
// end: the caller's next one (a cluster_sync, or the barrier after the
// finishing) publishes what lane 0 stored.
template <int W, bool kInner, typename Finish>
__device__ void block_moments(const GnTileWalk& w, const GnTileThread& at, GnMomentSums lo, GnMomentSums hi,
                              GnMomentSums* entries, GnMomentSums* block_sums, const Finish& finish) {
    const int lane = static_cast<int>(threadIdx.x) % MBN_WAVE_SIZE;
    const int wave = static_cast<int>(threadIdx.x) / MBN_WAVE_SIZE;
    const int columns = kInner ? entry_columns(w) : 1;
    const bool one_group = !kInner || w.tile_groups == 1;  // every lane's sums are lo's, of group 0
    const bool by_wave = !kInner || forward_wave_entries(w);
    if (one_group) {
        wave_sum(1, MBN_WAVE_SIZE, lo);
        if (lane == 0) entries[2 * wave * columns] = lo;
    } else if (by_wave) {
        // Lane l adds lanes l + columns, l + 2 columns, ... below the wave's
        // end: a tree whose every level adds the partner's sums so far,
        // `step` lanes up (a lane past the end adds nothing).  The order is
        // fixed by the lanes.  Lanes past the block's rows hold zero sums.
        for (int step = columns; step < MBN_WAVE_SIZE; step *= 2) {
            const GnMomentSums lo_up = shuffle_down(lo, step);
            const GnMomentSums hi_up = shuffle_down(hi, step);
            if (lane + step < MBN_WAVE_SIZE) {
                lo = lo + lo_up;
                hi = hi + hi_up;
            }
        }
        if (lane < columns) {
            GnMomentSums* entry = entries + 2 * (wave * columns + at.tx);
            entry[0] = lo;
            entry[1] = hi;
        }
    } else if (at.in_block) {
        GnMomentSums* entry = entries + 2 * (at.ty * columns + at.tx);
        entry[0] = lo;
        entry[1] = hi;
    }
    __syncthreads();
    const int rows = entry_rows(w, false, MBN_WAVE_SIZE);
    const int waves = w.threads / MBN_WAVE_SIZE;
    for (int group = wave; group < w.tile_groups; group += waves) {
        // The columns holding lanes of this group: a straddling column adds
        // its hi side to the group after its lo group (the column's first
        // lane lies in the group before).  A tile of one group keeps its
        // sums in column 0.
        int first = 0, count = 1, group_first = 0;
        if (!one_group) {
            const int channels = static_cast<int>(w.channels);
            group_first = group * channels;
            first = group_first / W;
            count = ((group + 1) * channels - 1) / W - first + 1;
        }
        GnMomentSums sum{0.0, 0.0, 0.0};
        // Items column by column, rows fastest (by_wave: the block's waves,
        // a power of two).  Rolled by 4: a lane adds a few entries, and the
        // compiler's deeper unrolling took ~150 instructions.
        const int row_bits = __popc(static_cast<unsigned>(rows - 1));
#pragma unroll 4
        for (int item = lane; item < rows * count; item += MBN_WAVE_SIZE) {
            const int step = !kInner ? 0 : by_wave ? item >> row_bits : w.by_row_threads.divide(item);
            const int row = item - step * rows;
            const int column = first + step;
            const GnMomentSums* entry = entries + 2 * (row * columns + column);
            sum = sum + (column * W >= group_first ? entry[0] : entry[1]);
        }
        if (!one_group) {
            wave_sum(1, MBN_WAVE_SIZE, sum);
        } else {
            // One group: a lane holds one wave's entry (rows = the block's
            // waves); lanes past them hold +0.0, and adding it changes no
            // bit of lane 0's sum (which starts at +0.0, so is never -0.0):
            // the levels whose partners all lie there are left out.  Two
            // fixed chains, so that one convergence check covers each (a
            // level skipped at run time took a check of its own).
            constexpr int kMostWaves = kGnTileForwardThreads / MBN_WAVE_SIZE;
            if (rows <= kMostWaves / 2)
                wave_sum(1, kMostWaves / 2, sum);
            else
                wave_sum(1, kMostWaves, sum);
        }
        if (lane == 0) {
            if (w.cluster > 1)
                block_sums[group] = sum;
            else
                finish(group, sum);
        }
    }
}

// Launched as tile_shared / launch_tile_kernel say.  x may be y: every
// block reads its part (and the groups' first elements) before any block
// of the cluster writes, and only the first block writes those elements
// (slot 0 of its first thread, a register slot).  kStream (the walk's
// streamed > 0): a thread's streamed slots are its own addresses, read
// again before it writes each, so no other thread's write comes between.
template <typename T, typename P, bool kInner, bool kStream>
__global__ void __launch_bounds__(kGnTileForwardThreads, 1)
    gn_tile_forward(const T* x, T* y, GnTileForwardArgs<P> args) {
    constexpr int W = static_cast<int>(16 / sizeof(T));
    constexpr int R = kStream ? kGnTileStreamRegisterSlots : kGnTileForwardSlots;
    extern __shared__ double gn_tile_forward_shared[];
    const GnTileWalk& w = args.walk;
    require_cluster_support(w.cluster);
    const GnTileShared& layout = args.layout;
    const GnTileThread at(w, W);
    // The thread holds slots 0 .. slots - 1 (a prefix: held_slots).  Every
    // loop over slots stops at the first one not held: unrolled, that is
    // one branch out of the loop, so no slot's work issues for nothing.
    const int slots = at.slots < R ? at.slots : R;
    // From slot to slot by a pointer step: one 64-bit add a slot, where
    // x + first + a * step took a 64-bit multiply and a scaled add.
    Pack<T, W> raw[R];
    {
        const T* slot_x = x + at.first;
#pragma unroll
        for (int a = 0; a < R; ++a) {
            if (a >= slots) MBN_UNROLLED_EXIT;
            raw[a] = load_pack<W>(slot_x);
            slot_x += at.step;
        }
    }

    const GnLaneGroups lanes = lane_groups<W, kInner>(w, at.tx);
    const int split = kInner ? lanes.split : W;
    const std::int64_t group_step = kInner ? w.channels : 0;  // between groups' first elements
    // A column past the part's vectors holds nothing (and names no group).
    const bool active = at.active();
    float shift[W];  // per lane: its group's first element
    {
        float shift_lo = 0.0f, shift_hi = 0.0f;
        if (active) {
            shift_lo = widen(x[at.base + lanes.lo * group_step]);
            if (split < W) shift_hi = widen(x[at.base + (lanes.lo + 1) * group_step]);
        }
#pragma unroll
        for (int j = 0; j < W; ++j) shift[j] = j < split ? shift_lo : shift_hi;
    }
    // The weight and bias of each element's channel, fetched beside x so
    // that their latency hides behind the statistics: channels fastest, per
    // lane (the same for every slot); positions fastest, per slot (the row
    // is the channel).  A streamed walk fetches them after its statistics,
    // behind the block's and cluster's sums: held through the streamed
    // batches, they took the registers the batches need (spills).
    constexpr int kParams = kInner ? W : R;
    float weight[kParams], bias[kParams];
    auto load_params = [&] {
        if constexpr (kInner) {
            if (args.params_packed) {
                // One or two 16-byte loads each instead of W scalar ones.
                const std::int64_t c = static_cast<std::int64_t>(at.tile) * w.tile_channels() + at.tx * W;
                if (active) {
                    load_channel_params<kParams>(args.weight + c, weight);
                    load_channel_params<kParams>(args.bias + c, bias);
                } else {
#pragma unroll
                    for (int k = 0; k < kParams; ++k) weight[k] = 1.0f, bias[k] = 0.0f;
                }
            } else {
                const std::int64_t channel0 = static_cast<std::int64_t>(at.tile) * w.tile_channels() + at.tx * W;
#pragma unroll
                for (int k = 0; k < kParams; ++k) {
                    weight[k] = active ? channel_param(args.weight, args.weight_stride, channel0 + k, 1.0f) : 1.0f;
                    bias[k] = active ? channel_param(args.bias, args.bias_stride, channel0 + k, 0.0f) : 0.0f;
                }
            }
        } else if (args.weight == nullptr) {  // not affine: no bias either
#pragma unroll
            for (int k = 0; k < kParams; ++k) {
                if (k >= slots) MBN_UNROLLED_EXIT;
                weight[k] = 1.0f, bias[k] = 0.0f;
            }
        } else {
            // Slot k's row is channel row(0) + k row_threads: pointers that step
            // (measured on 1x640x32x32 fp16, the per-slot index products and
            // null tests made ~170 of the 457 instructions a warp issued before
            // its first statistic).  Only held slots load; the others' entries
            // stay unset and unread.
            const std::int64_t channel = static_cast<std::int64_t>(at.tile) * w.tile_channels() + at.row(w, 0);
            const P* slot_weight = args.weight + channel * args.weight_stride;
            const P* slot_bias = args.bias + channel * args.bias_stride;
            const std::int64_t weight_step = args.weight_slot_step;
            const std::int64_t bias_step = args.bias_slot_step;
#pragma unroll
            for (int k = 0; k < kParams; ++k) {
                if (k >= slots) MBN_UNROLLED_EXIT;
                weight[k] = static_cast<float>(widen(*slot_weight));
                bias[k] = static_cast<float>(widen(*slot_bias));
                slot_weight += weight_step;
                slot_bias += bias_step;
            }
        }
    };
    if constexpr (!kStream) load_params();
    GnMomentSums lo, hi;
    thread_moments<R, W>(raw, slots, split, shift, lo, hi);
    if constexpr (kStream) {
        stream_moments<R, W>(x, at, split, shift, lo, hi);
        load_params();
    }

    void* shared = gn_tile_forward_shared;
    GnMomentSums* block_sums = shared_at<GnMomentSums>(shared, layout.block);
    double* stats = shared_at<double>(shared, layout.totals);  // per group: offset, rstd
    // A group's statistics from the tile's sums: offset and rstd into
    // `stats` (the mean and rstd outputs are written after the barrier).
    auto finish = [&](int group, const GnMomentSums& s) {
        // Products with the host's 1 / count and an rsqrt: a double division
        // or square root is a long dependent chain the block waits on.
        const double offset = s.a * w.inv_group_size;
        const double m2 = s.c + (s.b - s.a * offset);  // the biased variance normalizes
        const double rstd = rsqrt(fmax(m2, 0.0) * w.inv_group_size + args.epsilon);
        stats[2 * group] = offset;
        stats[2 * group + 1] = rstd;
    };
    block_moments<W, kInner>(w, at, lo, hi, shared_at<GnMomentSums>(shared, layout.entries), block_sums, finish);

    // A cluster: the tile's statistics from every block's sums, in rank
    // order (the cluster_sync also stands for the block's barrier).
    if (w.cluster > 1) {
        cluster_sync();
        const int group = static_cast<int>(threadIdx.x);
        if (group < w.tile_groups) finish(group, cluster_total(block_sums + group, w.cluster));
    }
    __syncthreads();
    // No more reads of other blocks' memory (nothing to publish: relaxed).
    if (w.cluster > 1) cluster_arrive_relaxed();
    // The mean and rstd outputs (block 0): each group's by the thread of
    // row 0 whose column holds its first element, from the shift it holds
    // (its lo group's, or its hi group's where that starts inside the
    // column: groups are at least W channels, so at most one starts
    // there).  In the finishing waves (ncu, 2x320x16x16 half NHWC) the
    // reload of x, the index products and the stores made ~60 instructions
    // of the chain every wave waited for at the barrier.
    if (at.rank == 0 && at.ty == 0 && active) {
        int group = -1;
        float group_shift = shift[0];
        if (!kInner || lanes.lo * static_cast<int>(w.channels) == at.tx * W) {
            if (kInner || at.tx == 0) group = lanes.lo;
        } else if (split < W) {
            group = lanes.lo + 1;
            group_shift = shift[W - 1];
        }
        if (group >= 0) {
            const std::int64_t g = static_cast<std::int64_t>(at.tile) * w.tile_groups + group;
            write_stat(args.mean, at.n, g, static_cast<double>(group_shift) + stats[2 * group]);
            write_stat(args.rstd, at.n, g, stats[2 * group + 1]);
        }
    }

    // Per lane: its group's offset and rstd.
    float offset[W], rstd[W];
    {
        float offset_lo = 0.0f, rstd_lo = 0.0f, offset_hi = 0.0f, rstd_hi = 0.0f;
        if (active) {
            offset_lo = static_cast<float>(stats[2 * lanes.lo]);
            rstd_lo = static_cast<float>(stats[2 * lanes.lo + 1]);
            if (split < W) {
                offset_hi = static_cast<float>(stats[2 * lanes.lo + 2]);
                rstd_hi = static_cast<float>(stats[2 * lanes.lo + 3]);
            }
        }
#pragma unroll
        for (int j = 0; j < W; ++j) {
            offset[j] = j < split ? offset_lo : offset_hi;
            rstd[j] = j < split ? rstd_lo : rstd_hi;
        }
    }
    // y's scale and term (normalize_term): channels fastest, per lane,
    // once; positions fastest, per slot, inside the slot loop (so only for
    // held slots).
    float lane_scale[W], lane_term[W];
    if constexpr (kInner) {
#pragma unroll
        for (int j = 0; j < W; ++j) {
            lane_scale[j] = rstd[j] * weight[j];
            lane_term[j] = normalize_term<T>(bias[j], offset[j], lane_scale[j]);
        }
    }
    const float swish_constant = swish_lane_constant<T>(args.swish_beta);
    // One slot's output from its x: positions fastest, from its channel's
    // weight and bias (channels fastest, the lanes' scale and term).
    auto normalize_pack = [&](const Pack<T, W>& in, float slot_weight, float slot_bias, T* slot_y,
                              auto with_swish) {
        constexpr bool kSwish = decltype(with_swish)::value;
        float slot_scale = 0.0f, slot_term = 0.0f;
        if constexpr (!kInner) {  // one group: rstd[0], offset[0]
            slot_scale = rstd[0] * slot_weight;
            slot_term = normalize_term<T>(slot_bias, offset[0], slot_scale);
        }
        Pack<T, W> out;
#pragma unroll
        for (int j = 0; j < W; ++j) {
            const float s = kInner ? lane_scale[j] : slot_scale;
            const float t = kInner ? lane_term[j] : slot_term;
            out.lane[j] = normalized_lane<T, kSwish>(widen(in.lane[j]) - shift[j], offset[j], s, t, swish_constant, j);
        }
        store_pack(slot_y, out);
    };
    // The streamed slots, read again in batches, the last slot first (what
    // the statistics read last is likeliest still in L2).  Positions
    // fastest, each slot's weight and bias loaded beside its x.
    auto normalize_streamed = [&](auto with_swish) {
        constexpr int B = kGnTileStreamBatch;
        const std::int64_t channel0 = static_cast<std::int64_t>(at.tile) * w.tile_channels() + at.row(w, 0);
        for (int end = at.slots; end > R; end -= B) {
            const int count = end - R < B ? end - R : B;
            Pack<T, W> batch[B];
            float batch_weight[B], batch_bias[B];
            const T* slot_x = x + at.offset(end - 1);
#pragma unroll
            for (int i = 0; i < B; ++i) {
                if (i >= count) MBN_UNROLLED_EXIT;
                batch[i] = load_pack_last<W>(slot_x);
                slot_x -= at.step;
                batch_weight[i] = 1.0f, batch_bias[i] = 0.0f;
                if (!kInner && args.weight != nullptr) {
                    const std::int64_t a = end - 1 - i;
                    batch_weight[i] = static_cast<float>(
                        widen(args.weight[channel0 * args.weight_stride + a * args.weight_slot_step]));
                    batch_bias[i] = static_cast<float>(
                        widen(args.bias[channel0 * args.bias_stride + a * args.bias_slot_step]));
                }
            }
            T* slot_y = y + at.offset(end - 1);
#pragma unroll
            for (int i = 0; i < B; ++i) {
                if (i >= count) MBN_UNROLLED_EXIT;
                normalize_pack(batch[i], batch_weight[i], batch_bias[i], slot_y, with_swish);
                slot_y -= at.step;
            }
        }
    };
    // One copy of the loops with swish and one without: a test of the flag
    // inside predicated swish's 5 instructions an element, issued (and
    // the flag reloaded) on every slot even where swish was off.
    auto normalize_slots = [&](auto with_swish) {
        if constexpr (kStream) normalize_streamed(with_swish);
        T* slot_y = y + at.first;
#pragma unroll
        for (int a = 0; a < R; ++a) {
            if (a >= slots) MBN_UNROLLED_EXIT;
            if constexpr (kInner)
                normalize_pack(raw[a], 0.0f, 0.0f, slot_y, with_swish);
            else
                normalize_pack(raw[a], weight[a], bias[a], slot_y, with_swish);
            slot_y += at.step;
        }
    };
    if (args.swish)
        normalize_slots(std::true_type{});
    else
        normalize_slots(std::false_type{});
    if (w.cluster > 1) cluster_wait();
}

// ---- a tile of one group in one block, positions fastest ----------------
//
// Where a tile is one block and nothing streams (positions fastest,
// cluster 1: Stable Diffusion's NCHW groups of up to some thousands of
// values), the tile kernel's setup, double merges and finishing wave made a
// dependent chain of ~540 instructions a warp, three times a lean
// kernel's (bench/RESULTS.md, forty-fifth session).  This form walks the
// same cut (thread (tx, ty) holds vector tx of rows ty, ty + row_threads,
// ...), indexes from the block number alone, loads each slot's weight and
// bias beside its x, and takes the moments as two float passes over the
// block about the group's first element, one barrier each, the second
// also correcting the first's mean: 1.03x-1.06x over the tile kernel on
// 96 NCHW forward rows (H200, bench/RESULTS.md, forty-sixth session).

// Most waves of a block: the entries of each value block_float_sums adds.
constexpr int kGnBlockMostWaves = kGnTileForwardThreads / kGnTileNarrowestWave;

// The sum of N values (a power of two) as a fixed tree: halves added
// pairwise, level by level.  A template level by level: a loop halving its
// width stayed rolled, its array indexed by moves.
template <int N>
__device__ __forceinline__ float tree_sum(const float (&v)[N]) {
    if constexpr (N == 1) {
        return v[0];
    } else {
        float half[N / 2];
#pragma unroll
        for (int i = 0; i < N / 2; ++i) half[i] = v[i] + v[i + N / 2];
        return tree_sum(half);
    }
}

// The block's float sums of N values; every thread gets the same bits.
// Each wave adds its lanes by shuffles and its lane 0 stores the wave's
// sums in `part` (value i in entries i * kGnBlockMostWaves + wave: a
// pass's own entries, so no barrier follows the reads; those past the
// block's waves hold +0.0, which changes no sum: zero_unused_entries);
// after the barrier each thread adds each value's entries as one fixed
// tree.  No test per entry: loads under predicates took an address
// computation each (~200 instructions a pass, 0.85x-0.9x on blocks of 512
// threads).
template <int N>
__device__ __forceinline__ void block_float_sums(float (&values)[N], float* part) {
    wave_sum(1, MBN_WAVE_SIZE, values);
    if (threadIdx.x % MBN_WAVE_SIZE == 0)
#pragma unroll
        for (int i = 0; i < N; ++i) part[i * kGnBlockMostWaves + threadIdx.x / MBN_WAVE_SIZE] = values[i];
    __syncthreads();
#pragma unroll
    for (int i = 0; i < N; ++i) {
        float v[kGnBlockMostWaves];
#pragma unroll
        for (int e = 0; e < kGnBlockMostWaves; ++e) v[e] = part[i * kGnBlockMostWaves + e];
        values[i] = tree_sum(v);
    }
}

// +0.0 in the `entries` past the block's waves of consecutive
// block_float_sums parts, before the first pass's barrier.
__device__ __forceinline__ void zero_unused_entries(float* parts, int entries, int waves) {
    const int t = static_cast<int>(threadIdx.x);
    if (t >= waves && t < kGnBlockMostWaves)
        for (int i = 0; i < entries; ++i) parts[i * kGnBlockMostWaves + t] = 0.0f;
}

// The block forward's sums: the first pass's one, the second's two.
constexpr int kGnBlockSums = 3;
// The shared memory a block_forward launch needs: their entries.
constexpr int kGnBlockForwardSharedBytes = kGnBlockSums * kGnBlockMostWaves * static_cast<int>(sizeof(float));

// The second pass's centre from the first's offset (its mean less shift,
// the group's first element): 16-bit data take their deviations about
// shift + offset in one subtraction (as thread_moments: that centre's
// rounding is far below their spacing); float32 data keep the exact
// deviations, (x - shift) - offset.
template <typename T>
__device__ __forceinline__ float second_pass_centre(float shift, float first_offset) {
    return sizeof(T) == 2 ? shift + first_offset : first_offset;
}
template <typename T>
__device__ __forceinline__ float second_pass_deviation(float x, float shift, float centre) {
    return sizeof(T) == 2 ? x - centre : (x - shift) - centre;
}

// A group's offset (its mean less shift) and rstd from the second pass's
// block sums of the deviations and of their squares: the first corrects
// the first pass's offset.  Thread 0 writes the mean and rstd outputs.
struct GnBlockMoments {
    float offset, rstd;
};
template <typename T, typename P>
__device__ __forceinline__ GnBlockMoments finish_two_passes(const GnTileForwardArgs<P>& args, int n, int group,
                                                            const float (&second)[2], float shift, float centre,
                                                            float inv_count) {
    const float correction = second[0] * inv_count;
    const float variance = fmaxf(second[1] * inv_count - correction * correction, 0.0f);
    const float offset = (sizeof(T) == 2 ? centre - shift : centre) + correction;
    // rsqrtf is within 2 ulp of 1 / sqrt: far inside float32's tolerance.
    const float rstd = rsqrtf(variance + static_cast<float>(args.epsilon));
    if (threadIdx.x == 0) {
        write_stat(args.mean, n, group, static_cast<double>(shift) + static_cast<double>(offset));
        write_stat(args.rstd, n, group, static_cast<double>(rstd));
    }
    return GnBlockMoments{offset, rstd};
}

// Launched as the tile kernel with walk.cluster 1, !channels_inner and
// nothing streamed, and at least kGnBlockForwardSharedBytes of shared
// memory.  x may be y: every thread reads the group's first element before
// the first barrier, and thread 0 writes it (slot 0) after the last.
template <typename T, typename P>
__global__ void __launch_bounds__(kGnTileForwardThreads, 1)
    gn_block_forward(const T* x, T* y, GnTileForwardArgs<P> args) {
    constexpr int W = static_cast<int>(16 / sizeof(T));
    constexpr int R = kGnTileForwardSlots;
    extern __shared__ double gn_tile_forward_shared[];
    float* parts = reinterpret_cast<float*>(gn_tile_forward_shared);
    const GnTileWalk& w = args.walk;
    const int block = static_cast<int>(blockIdx.x);
    const int n = w.by_tiles_per_sample.divide(block);
    const int group = block - n * static_cast<int>(w.tiles_per_sample);
    const int thread = static_cast<int>(threadIdx.x);
    const int ty = w.by_columns.divide(thread);
    const int tx = thread - ty * w.columns;
    const int rows = static_cast<int>(w.rows);
    const int slots = tx < w.vectors && ty < rows ? w.by_row_threads.divide(rows - ty + w.row_threads - 1) : 0;
    const std::int64_t base = w.tile_base(n, group);
    const std::int64_t first = base + ty * w.row_stride + tx * W;
    const std::int64_t step = w.row_threads * w.row_stride;

    Pack<T, W> raw[R];
    {
        const T* slot_x = x + first;
#pragma unroll
        for (int a = 0; a < R; ++a) {
            if (a >= slots) MBN_UNROLLED_EXIT;
            raw[a] = load_pack<W>(slot_x);
            slot_x += step;
        }
    }
    const float shift = widen(x[base]);
    // Slot a's row is channel ty + a row_threads of the group.
    float weight[R], bias[R];
    if (args.weight == nullptr) {  // not affine: no bias either
#pragma unroll
        for (int a = 0; a < R; ++a) weight[a] = 1.0f, bias[a] = 0.0f;
    } else {
        const std::int64_t channel = static_cast<std::int64_t>(group) * w.channels + ty;
        const P* slot_weight = args.weight + channel * args.weight_stride;
        const P* slot_bias = args.bias + channel * args.bias_stride;
#pragma unroll
        for (int a = 0; a < R; ++a) {
            if (a >= slots) MBN_UNROLLED_EXIT;
            weight[a] = static_cast<float>(widen(*slot_weight));
            bias[a] = static_cast<float>(widen(*slot_bias));
            slot_weight += args.weight_slot_step;
            slot_bias += args.bias_slot_step;
        }
    }

    // The mean's offset from shift, then the spread about it and the
    // offset's correction (the sum of the deviations, which makes good the
    // first pass's rounding: with a first element far from the rest that
    // sum's float rounding, relative to the offset, moved the mean by more
    // than float32's tolerance allows): each slot's lanes added as a tree,
    // then the slots in order, then the block.  One running value per sum
    // across the slots: the loops leave at the first slot not held, and
    // per-lane sums carried to that exit took a move per lane and exit
    // (~200 a warp).
    zero_unused_entries(parts, kGnBlockSums, w.threads / MBN_WAVE_SIZE);
    const float inv_count = static_cast<float>(w.inv_group_size);
    float first_pass[1] = {-0.0f};
#pragma unroll
    for (int a = 0; a < R; ++a) {
        if (a >= slots) MBN_UNROLLED_EXIT;
        float lane[W];
#pragma unroll
        for (int j = 0; j < W; ++j) lane[j] = widen(raw[a].lane[j]) - shift;
        first_pass[0] += tree_sum(lane);
    }
    block_float_sums(first_pass, parts);
    const float centre = second_pass_centre<T>(shift, first_pass[0] * inv_count);
    float second_pass[2] = {-0.0f, -0.0f};  // sums of e and e^2
#pragma unroll
    for (int a = 0; a < R; ++a) {
        if (a >= slots) MBN_UNROLLED_EXIT;
        float lane[W], lane_square[W];
#pragma unroll
        for (int j = 0; j < W; ++j) {
            lane[j] = second_pass_deviation<T>(widen(raw[a].lane[j]), shift, centre);
            lane_square[j] = lane[j] * lane[j];
        }
        second_pass[0] += tree_sum(lane);
        second_pass[1] += tree_sum(lane_square);
    }
    block_float_sums(second_pass, parts + kGnBlockMostWaves);
    const GnBlockMoments moments = finish_two_passes<T>(args, n, group, second_pass, shift, centre, inv_count);
    const float offset = moments.offset, rstd = moments.rstd;

    const float swish_constant = swish_lane_constant<T>(args.swish_beta);
    auto normalize_slots = [&](auto with_swish) {
        constexpr bool kSwish = decltype(with_swish)::value;
        T* slot_y = y + first;
#pragma unroll
        for (int a = 0; a < R; ++a) {
            if (a >= slots) MBN_UNROLLED_EXIT;
            const float scale = rstd * weight[a];
            const float term = normalize_term<T>(bias[a], offset, scale);
            Pack<T, W> out;
#pragma unroll
            for (int j = 0; j < W; ++j)
                out.lane[j] = normalized_lane<T, kSwish>(widen(raw[a].lane[j]) - shift, offset, scale, term,
                                                         swish_constant, j);
            store_pack(slot_y, out);
            slot_y += step;
        }
    };
    if (args.swish)
        normalize_slots(std::true_type{});
    else
        normalize_slots(std::false_type{});
}

// ---- a group in one block, channels fastest ----------------------------
//
// Where a channels-fastest tile would be one block (Stable Diffusion's NHWC
// rows of its 8x8 and 16x16 planes), each group takes a block of its own
// (GnTileWalk::group_blocks) instead: the block holds the vectors its
// group's channels touch, columns tx of rows ty, ty + row_threads, ...,
// and sums only its group's lanes, so its moments are gn_block_forward's
// (two float passes over the block, one sum a thread and pass), where the
// tile kernel's threads each split their lanes between two groups and
// merge them in double by column and group (802-871 instructions a warp,
// ncu on 2x320x8x8 and 2x320x16x16 half).  The lanes of a neighbouring
// group in a vector it shares are read but neither summed nor written:
// that group's block writes them.

// The sum of the lanes of `lane` that `in` marks, as a fixed tree.
template <int W>
__device__ __forceinline__ float masked_sum(const float (&lane)[W], const bool (&in)[W]) {
    float kept[W];
#pragma unroll
    for (int j = 0; j < W; ++j) kept[j] = in[j] ? lane[j] : 0.0f;
    return tree_sum(kept);
}

// Launched with a group_blocks walk (plan_gn_tiles: tile_groups 1, so
// block n G + g is sample n's group g, tile_base its first element) and at
// least kGnBlockForwardSharedBytes of shared memory.  x may be y: every
// thread reads the group's first element before the first barrier and the
// block writes it (and only its group's elements) after the last.
template <typename T, typename P>
__global__ void __launch_bounds__(kGnTileForwardThreads, 1)
    gn_block_forward_group(const T* x, T* y, GnTileForwardArgs<P> args) {
    constexpr int W = static_cast<int>(16 / sizeof(T));
    constexpr int R = kGnTileForwardSlots;
    extern __shared__ double gn_tile_forward_shared[];
    float* parts = reinterpret_cast<float*>(gn_tile_forward_shared);
    const GnTileWalk& w = args.walk;
    const int block = static_cast<int>(blockIdx.x);
    const int n = w.by_tiles_per_sample.divide(block);
    const int group = block - n * static_cast<int>(w.tiles_per_sample);
    const int thread = static_cast<int>(threadIdx.x);
    const int ty = w.by_columns.divide(thread);
    const int tx = thread - ty * w.columns;
    const int channels = static_cast<int>(w.channels);
    const int first_channel = group * channels;
    // This column's first channel; it touches the group where below its end
    // (threads past the block's rows of threads hold nothing).
    const int column_channel = (first_channel / W + tx) * W;
    const bool touches = ty < w.row_threads && tx < w.vectors && column_channel < first_channel + channels;
    const int rows = static_cast<int>(w.rows);
    const int slots = touches && ty < rows ? w.by_row_threads.divide(rows - ty + w.row_threads - 1) : 0;
    const std::int64_t sample = static_cast<std::int64_t>(n) * w.sample_stride;
    const std::int64_t first = sample + ty * w.row_stride + column_channel;
    const std::int64_t step = w.row_threads * w.row_stride;

    Pack<T, W> raw[R];
    {
        const T* slot_x = x + first;
#pragma unroll
        for (int a = 0; a < R; ++a) {
            if (a >= slots) MBN_UNROLLED_EXIT;
            raw[a] = load_pack<W>(slot_x);
            slot_x += step;
        }
    }
    const float shift = widen(x[sample + first_channel]);
    bool in[W];  // lane j is a channel of the group
    const bool whole = group_lanes(touches, column_channel, first_channel, channels, in);  // every lane is
    // Lane j's channel's weight and bias, fetched beside x.
    float weight[W], bias[W];
    if (args.params_packed && touches) {
        load_channel_params<W>(args.weight + column_channel, weight);
        load_channel_params<W>(args.bias + column_channel, bias);
    } else {
#pragma unroll
        for (int j = 0; j < W; ++j) {
            weight[j] = in[j] ? channel_param(args.weight, args.weight_stride, column_channel + j, 1.0f) : 1.0f;
            bias[j] = in[j] ? channel_param(args.bias, args.bias_stride, column_channel + j, 0.0f) : 0.0f;
        }
    }

    // The two passes of gn_block_forward, each lane's values summed across
    // the slots and the group's lanes kept once, at the end.
    zero_unused_entries(parts, kGnBlockSums, w.threads / MBN_WAVE_SIZE);
    const float inv_count = static_cast<float>(w.inv_group_size);
    float lane_sum[W];
#pragma unroll
    for (int j = 0; j < W; ++j) lane_sum[j] = -0.0f;
#pragma unroll
    for (int a = 0; a < R; ++a) {
        if (a >= slots) MBN_UNROLLED_EXIT;
#pragma unroll
        for (int j = 0; j < W; ++j) lane_sum[j] += widen(raw[a].lane[j]) - shift;
    }
    float first_pass[1] = {masked_sum(lane_sum, in)};
    block_float_sums(first_pass, parts);
    const float centre = second_pass_centre<T>(shift, first_pass[0] * inv_count);
    float lane_e[W], lane_square[W];
#pragma unroll
    for (int j = 0; j < W; ++j) lane_e[j] = -0.0f, lane_square[j] = -0.0f;
#pragma unroll
    for (int a = 0; a < R; ++a) {
        if (a >= slots) MBN_UNROLLED_EXIT;
#pragma unroll
        for (int j = 0; j < W; ++j) {
            const float e = second_pass_deviation<T>(widen(raw[a].lane[j]), shift, centre);
            lane_e[j] += e;
            lane_square[j] += e * e;
        }
    }
    float second_pass[2] = {masked_sum(lane_e, in), masked_sum(lane_square, in)};
    block_float_sums(second_pass, parts + kGnBlockMostWaves);
    const GnBlockMoments moments = finish_two_passes<T>(args, n, group, second_pass, shift, centre, inv_count);
    const float offset = moments.offset, rstd = moments.rstd;

    float scale[W], term[W];
#pragma unroll
    for (int j = 0; j < W; ++j) {
        scale[j] = rstd * weight[j];
        term[j] = normalize_term<T>(bias[j], offset, scale[j]);
    }
    const float swish_constant = swish_lane_constant<T>(args.swish_beta);
    // 16-bit lanes stored in pairs where the group's channels are even
    // (store_group_lanes).
    const bool pairs = sizeof(T) == 2 && channels % 2 == 0;
    auto normalize_slots = [&](auto with_swish) {
        constexpr bool kSwish = decltype(with_swish)::value;
        T* slot_y = y + first;
#pragma unroll
        for (int a = 0; a < R; ++a) {
            if (a >= slots) MBN_UNROLLED_EXIT;
            Pack<T, W> out;
#pragma unroll
            for (int j = 0; j < W; ++j)
                out.lane[j] = normalized_lane<T, kSwish>(widen(raw[a].lane[j]) - shift, offset, scale[j], term[j],
                                                         swish_constant, j);
            store_group_lanes(slot_y, out, in, whole, pairs);
            slot_y += step;
        }
    };
    if (args.swish)
        normalize_slots(std::true_type{});
    else
        normalize_slots(std::false_type{});
}

template <typename P>
GnTileForwardArgs<P> forward_args(const GnForward& p, const GnTileWalk& walk) {
    GnTileForwardArgs<P> args{};
    args.walk = walk;
    if (p.affine) {
        args.weight = static_cast<const P*>(p.weight.data);
        args.bias = static_cast<const P*>(p.bias.data);
        args.weight_stride = p.weight.stride[kC];
        args.bias_stride = p.bias.stride[kC];
    }
    args.mean = stat_tensor(p.mean);
    args.rstd = stat_tensor(p.rstd);
    args.epsilon = p.epsilon;
    args.swish = p.activation == Activation::swish;
    auto aligned = [](const void* q) { return reinterpret_cast<std::uintptr_t>(q) % 16 == 0; };
    args.params_packed = p.affine && args.weight_stride == 1 && args.bias_stride == 1 && aligned(args.weight) &&
                         aligned(args.bias);
    args.swish_beta = p.swish_beta;
    args.layout = tile_shared(walk, false);
    args.weight_slot_step = walk.row_threads * args.weight_stride;
    args.bias_slot_step = walk.row_threads * args.bias_stride;
    return args;
}

template <typename T, typename P, bool kInner, bool kStream>
void launch_forward(const GnForward& p, const GnTileWalk& walk, const LaunchTarget& target) {
    launch_tile_kernel(gn_tile_forward<T, P, kInner, kStream>, walk, target.stream, "gn_tile_forward",
                       static_cast<const T*>(p.x.data), static_cast<T*>(p.y.data), forward_args<P>(p, walk));
}

// One of the block forms (gn_block_forward, gn_block_forward_group), with
// shared memory for their block_float_sums entries.
template <typename T, typename P>
void launch_block_form(void (*kernel)(const T*, T*, GnTileForwardArgs<P>), const char* name, const GnForward& p,
                       const GnTileWalk& walk, const LaunchTarget& target) {
    GnTileWalk block_walk = walk;
    block_walk.shared_bytes = std::max(walk.shared_bytes, kGnBlockForwardSharedBytes);
    launch_tile_kernel(kernel, block_walk, target.stream, name, static_cast<const T*>(p.x.data),
                       static_cast<T*>(p.y.data), forward_args<P>(p, walk));
}

}  // namespace

void run_gn_tile_forward(const GnForward& p, const GnTileWalk& walk, const LaunchTarget& target) {
    with_element_type(p.x.dtype, [&](auto x_tag) {
        using T = typename decltype(x_tag)::type;
        if constexpr (std::is_same<T, double>::value) {
            fail(miopenStatusInternalError, "GPU backend: no on-chip group-norm kernel for float64");
        } else {
            const DType param_dtype = p.affine ? p.weight.dtype : DType::f32;
            with_parameter_type<T>(param_dtype, [&](auto p_tag) {
                using P = typename decltype(p_tag)::type;
                const bool stream = walk.streamed > 0;
                if (walk.group_blocks)
                    launch_block_form<T, P>(gn_block_forward_group<T, P>, "gn_block_forward_group", p, walk, target);
                else if (walk.channels_inner && stream)
                    launch_forward<T, P, true, true>(p, walk, target);
                else if (walk.channels_inner)
                    launch_forward<T, P, true, false>(p, walk, target);
                else if (stream)
                    launch_forward<T, P, false, true>(p, walk, target);
                else if (walk.cluster == 1)
                    launch_block_form<T, P>(gn_block_forward<T, P>, "gn_block_forward", p, walk, target);
                else
                    launch_forward<T, P, false, false>(p, walk, target);
            });
        }
    });
}

void measure_gn_tile_clusters(int device, DeviceShape& shape) {
    shape.cluster_blocks = 1;
    for (int& slots : shape.cluster_slots) slots = 0;
    for (auto& form : shape.backward_cluster_slots)
        for (int& slots : form) slots = 0;
#if MBN_GPU_CUDA
    int supported = 0;
    if (cudaDeviceGetAttribute(&supported, cudaDevAttrClusterLaunch, device) != cudaSuccess) {
        (void)cudaGetLastError();
        return;
    }
    if (supported == 0) return;
    // The kernels use clusters only when built for sm_90 or later: the code
    // this device runs must come from such a build.
    cudaFuncAttributes attributes{};
    if (cudaFuncGetAttributes(&attributes, gn_tile_forward<float, float, true, false>) != cudaSuccess) {
        (void)cudaGetLastError();
        return;
    }
    if (attributes.ptxVersion < 90) return;
    // Every forward instance takes a whole multiprocessor's registers, every
    // backward instance of the form of b blocks 1 / b of them: one of each
    // kernel and form stands for all.
    static_assert(kGnTileMaxCluster <= kPortableClusterBlocks, "cluster_slots has no room for the largest cluster");
    static_assert(kGnTileBackwardMostBlocks * sizeof(shape.backward_cluster_slots[0]) <=
                      sizeof(shape.backward_cluster_slots),
                  "backward_cluster_slots has no room for every backward form");
    for (int blocks = 2; blocks <= kGnTileMaxCluster; ++blocks) {
        int fewest = resident_clusters(gn_tile_forward<__half, float, true, false>, kGnTileForwardThreads, blocks);
        shape.cluster_slots[blocks] = std::max(fewest, 0);
        for (int form = 1; form <= kGnTileBackwardMostBlocks; ++form) {
            const int backward = gn_tile_backward_resident_clusters(blocks, form);
            shape.backward_cluster_slots[form - 1][blocks] = std::max(backward, 0);
            fewest = std::min(fewest, backward);
        }
        if (fewest > 0 && (blocks & (blocks - 1)) == 0) shape.cluster_blocks = blocks;
    }
#else
    (void)device;
#endif
}

}  // namespace gpu
}  // namespace mbn
