// The backward kernel of gn_persistent (gn_persistent.hpp): one launch, one
// block a multiprocessor, x and dy held on chip (registers, then shared
// memory, the rest re-read from L2) between the sums of g and g * xhat and
// dx.  The arithmetic is the slices backward's (gn_backward.hip): with
// xhat = (x - mean) * rstd and g = dy * act'(xhat w + b),
//   dx = rstd (w g - mean(w g) - xhat mean(w g xhat)),
//   dbias[c] = sum of g, dweight[c] = sum of g xhat over samples and positions.
// A header so that the emulator check
// (tests/gpu/emulation/gn_persistent_backward_check.cpp) runs the same
// kernel; included by gn_backward_persistent.hip alone besides it, hence the
// unnamed namespace.
#pragma once

#include "gpu/block_reduce.h"
#include "gpu/gn_activation.h"
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
struct GnPersistentBackwardArgs {
    GnPersistentWalk walk;
    const P* weight;  // nullptr: weight 1, and no dweight / dbias
    const P* bias;    // the activation's; nullptr: bias 0
    std::int64_t weight_stride;
    std::int64_t bias_stride;
    P* dweight;  // with dbias: nullptr when not wanted
    P* dbias;
    std::int64_t dweight_stride;
    std::int64_t dbias_stride;
    GnStatTensor mean;
    GnStatTensor rstd;
    float swish_beta;
    double* sums;   // the blocks' sums of g and g xhat (gn_persistent_backward_sums_scratch_bytes)
    double* totals;  // channels inner: each channel's sums over a sample, [n * C + c] pairs
    BarrierCounter* barrier;
};

// One element's part, in float, with d = x - mean, xhat = d rstd and
// `scaled` = rstd w (the channel's weight over its group's deviation):
// g = dy act'(d scaled + b) (the on-chip kernels' swish derivative, on the
// special-function unit), and the sums take g and g d (times rstd once, for
// g xhat); dx = scaled g + (dx_d d + dx_c), the group's factors
// (GnBackwardGroupTerms) holding rstd (-mean(w g)) and -rstd^2 mean(w g xhat).
template <bool kSwish>
__device__ __forceinline__ float persistent_gradient(float d, float dy, float scaled, float bias, float beta,
                                                     float scale) {
    if constexpr (kSwish)
        return dy * fast_swish_derivative(d * scaled + bias, beta, scale);
    else
        return dy;
}

template <bool kSwish>
__device__ __forceinline__ float persistent_dx(const GnBackwardGroupTerms& group, float scaled, float bias, float beta,
                                               float scale, float x, float dy) {
    const float d = x - group.mean;
    const float g = persistent_gradient<kSwish>(d, dy, scaled, bias, beta, scale);
    return scaled * g + (group.dx_d * d + group.dx_c);
}

// Channels inner, a lane's group terms: lo's where `low`, else hi's, field
// by field (a choice between the two structs went through the stack).
__device__ __forceinline__ GnBackwardGroupTerms lane_group(bool low, const GnBackwardGroupTerms& lo,
                                                           const GnBackwardGroupTerms& hi) {
    return GnBackwardGroupTerms{low ? lo.mean : hi.mean, low ? lo.rstd : hi.rstd, low ? lo.dx_d : hi.dx_d,
                                low ? lo.dx_c : hi.dx_c};
}

// Positions inner: the blocks whose shares touch slice s, [from, to].  The
// slice's vectors lie below x's, which count in int (the planner), so a
// divisor's multiply divides them: two 64-bit divisions here had stood
// between the grid's barrier and every merge's loads.
__device__ __forceinline__ void slice_blocks(const GnPersistentWalk& w, int s, int& from, int& to) {
    from = w.by_share.divide(s * w.plane_vectors);
    to = min(w.blocks - 1, w.by_share.divide((s + 1) * w.plane_vectors - 1));
}

// Positions inner: block b's double sums of slice s (which its share touches).
__device__ __forceinline__ const double* slice_sums_of(const GnPersistentWalk& w, const double* sums, int b, int s) {
    const int j = s - w.by_plane.divide(b * w.block_vectors);
    return sums + (static_cast<std::int64_t>(b) * w.block_slices + j) * 2;
}

