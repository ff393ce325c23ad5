// The kernel of gn_persistent (gn_persistent.hpp): one launch, one block a
// multiprocessor, x held on chip (registers, then shared memory, the rest
// re-read from L2) between the group sums and the output.  A header so
// that the emulator check (tests/gpu/emulation/gn_persistent_check.cpp)
// runs the same kernel; included by gn_forward_persistent.hip alone
// besides it, hence the unnamed namespace.
#pragma once

#include "common/numerics.hpp"
#include "gpu/block_reduce.h"
#include "gpu/gn_activation.h"
#include "gpu/gn_packed_normalize.h"
#include "gpu/gn_persistent.hpp"
#include "gpu/gn_persistent_share.h"
#include "gpu/gn_stat_io.h"
#include "gpu/grid_barrier.h"
#include "gpu/norm_math.h"

#include <cstdint>
#include <type_traits>

namespace mbn {
namespace gpu {
namespace {

template <typename P>
struct GnPersistentArgs {
    GnPersistentWalk walk;
    const P* weight;  // nullptr: weight 1 and bias 0
    const P* bias;
    std::int64_t weight_stride;
    std::int64_t bias_stride;
    GnStatTensor mean;  // written where present
    GnStatTensor rstd;
    double epsilon;
    float swish_beta;
    double* sums;         // the blocks' sums of d and d^2 (persistent_sums_at)
    GnGroupStats* stats;  // channels inner: each group's, [n * G + g]
    BarrierCounter* barrier;
};

// Where block b's sums of its group `local` lie in the scratch: channels
// inner group-major within the sample ([(n * G + g) * sample_blocks + i],
// so that one warp reads a group's blocks in consecutive lines), else
// [block * 2 + local]; two doubles each.
__device__ __forceinline__ std::int64_t persistent_sums_at(const GnPersistentWalk& w, int block, int local) {
    if (w.channels_inner) {
        const int sample = block / w.sample_blocks;
        return ((static_cast<std::int64_t>(sample) * w.groups + local) * w.sample_blocks +
                (block - sample * w.sample_blocks)) * 2;
    }
    return (static_cast<std::int64_t>(block) * w.block_groups + local) * 2;
}

// A thread's running sums of d = x - shift.  Channels inner, one pair per
// lane (its channel is fixed; lanes below `split` are of the thread's first
// group, the rest of the next); positions inner, one pair per group the
// block touches, a vector feeding the second where it lies at or past the
// second's first vector.
template <int L>
struct ThreadSums {
    float sum[L] = {};
    float squares[L] = {};
};

template <typename T, int W>
__device__ __forceinline__ void add_lanes(ThreadSums<W>& s, const Pack<T, W>& raw, const float (&shift)[W]) {
    float value[W];
    widen_pack<float, W, 1>(raw, value);
#pragma unroll
    for (int e = 0; e < W; ++e) {
        const float d = value[e] - shift[e];
        s.sum[e] += d;
        s.squares[e] += d * d;
    }
}

template <typename T, int W>
__device__ __forceinline__ void add_vector(ThreadSums<2>& s, const Pack<T, W>& raw, float shift_lo, float shift_hi,
                                           bool high) {
    float value[W];
    widen_pack<float, W, 1>(raw, value);
    const float shift = high ? shift_hi : shift_lo;
    float sum = 0.0f, squares = 0.0f;
#pragma unroll
    for (int e = 0; e < W; ++e) {
        const float d = value[e] - shift;
        sum += d;
        squares += d * d;
    }
    s.sum[0] += high ? 0.0f : sum;
    s.squares[0] += high ? 0.0f : squares;
    s.sum[1] += high ? sum : 0.0f;
    s.squares[1] += high ? squares : 0.0f;
}

// A channel's factors (SliceFactors, gn_packed_normalize.h) from its
// group's statistics and its weight and bias.
template <bool kFold>
__device__ __forceinline__ SliceFactors<float, kFold> channel_factors(const GnGroupStats& g, double weight,
                                                                      double bias) {
    const double scale = g.rstd * weight;
    SliceFactors<float, kFold> f;
    f.shift = static_cast<float>(g.shift);
    f.scale = static_cast<float>(scale);
    f.mean_offset = kFold ? 0.0f : static_cast<float>(g.mean_offset);
    f.bias = static_cast<float>(kFold ? bias - g.mean_offset * scale : bias);
    return f;
}

// Launched with walk.threads threads (whole waves), walk.blocks blocks, all
// resident, walk.shared_bytes of dynamic shared memory.  x may be y: every
// block reads its share and its groups' first elements before the grid's
// barrier, and a thread's streamed slots are read again by that thread
// just before it writes them.
template <typename T, typename P, bool kInner, bool kSwish>
__global__ void __launch_bounds__(kGnPersistentThreads, 1)
    gn_persistent_forward(const T* x, T* y, GnPersistentArgs<P> a) {
    constexpr int W = static_cast<int>(16 / sizeof(T));
    constexpr int R = gn_persistent_forward_register_slots(kInner);
    constexpr int B = kGnPersistentForwardBatch;
    constexpr int J = kGnPersistentThreadGroups;
    constexpr bool kFold = sizeof(T) == 2;
    extern __shared__ float4 gn_persistent_shared[];
    const GnPersistentWalk& w = a.walk;
    const int threads = static_cast<int>(blockDim.x);
    const int t = static_cast<int>(threadIdx.x);
    const int block = static_cast<int>(blockIdx.x);
    const GnPersistentShare share = persistent_share(w, block);
    // Dynamic shared memory: the threads' sums [(j * 2 + q) * threads + t],
    // the statistics of the groups the block touches, the weight and bias
    // of its channels (channels inner channel c at c, positions inner slice
    // s at s - first_slice), the held vectors [(k - R) * threads + t].
    float* thread_sums = reinterpret_cast<float*>(gn_persistent_shared);
    GnGroupStats* stats = reinterpret_cast<GnGroupStats*>(reinterpret_cast<char*>(gn_persistent_shared) +
                                                          gn_persistent_sums_bytes(threads));
    float2* params =
        reinterpret_cast<float2*>(reinterpret_cast<char*>(stats) + gn_persistent_stats_bytes(w.block_groups));
    Pack<T, W>* held =
        reinterpret_cast<Pack<T, W>*>(reinterpret_cast<char*>(params) + gn_persistent_params_bytes(w.block_channels));
    const int first = share.begin + t;  // slot k: first + k * threads, used below share.end
    auto used = [&](int k) { return first + k * threads < share.end; };
    auto at = [&](int k) { return static_cast<std::int64_t>(first + k * threads) * W; };

    Pack<T, W> raw[R];
#pragma unroll
    for (int k = 0; k < R; ++k)
        if (used(k)) raw[k] = load_pack<W>(x + at(k));

    // The groups' shifts (their first elements), read before the barrier
    // (x may be y): the block's groups' into the statistics table, the
    // thread's two into registers.  Channels inner a sample's groups start
    // at its position 0, channel g * C / G; lane e of the thread's column
    // feeds group lo (e < split) or lo + 1.
    const int groups_here =
        kInner ? w.groups : (share.end > share.begin ? w.by_group.divide(share.end - 1) - share.first + 1 : 0);
    const std::int64_t sample_base = kInner ? static_cast<std::int64_t>(share.first) * w.sample_vectors * W : 0;
    auto group_start = [&](int local) {
        return kInner ? sample_base + static_cast<std::int64_t>(local) * w.group_channels
                      : static_cast<std::int64_t>(share.first + local) * w.group_vectors * W;
    };
    for (int local = t; local < groups_here; local += threads)
        stats[local].shift = statistics_shift(widen(x[group_start(local)]));
    const int column = kInner ? (first - share.begin) % w.row_vectors : 0;
    const int lo = kInner ? column * W / w.group_channels : 0;
    const int split = kInner ? min(W, (lo + 1) * w.group_channels - column * W) : 0;
    float shift_lo = 0.0f, shift_hi = 0.0f;
    if (share.end > share.begin) {
        const int last = kInner ? w.groups - 1 : groups_here - 1;
        shift_lo = widen(x[group_start(lo)]);
        shift_hi = widen(x[group_start(min(lo + 1, last))]);
    }
    const int first_slice = kInner ? 0 : w.by_plane.divide(share.begin);
    for (int i = t; i < w.block_channels; i += threads) {
        if (!kInner && first_slice + i >= w.slices) break;
        const int c = kInner ? i : (first_slice + i) % w.channels;
        params[i] = make_float2(a.weight != nullptr ? widen(a.weight[c * a.weight_stride]) : 1.0f,
                                a.bias != nullptr ? widen(a.bias[c * a.bias_stride]) : 0.0f);
    }
    // Positions inner, the vectors of the block's second group start here.
    const int second = (share.first + 1) * w.group_vectors;
    float lane_shift[W];
#pragma unroll
    for (int e = 0; e < W; ++e) lane_shift[e] = e < split ? shift_lo : shift_hi;
    ThreadSums<kInner ? W : J> sums;
    auto add = [&](int k, const Pack<T, W>& v) {
        if constexpr (kInner)
            add_lanes<T, W>(sums, v, lane_shift);
        else
            add_vector<T, W>(sums, v, shift_lo, shift_hi, first + k * threads >= second);
    };
#pragma unroll
    for (int k = 0; k < R; ++k)
        if (used(k)) add(k, raw[k]);
    // Shared slots, then streamed ones, a batch of loads in flight at a time.
    const int on_chip = min(w.slots, R + w.shared_slots);
    for (int k0 = R; k0 < w.slots; k0 += B) {
        Pack<T, W> batch[B];
#pragma unroll
        for (int b = 0; b < B; ++b)
            if (k0 + b < w.slots && used(k0 + b)) batch[b] = load_pack<W>(x + at(k0 + b));
#pragma unroll
        for (int b = 0; b < B; ++b) {
            const int k = k0 + b;
            if (k >= w.slots || !used(k)) continue;
            if (k < on_chip) held[(k - R) * threads + t] = batch[b];
            add(k, batch[b]);
        }
    }

    // The block's sums per group: the threads' through shared memory, one
    // warp a group adding its contributors in a fixed order, in double.
    float pair[J][2];
    if constexpr (kInner) {
        // Lanes to the thread's two groups.
        pair[0][0] = pair[0][1] = pair[1][0] = pair[1][1] = 0.0f;
#pragma unroll
        for (int e = 0; e < W; ++e) {
            const bool low = e < split;
            pair[0][0] += low ? sums.sum[e] : 0.0f;
            pair[0][1] += low ? sums.squares[e] : 0.0f;
            pair[1][0] += low ? 0.0f : sums.sum[e];
            pair[1][1] += low ? 0.0f : sums.squares[e];
        }
    } else {
#pragma unroll
        for (int j = 0; j < J; ++j) {
            pair[j][0] = sums.sum[j];
            pair[j][1] = sums.squares[j];
        }
    }
#pragma unroll
    for (int j = 0; j < J; ++j) {
        thread_sums[(j * 2) * threads + t] = pair[j][0];
        thread_sums[(j * 2 + 1) * threads + t] = pair[j][1];
    }
    __syncthreads();
    const int warps = threads / MBN_WAVE_SIZE;
    const int warp = t / MBN_WAVE_SIZE;
    const int lane = t % MBN_WAVE_SIZE;
    for (int local = warp; local < groups_here; local += warps) {
        double total[2] = {0.0, 0.0};
        if constexpr (kInner) {
            // Group g's channels lie in columns c0 .. c1, in column c as the
            // thread group g - (c * W) / (C / G) of each row of threads.
            const int c0 = local * w.group_channels / W;
            const int columns = ((local + 1) * w.group_channels - 1) / W - c0 + 1;
            const int rows = threads / w.row_vectors;
            for (int i = lane; i < columns * rows; i += MBN_WAVE_SIZE) {
                const int c = c0 + i % columns;
                const int j = local - c * W / w.group_channels;
                const int from = (i / columns) * w.row_vectors + c;
                total[0] += static_cast<double>(thread_sums[(j * 2) * threads + from]);
                total[1] += static_cast<double>(thread_sums[(j * 2 + 1) * threads + from]);
            }
        } else {
            for (int i = lane; i < threads; i += MBN_WAVE_SIZE) {
                total[0] += static_cast<double>(thread_sums[(local * 2) * threads + i]);
                total[1] += static_cast<double>(thread_sums[(local * 2 + 1) * threads + i]);
            }
        }
        warp_totals(total);
        if (lane == 0) store_pair(a.sums + persistent_sums_at(w, block, local), total);
    }
    grid_barrier(a.barrier, 1);

    // Each group's statistics from the sums of the blocks that touch it, one
    // warp a group adding them in block order.  Positions inner, every block
    // merges its own (at most two, of a few blocks each); channels inner,
    // where every block of a sample needs all G groups of sums from all its
    // blocks, each group is merged once, by one block of the sample, and
    // handed to the others through the scratch and a second barrier.
    auto merge = [&](int local, int flat, int from, int to) {
        double total[2] = {0.0, 0.0};
#pragma unroll 4
        for (int b = from + lane; b < to; b += MBN_WAVE_SIZE) {
            const int j = kInner ? local : flat - w.by_group.divide(b * w.block_vectors);
            const double* theirs = a.sums + persistent_sums_at(w, b, j);
            total[0] += load_after_barrier(theirs);
            total[1] += load_after_barrier(theirs + 1);
        }
        warp_totals(total);
        const ShiftedStatistics st = finish_shifted(total[0], total[1], w.inv_group_size, a.epsilon);
        return GnGroupStats{stats[local].shift, st.offset, st.inv_std};
    };
    auto publish = [&](int flat, const GnGroupStats& g) {
        const int n = flat / w.groups;
        write_stat(a.mean, n, flat - n * w.groups, g.shift + g.mean_offset);
        write_stat(a.rstd, n, flat - n * w.groups, g.rstd);
    };
    if constexpr (kInner) {
        const int from = share.first * w.sample_blocks;
        const int mine = block - from;
        for (int local = mine + warp * w.sample_blocks; local < w.groups; local += warps * w.sample_blocks) {
            const GnGroupStats g = merge(local, share.first * w.groups + local, from, from + w.sample_blocks);
            if (lane == 0) {
                a.stats[share.first * w.groups + local] = g;
                publish(share.first * w.groups + local, g);
            }
        }
        grid_barrier(a.barrier, 2);
        for (int local = t; local < w.groups; local += threads) {
            const GnGroupStats* theirs = a.stats + share.first * w.groups + local;
            stats[local].mean_offset = load_after_barrier(&theirs->mean_offset);
            stats[local].rstd = load_after_barrier(&theirs->rstd);
        }
    } else {
        for (int local = warp; local < groups_here; local += warps) {
            const int flat = share.first + local;
            // The group's vectors lie below x's, which count in int (the
            // planner): a divisor's multiply, no 64-bit division after the
            // barrier.
            const int from = w.by_share.divide(flat * w.group_vectors);
            const int to = min(w.blocks, w.by_share.divide((flat + 1) * w.group_vectors - 1) + 1);
            const GnGroupStats g = merge(local, flat, from, to);
            if (lane == 0) {
                stats[local] = g;
                if (block == from) publish(flat, g);  // the group's first block
            }
        }
    }
    __syncthreads();

    // The output: the streamed slots first (read again, newest first, from
    // L2, before y's own lines displace them), then the registers and the
    // shared slots: 1.01x-1.05x over registers first where slots stream
    // (H200, bench/RESULTS.md, thirty-sixth session), as in the backward.
    const float beta = a.swish_beta;
    SliceFactors<float, kFold> f[kInner ? W : 1];
    int held_slice = -1;  // positions inner: the slice whose factors f holds
    if constexpr (kInner) {
#pragma unroll
        for (int e = 0; e < W; ++e) {
            const int c = column * W + e;
            f[e] = channel_factors<kFold>(stats[c / w.group_channels], params[c].x, params[c].y);
        }
    }
    auto write = [&](int k, const Pack<T, W>& in) {
        if constexpr (!kInner) {
            const int slice = w.by_plane.divide(first + k * threads);
            if (slice != held_slice) {
                held_slice = slice;
                const float2 wb = params[slice - first_slice];
                f[0] = channel_factors<kFold>(stats[w.by_group.divide(first + k * threads) - share.first], wb.x, wb.y);
            }
        }
        store_pack(y + at(k), normalize_vector<T, float, W, kInner ? W : 1, kFold, kSwish, 2>(in, f, beta));
    };
    for (int k0 = w.slots - 1; k0 >= on_chip; k0 -= B) {
        Pack<T, W> batch[B];
#pragma unroll
        for (int b = 0; b < B; ++b)
            if (k0 - b >= on_chip && used(k0 - b)) batch[b] = load_pack_last<W>(x + at(k0 - b));
#pragma unroll
        for (int b = 0; b < B; ++b)
            if (k0 - b >= on_chip && used(k0 - b)) write(k0 - b, batch[b]);
    }
#pragma unroll
    for (int k = R - 1; k >= 0; --k)
        if (used(k)) write(k, raw[k]);
    for (int k = on_chip - 1; k >= R; --k)
        if (used(k)) write(k, load_shared_pack(held + (k - R) * threads + t));
    grid_barrier_exit(a.barrier, kInner ? 2 : 1);
}

}  // namespace
}  // namespace gpu
}  // namespace mbn