// Channels inner: block i of sample n's double sums of channel c.
__device__ __forceinline__ std::int64_t channel_sums_at(const GnPersistentWalk& w, int n, int c, int i) {
    return ((static_cast<std::int64_t>(n) * w.channels + c) * w.sample_blocks + i) * 2;
}

// Launched with walk.threads threads (whole waves), walk.blocks blocks, all
// resident, walk.shared_bytes of dynamic shared memory.  dx may be x or dy:
// every block reads its share before the grid's barrier, and a thread's
// streamed slots are read again by that thread just before it writes them.
template <typename T, typename P, bool kInner, bool kSwish>
__global__ void __launch_bounds__(kGnPersistentThreads, 1)
    gn_persistent_backward(const T* x, const T* dy, T* dx, GnPersistentBackwardArgs<P> a) {
    constexpr int W = static_cast<int>(16 / sizeof(T));
    constexpr int R = gn_persistent_backward_register_slots(kInner, kSwish);
    constexpr int B = kGnPersistentBackwardBatch;
    extern __shared__ float4 gn_persistent_backward_shared[];
    const GnPersistentWalk& w = a.walk;
    const int threads = static_cast<int>(blockDim.x);
    const int t = static_cast<int>(threadIdx.x);
    const int block = static_cast<int>(blockIdx.x);
    const int warps = threads / MBN_WAVE_SIZE;
    const int warp = t / MBN_WAVE_SIZE;
    const int lane = t % MBN_WAVE_SIZE;
    const GnPersistentShare share = persistent_share(w, block);
    // Dynamic shared memory: the threads' sums [(j * 2 + q) * threads + t]
    // (j a lane channels inner, a slice of the share positions inner), the
    // terms of the groups the block touches, the weight and bias of its
    // channels (channels inner channel c at c, positions inner slice s at
    // s - first_slice), the held x [(k - R) * threads + t], then dy.
    const int sum_lanes = gn_persistent_backward_sum_lanes(kInner, W, w.block_slices);
    float* thread_sums = reinterpret_cast<float*>(gn_persistent_backward_shared);
    GnBackwardGroupTerms* groups = reinterpret_cast<GnBackwardGroupTerms*>(
        reinterpret_cast<char*>(gn_persistent_backward_shared) + gn_persistent_backward_sums_bytes(threads, sum_lanes));
    float2* params =
        reinterpret_cast<float2*>(reinterpret_cast<char*>(groups) + gn_persistent_backward_groups_bytes(w.block_groups));
    Pack<T, W>* held_x =
        reinterpret_cast<Pack<T, W>*>(reinterpret_cast<char*>(params) + gn_persistent_params_bytes(w.block_channels));
    Pack<T, W>* held_dy = held_x + w.shared_slots * threads;
    const int first = share.begin + t;  // slot k: first + k * threads, used below share.end
    auto used = [&](int k) { return first + k * threads < share.end; };
    auto at = [&](int k) { return static_cast<std::int64_t>(first + k * threads) * W; };

    Pack<T, W> rx[R], rdy[R];
#pragma unroll
    for (int k = 0; k < R; ++k)
        if (used(k)) {
            rx[k] = load_pack<W>(x + at(k));
            rdy[k] = load_pack<W>(dy + at(k));
        }

    // The block's weights and biases, and its groups' saved statistics.
    // Channels inner a sample's groups, positions inner the share's (two at
    // most); flat group n * G + g of local 0: first_group.
    const int first_slice = kInner ? 0 : w.by_plane.divide(share.begin);
    for (int i = t; i < w.block_channels; i += threads) {
        if (!kInner && first_slice + i >= w.slices) break;
        const int c = kInner ? i : (first_slice + i) % w.channels;
        params[i] = make_float2(a.weight != nullptr ? widen(a.weight[c * a.weight_stride]) : 1.0f,
                                kSwish && a.bias != nullptr ? widen(a.bias[c * a.bias_stride]) : 0.0f);
    }
    const int groups_here =
        kInner ? w.groups : (share.end > share.begin ? w.by_group.divide(share.end - 1) - share.first + 1 : 0);
    const int first_group = kInner ? share.first * w.groups : share.first;
    for (int local = t; local < groups_here; local += threads) {
        const int flat = first_group + local;
        const int n = flat / w.groups;
        GnBackwardGroupTerms g{};
        g.mean = static_cast<float>(read_stat(a.mean, n, flat - n * w.groups));
        g.rstd = static_cast<float>(read_stat(a.rstd, n, flat - n * w.groups));
        groups[local] = g;
    }
    if constexpr (!kInner)  // a thread's running sums go to shared memory slice by slice, some skipped
        for (int j = 0; j < 2 * w.block_slices; ++j) thread_sums[j * threads + t] = 0.0f;
    __syncthreads();

    const float beta = a.swish_beta;
    const float scale = swish_exponent_scale(beta);
    // Channels inner, lane e of the thread's column is channel column * W +
    // e, of group lo (e < split) or lo + 1; its scaled weight and bias stay
    // in registers.  Positions inner, a vector is one slice: its terms are
    // found anew where the slice changes.
    const int column = kInner ? (first - share.begin) % w.row_vectors : 0;
    const int lo = kInner ? column * W / w.group_channels : 0;
    const int split = kInner ? min(W, (lo + 1) * w.group_channels - column * W) : 0;
    float lane_scaled[kInner ? W : 1], lane_bias[kInner ? W : 1];  // rstd w, and b
    GnBackwardGroupTerms group_lo{}, group_hi{};
    // Channels inner: the lanes' groups, and their weights and biases (the
    // sums need them under the activation only; dx reads them again).
    auto take_lanes = [&](bool weights) {
        group_lo = groups[lo];
        group_hi = groups[min(lo + 1, w.groups - 1)];
        if (!weights) return;
#pragma unroll
        for (int e = 0; e < W; ++e) {
            const float2 wb = params[column * W + e];
            lane_scaled[e] = wb.x * (e < split ? group_lo.rstd : group_hi.rstd);
            lane_bias[e] = wb.y;
        }
    };
    if constexpr (kInner) take_lanes(kSwish);
    int held_slice = -1;  // positions inner: the slice whose terms lane_scaled, lane_bias, group_lo hold
    auto take_slice = [&](int slice) {
        held_slice = slice;
        const float2 wb = params[slice - first_slice];
        group_lo = groups[slice / w.group_channels - first_group];
        lane_scaled[0] = wb.x * group_lo.rstd;
        lane_bias[0] = wb.y;
    };

    // The sums of g and g d: channels inner per lane, positions inner per
    // slice (running, stored where the slice changes); each times rstd when
    // stored.
    float sum_g[kInner ? W : 1] = {}, sum_gd[kInner ? W : 1] = {};
    auto store_running = [&] {
        if (held_slice < 0) return;
        const int j = held_slice - first_slice;
        thread_sums[(j * 2) * threads + t] = sum_g[0];
        thread_sums[(j * 2 + 1) * threads + t] = sum_gd[0] * group_lo.rstd;
        sum_g[0] = sum_gd[0] = 0.0f;
    };
    auto add = [&](int k, const Pack<T, W>& xv, const Pack<T, W>& dyv) {
        float xf[W], df[W];
        widen_pack<float, W, 1>(xv, xf);
        widen_pack<float, W, 1>(dyv, df);
        if constexpr (kInner) {
#pragma unroll
            for (int e = 0; e < W; ++e) {
                const float d = xf[e] - (e < split ? group_lo.mean : group_hi.mean);
                const float g = persistent_gradient<kSwish>(d, df[e], lane_scaled[e], lane_bias[e], beta, scale);
                sum_g[e] += g;
                sum_gd[e] += g * d;
            }
        } else {
            const int slice = w.by_plane.divide(first + k * threads);
            if (slice != held_slice) {
                store_running();
                take_slice(slice);
            }
            float vector_g = 0.0f, vector_gd = 0.0f;
#pragma unroll
            for (int e = 0; e < W; ++e) {
                const float d = xf[e] - group_lo.mean;
                const float g = persistent_gradient<kSwish>(d, df[e], lane_scaled[0], lane_bias[0], beta, scale);
                vector_g += g;
                vector_gd += g * d;
            }
            sum_g[0] += vector_g;
            sum_gd[0] += vector_gd;
        }
    };
#pragma unroll
    for (int k = 0; k < R; ++k)
        if (used(k)) add(k, rx[k], rdy[k]);
    // Shared slots, then streamed ones, a batch of loads in flight at a time.
    const int on_chip = min(w.slots, R + w.shared_slots);
    for (int k0 = R; k0 < w.slots; k0 += B) {
        Pack<T, W> bx[B], bdy[B];
#pragma unroll
        for (int b = 0; b < B; ++b)
            if (k0 + b < w.slots && used(k0 + b)) {
                bx[b] = load_pack<W>(x + at(k0 + b));
                bdy[b] = load_pack<W>(dy + at(k0 + b));
            }
#pragma unroll
        for (int b = 0; b < B; ++b) {
            const int k = k0 + b;
            if (k >= w.slots || !used(k)) continue;
            if (k < on_chip) {
                held_x[(k - R) * threads + t] = bx[b];
                held_dy[(k - R) * threads + t] = bdy[b];
            }
            add(k, bx[b], bdy[b]);
        }
    }
    if constexpr (kInner) {
#pragma unroll
        for (int e = 0; e < W; ++e) {
            thread_sums[(e * 2) * threads + t] = sum_g[e];
            thread_sums[(e * 2 + 1) * threads + t] = sum_gd[e] * (e < split ? group_lo.rstd : group_hi.rstd);
        }
    } else {
        store_running();
    }
    __syncthreads();

    // The block's sums, in double and a fixed order: channels inner a
    // thread a channel over the rows of threads that hold it, positions
    // inner a warp a slice over all threads.
    if constexpr (kInner) {
        const int sample = share.first;
        const int mine = block - sample * w.sample_blocks;
        const int rows = threads / w.row_vectors;
        for (int c = t; c < w.channels; c += threads) {
            const int col = c / W;
            const int e = c - col * W;
            double total[2] = {0.0, 0.0};
            for (int r = 0; r < rows; ++r) {
                total[0] += static_cast<double>(thread_sums[(e * 2) * threads + r * w.row_vectors + col]);
                total[1] += static_cast<double>(thread_sums[(e * 2 + 1) * threads + r * w.row_vectors + col]);
            }
            store_pair(a.sums + channel_sums_at(w, sample, c, mine), total);
        }
    } else {
        for (int j = warp; j < w.block_slices; j += warps) {
            double total[2] = {0.0, 0.0};
            for (int i = lane; i < threads; i += MBN_WAVE_SIZE) {
                total[0] += static_cast<double>(thread_sums[(j * 2) * threads + i]);
                total[1] += static_cast<double>(thread_sums[(j * 2 + 1) * threads + i]);
            }
            warp_totals(total);
            if (lane == 0) store_pair(a.sums + (static_cast<std::int64_t>(block) * w.block_slices + j) * 2, total);
        }
    }
    grid_barrier(a.barrier, 1);

    // The merges, each in a fixed order, a warp a sum.  Positions inner
    // every block merges its own groups' slices (two groups at most, a few
    // blocks a slice), and channel c's dbias and dweight go to block c mod
    // blocks.  Channels inner each channel's total over a sample's blocks is
    // merged once, by block c mod sample_blocks of the sample, and handed
    // over through the scratch and a second barrier; then every block
    // weighs its sample's channels into its groups' means, and block c mod
    // blocks adds channel c's totals over the samples.
    auto weight_of = [&](int c) {
        return a.weight != nullptr ? static_cast<double>(widen(a.weight[c * a.weight_stride])) : 1.0;
    };
    auto store_group = [&](int local, double wg, double wg_xhat) {
        // dx = rstd (w g - mean(w g) - xhat mean(w g xhat)), xhat = rstd d.
        const double rstd = groups[local].rstd;
        groups[local].dx_d = static_cast<float>(-rstd * rstd * wg_xhat * w.inv_group_size);
        groups[local].dx_c = static_cast<float>(-rstd * wg * w.inv_group_size);
    };
    auto store_gradients = [&](int c, double g, double g_xhat) {
        a.dbias[c * a.dbias_stride] = narrow<P>(g);
        a.dweight[c * a.dweight_stride] = narrow<P>(g_xhat);
    };
    const int samples = w.slices / w.channels;
    if constexpr (kInner) {
        const int sample = share.first;
        const int mine = block - sample * w.sample_blocks;
        for (int c = mine + warp * w.sample_blocks; c < w.channels; c += warps * w.sample_blocks) {
            double total[2] = {0.0, 0.0};
            for (int i = lane; i < w.sample_blocks; i += MBN_WAVE_SIZE) {
                const double* theirs = a.sums + channel_sums_at(w, sample, c, i);
                total[0] += load_after_barrier(theirs);
                total[1] += load_after_barrier(theirs + 1);
            }
            warp_totals(total);
            if (lane == 0) store_pair(a.totals + (static_cast<std::int64_t>(sample) * w.channels + c) * 2, total);
        }
        grid_barrier(a.barrier, 2);
        const double* totals = a.totals + static_cast<std::int64_t>(sample) * w.channels * 2;
        for (int local = warp; local < w.groups; local += warps) {
            double total[2] = {0.0, 0.0};
            for (int k = lane; k < w.group_channels; k += MBN_WAVE_SIZE) {
                const int c = local * w.group_channels + k;
                const double weight = static_cast<double>(params[c].x);
                total[0] += weight * load_after_barrier(totals + c * 2);
                total[1] += weight * load_after_barrier(totals + c * 2 + 1);
            }
            warp_totals(total);
            if (lane == 0) store_group(local, total[0], total[1]);
        }
        // The weight and bias gradients from the last warp down: beside the
        // group weighing where the groups are fewer than the warps.
        if (a.dweight != nullptr)
            for (int c = block + (warps - 1 - warp) * w.blocks; c < w.channels; c += warps * w.blocks) {
                double total[2] = {0.0, 0.0};
                for (int n = lane; n < samples; n += MBN_WAVE_SIZE) {
                    const double* theirs = a.totals + (static_cast<std::int64_t>(n) * w.channels + c) * 2;
                    total[0] += load_after_barrier(theirs);
                    total[1] += load_after_barrier(theirs + 1);
                }
                warp_totals(total);
                if (lane == 0) store_gradients(c, total[0], total[1]);
            }
    } else {
        // Slice s's sums over the blocks its plane spans.
        auto slice_total = [&](int s, double (&total)[2], double weight) {
            int from, to;
            slice_blocks(w, s, from, to);
            double slice[2] = {0.0, 0.0};
            // Unrolled so that a slice's loads are in flight together.
#pragma unroll 4
            for (int b = from; b <= to; ++b) {
                const double* theirs = slice_sums_of(w, a.sums, b, s);
                slice[0] += load_after_barrier(theirs);
                slice[1] += load_after_barrier(theirs + 1);
            }
            total[0] += weight * slice[0];
            total[1] += weight * slice[1];
        };
        // The groups' channels spread over the block's threads, channel i
        // of the groups' channels (groups_here * C/G of them, the first
        // group's first) on thread i mod threads, each adding its terms per
        // group; then a warp a group adds the threads' terms in thread
        // order.  A warp a group had taken a round trip to L2 per 32 of its
        // channels, on two warps of sixteen (H200, forty-ninth session:
        // 1x1280x64x64 bfloat16, 40 channels a group, 22.2 -> 21.5 us).
        double terms_lo[2] = {0.0, 0.0}, terms_hi[2] = {0.0, 0.0};
        const int channels_here = groups_here * w.group_channels;
        for (int i = t; i < channels_here; i += threads) {
            const bool hi = i >= w.group_channels;  // a share touches two groups at most
            const int s = first_group * w.group_channels + i;
            double term[2] = {0.0, 0.0};
            slice_total(s, term, weight_of(s % w.channels));
            (hi ? terms_hi[0] : terms_lo[0]) += term[0];
            (hi ? terms_hi[1] : terms_lo[1]) += term[1];
        }
        double* group_terms = reinterpret_cast<double*>(thread_sums);  // [local][thread][2]
        store_pair(group_terms + static_cast<std::int64_t>(t) * 2, terms_lo);
        store_pair(group_terms + static_cast<std::int64_t>(threads + t) * 2, terms_hi);
        // The weight and bias gradients on the last warps, beside the
        // group terms on the first threads, not after them.
        if (a.dweight != nullptr)
            for (int c = block + (warps - 1 - warp) * w.blocks; c < w.channels; c += warps * w.blocks) {
                double total[2] = {0.0, 0.0};
                for (int n = lane; n < samples; n += MBN_WAVE_SIZE) slice_total(n * w.channels + c, total, 1.0);
                warp_totals(total);
                if (lane == 0) store_gradients(c, total[0], total[1]);
            }
        __syncthreads();
        if (warp < groups_here) {
            const int holders = min(threads, channels_here);
            double total[2] = {0.0, 0.0};
            for (int i = lane; i < holders; i += MBN_WAVE_SIZE) {
                const double* theirs = group_terms + static_cast<std::int64_t>(warp * threads + i) * 2;
                total[0] += theirs[0];
                total[1] += theirs[1];
            }
            warp_totals(total);
            if (lane == 0) store_group(warp, total[0], total[1]);
        }
    }
    __syncthreads();

    // dx: the streamed slots first (read again, newest first, from L2,
    // before dx's own lines displace them), then the registers and the
    // shared slots.  Registers first read 3% more from DRAM and ran
    // 0.6%-0.8% slower (H200, bench/RESULTS.md, thirty-sixth session).
    if constexpr (kInner) take_lanes(true);
    held_slice = -1;
    auto write = [&](int k, const Pack<T, W>& xv, const Pack<T, W>& dyv) {
        float xf[W], df[W];
        widen_pack<float, W, 2>(xv, xf);
        widen_pack<float, W, 2>(dyv, df);
        Pack<T, W> out;
        if constexpr (kInner) {
#pragma unroll
            for (int e = 0; e < W; ++e)
                out.lane[e] = narrow<T>(persistent_dx<kSwish>(lane_group(e < split, group_lo, group_hi), lane_scaled[e],
                                                              lane_bias[e], beta, scale, xf[e], df[e]));
        } else {
            const int slice = w.by_plane.divide(first + k * threads);
            if (slice != held_slice) take_slice(slice);
#pragma unroll
            for (int e = 0; e < W; ++e)
                out.lane[e] =
                    narrow<T>(persistent_dx<kSwish>(group_lo, lane_scaled[0], lane_bias[0], beta, scale, xf[e], df[e]));
        }
        store_pack(dx + at(k), out);
    };
    for (int k0 = w.slots - 1; k0 >= on_chip; k0 -= B) {
        Pack<T, W> bx[B], bdy[B];
#pragma unroll
        for (int b = 0; b < B; ++b)
            if (k0 - b >= on_chip && used(k0 - b)) {
                bx[b] = load_pack_last<W>(x + at(k0 - b));
                bdy[b] = load_pack_last<W>(dy + at(k0 - b));
            }
#pragma unroll
        for (int b = 0; b < B; ++b)
            if (k0 - b >= on_chip && used(k0 - b)) write(k0 - b, bx[b], bdy[b]);
    }
#pragma unroll
    for (int k = R - 1; k >= 0; --k)
        if (used(k)) write(k, rx[k], rdy[k]);
    for (int k = on_chip - 1; k >= R; --k)
        if (used(k))
            write(k, load_shared_pack(held_x + (k - R) * threads + t), load_shared_pack(held_dy + (k - R) * threads + t));
    grid_barrier_exit(a.barrier, kInner ? 2 : 1);
}

}  // namespace
}  // namespace gpu
}  // namespace mbn
