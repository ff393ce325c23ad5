// The phases of a per-feature reduction that batch norm's and group norm's
// kernels share, as device functions over one block's share of a feature
// layout (feature_share.h): the shifted moments of x over the share
// (block_moments), and the normalize loop with an elementwise epilogue
// (normalize_share).  Batch norm's other phases (the statistics finish, the
// gradient sums, the backprop loop) are in bn_block_phases.h.
#pragma once

#include "common/numerics.hpp"
#include "gpu/block_reduce.h"
#include "gpu/feature_layout.hpp"
#include "gpu/feature_share.h"
#include "gpu/nest_walk.h"
#include "gpu/norm_math.h"

#include <cstdint>
#include <type_traits>

namespace mbn {
namespace gpu {

// ---- statistics ---------------------------------------------------------------

// Positions per Welford batch: independent loads in flight, 16 values at
// most.  (8 positions for threads along the features, which hold 4 features'
// batches, took 92-128 registers instead of 80: one block less per
// multiprocessor, and 7% slower NHWC training on the H100.)
template <int V>
__host__ __device__ constexpr int moment_batch_positions() {
    return V >= 8 ? 2 : 4;
}

// Positions block_moments loads before its math: on the linear walk (Rank
// 1, group norm's slices) about 64 bytes a thread, kept as stored (two
// registers for 4 halves) and widened a batch at a time, 32 with several
// features a thread (their Welford state: 64 bytes took 100-102 registers,
// and under three blocks a multiprocessor 72-112 bytes of stack); one batch
// on the nest cursor.
template <typename T, int Rank, int VF, int V>
__host__ __device__ constexpr int moment_load_positions() {
    if constexpr (Rank == 1)
        return linear_load_positions<T, V, (VF > 1 ? 32 : 64), moment_batch_positions<V>()>();
    else
        return moment_batch_positions<V>();
}

// A thread's positions r, r + rows, ... below `end` in groups of kLoad:
// every whole group by group(std::false_type), then the last few (fewer
// than a group) as one guarded group, group(std::true_type), on the linear
// walk, or one by one, one(), on the nest cursors.  Both phases walk so:
// block_moments and normalize_share.  `r` is the caller's, which its
// callbacks read.
template <int kLoad, bool kLinear, typename Group, typename One>
__device__ __forceinline__ void walk_in_groups(std::int64_t& r, std::int64_t end, std::int64_t rows,
                                               const Group& group, const One& one) {
    for (; r + (kLoad - 1) * rows < end; r += kLoad * rows) group(std::false_type{});
    if constexpr (kLinear) {
        if (r < end) group(std::true_type{});
    } else {
        for (; r < end; r += rows) one();
    }
}

// The shifted moments of feature j (of the thread's VF) over the share, one
// element at a time in double: the rare path of block_moments, for shares
// whose float M2 overflowed (slow, and few registers).
template <typename T, int Rank, int VR, int VF>
__device__ __forceinline__ ShiftedMoments<acc_t<T>> exact_share_moments(const T* __restrict__ x,
                                                                     const FeatureLayout& layout,
                                                                     const ThreadShare& share, std::int64_t base,
                                                                     int j, double shift) {
    using A = acc_t<T>;
    constexpr int V = VR * VF;
    Moments<double, double> m{0.0, 0.0, 0.0};
    double sum = 0.0;
    std::int64_t at[1] = {base};
    ReduceCursor<Rank, 1> cursor;
    cursor.start(layout.reduce, share.first, layout.rows, at);
    for (std::int64_t r = share.first; r < share.end; r += layout.rows) {
        double value[V];
        load_values<double, V>(x + cursor.offset[0], value);
#pragma unroll
        for (int e = 0; e < V; ++e) {
            if (VF > 1 && e != j) continue;
            const double d = value[e] - shift;
            m = merge(m, Moments<double, double>{1.0, d, 0.0});
            sum += d;
        }
        cursor.advance(layout.reduce);
    }
    return ShiftedMoments<A>{{static_cast<A>(m.count), static_cast<A>(m.mean), m.m2}, sum};
}

// Shifted moments of x over the share, reduced over the block's rows (valid
// in row 0).  shift[j] is feature j's first element: every deviation is taken
// from it, so a channel with mean 1e4 and std 1e-2 keeps its digits in float
// and a constant one gives exactly zero.  Every thread of the block calls it.
// `shared` holds kBlockThreads values, VF * kBlockThreads on the linear walk
// (Rank 1), which reduces its VF features over the rows together.
//
// The thread's positions go in Welford batches of moment_batch_positions
// from its first on; on the nest cursors the last few (fewer than a batch)
// one by one, on the linear walk as one batch cut short, loaded with the
// rest of its group (moment_load_positions), so that no position waits for
// the one before it.
template <typename T, int Rank, int VR, int VF>
__device__ void block_moments(const T* __restrict__ x, const FeatureLayout& layout, const ThreadShare& share,
                              ShiftedMoments<acc_t<T>> (&total)[VF], double (&shift)[VF],
                              ShiftedMoments<acc_t<T>>* shared) {
    using A = acc_t<T>;
    constexpr int V = VR * VF;
    constexpr int kBatch = moment_batch_positions<V>();
    constexpr int kLoad = moment_load_positions<T, Rank, VF, V>();
    constexpr bool kLinear = Rank == 1;
    const std::int64_t rows = layout.rows;
    ShiftedMoments<A, A> moments[VF];
    ShiftedMoments<A> exact[VF];
#pragma unroll
    for (int j = 0; j < VF; ++j) {
        moments[j] = ShiftedMoments<A, A>{{A(0), A(0), A(0)}, 0.0};
        shift[j] = 0.0;
    }
    std::int64_t base[1] = {0};
    if (share.active) {
        nest_offsets<1>(layout.feature, share.feature0, kSlotX, base);
        // Reduction index 0 is at each feature's base; feature j of the
        // thread sits j elements on.
        A narrow_shift[VF];
#pragma unroll
        for (int j = 0; j < VF; ++j) {
            narrow_shift[j] = static_cast<A>(widen(x[base[0] + j]));
            shift[j] = statistics_shift(narrow_shift[j]);
        }
        std::int64_t r = share.first;
        ReduceCursor<Rank, 1> cursor;
        cursor.start(layout.reduce, r, rows, base);
        // kLoad positions from r on (guarded: those below the share's end),
        // loaded as stored, then added a batch at a time.
        auto add_group = [&](auto guarded) {
            constexpr bool kGuarded = decltype(guarded)::value;
            Pack<T, V> raw[kLoad];
#pragma unroll
            for (int k = 0; k < kLoad; ++k) {
                if (kGuarded && r + k * rows >= share.end) continue;
                raw[k] = load_pack<V>(x + cursor.offset[0]);
                cursor.advance(layout.reduce);
            }
#pragma unroll
            for (int k0 = 0; k0 < kLoad; k0 += kBatch) {
                int count = kBatch;  // positions of the batch below the end
                if (kGuarded) {
                    count = 0;
#pragma unroll
                    for (int k = 0; k < kBatch; ++k) count += r + (k0 + k) * rows < share.end ? 1 : 0;
                    if (count == 0) continue;
                }
                A v[VF][kBatch * VR];
#pragma unroll
                for (int k = 0; k < kBatch; ++k) {
                    A value[V];
                    widen_pack<A, V>(kGuarded && k >= count ? Pack<T, V>{} : raw[k0 + k], value);
#pragma unroll
                    for (int e = 0; e < V; ++e) {
                        const int j = VF > 1 ? e : 0;
                        v[j][VF > 1 ? k : k * VR + e] = value[e] - narrow_shift[j];
                    }
                }
                // The linear walk's VF features share one division a
                // batch (add_batches; its VF > 1 instances issue ~170
                // instructions a batch of 32 bytes).
                if constexpr (kLinear) {
                    add_batches(moments, v, VR * count);
                } else {
#pragma unroll
                    for (int j = 0; j < VF; ++j) add_batch(moments[j], v[j], VR * count);
                }
            }
        };
        walk_in_groups<kLoad, kLinear>(r, share.end, rows, add_group, [&] {
            A value[V];
            load_values<A, V>(x + cursor.offset[0], value);
            A v[VF][VR];
#pragma unroll
            for (int e = 0; e < V; ++e) {
                const int j = VF > 1 ? e : 0;
                v[j][VF > 1 ? 0 : e] = value[e] - narrow_shift[j];
            }
#pragma unroll
            for (int j = 0; j < VF; ++j) add_batch(moments[j], v[j]);
            cursor.advance(layout.reduce);
        });
    }
#pragma unroll
    for (int j = 0; j < VF; ++j) {
        const Moments<A, A>& w = moments[j].welford;
        // Squared deviations past ~1.8e19 overflow a float M2 (inputs near
        // 1e30): then this thread's share of the feature is redone in double.
        if (share.active && !isfinite(w.m2))
            exact[j] = exact_share_moments<T, Rank, VR, VF>(x, layout, share, base[0], j, shift[j]);
        else
            exact[j] = ShiftedMoments<A>{{w.count, w.mean, static_cast<double>(w.m2)}, moments[j].sum};
    }
    if constexpr (kLinear) {
#pragma unroll
        for (int j = 0; j < VF; ++j) total[j] = exact[j];
        reduce_each_over_rows(total, shared, kBlockThreads);
    } else {
#pragma unroll
        for (int j = 0; j < VF; ++j) total[j] = reduce_over_rows(exact[j], shared);
    }
}

// ---- normalize ---------------------------------------------------------------

constexpr int kApplyBatch = 4;  // positions per thread in flight on the nest cursors

// Positions normalize_share loads before it writes: on the linear walk
// (Rank 1) about 64 bytes a thread, at least kApplyBatch; kApplyBatch on
// the nest cursors.
template <typename T, int Rank, int V>
__host__ __device__ constexpr int apply_load_positions() {
    if constexpr (Rank == 1)
        return linear_load_positions<T, V, 64, kApplyBatch>();
    else
        return kApplyBatch;
}

// What normalize_share applies to each normalized value before blending:
// nothing, batch norm's fused activation (ActivationEpilogue) or group
// norm's swish (gn_activation.h).
struct NoEpilogue {
    template <typename A>
    __device__ __forceinline__ A operator()(A v) const {
        return v;
    }
};

// y = alpha * epilogue(((x - shift) - mean_offset) * factor + bias) + beta * y_prior
// over the thread's share.  x may be y (in place): each element is read
// before this thread writes it.  The positions go in groups loaded before
// any is written (apply_load_positions); the last few (fewer than a group)
// one by one on the nest cursors, as one guarded group on the linear walk.
template <typename T, int Rank, int VR, int VF, typename Epilogue = NoEpilogue>
__device__ void normalize_share(const T* x, T* y, const FeatureLayout& layout, const ThreadShare& share,
                                const acc_t<T> (&shift)[VF], const acc_t<T> (&mean_offset)[VF],
                                const acc_t<T> (&factor)[VF], const acc_t<T> (&bias)[VF], float alpha,
                                float beta, const Epilogue& epilogue = Epilogue{}) {
    using A = acc_t<T>;
    constexpr int V = VR * VF;
    constexpr int kLoad = apply_load_positions<T, Rank, V>();
    constexpr bool kLinear = Rank == 1;
    const std::int64_t rows = layout.rows;
    std::int64_t base[2];
    nest_offsets<2>(layout.feature, share.feature0, kSlotX, base);
    std::int64_t r = share.first;
    ReduceCursor<Rank, 2> cursor;
    cursor.start(layout.reduce, r, rows, base);
    // kLoad positions from r on (guarded: those below the share's end).
    auto apply_group = [&](auto guarded) {
        constexpr bool kGuarded = decltype(guarded)::value;
        // The group stays as loaded until its turn: half-width elements
        // widened all at once held 112-127 registers (two blocks per
        // multiprocessor) where float data holds 64-80.
        Pack<T, V> raw[kLoad];
        std::int64_t out[kLoad];
        [[maybe_unused]] const std::int64_t first_out = cursor.offset[1];
#pragma unroll
        for (int k = 0; k < kLoad; ++k) {
            if (kGuarded && r + k * rows >= share.end) continue;
            raw[k] = load_pack<V>(x + cursor.offset[0]);
            out[k] = cursor.offset[1];
            cursor.advance(layout.reduce);
        }
#pragma unroll
        for (int k = 0; k < kLoad; ++k) {
            if (kGuarded && r + k * rows >= share.end) continue;
            // The linear walk's offsets again from the group's first, not
            // kept in registers from the loads to the stores.
            if constexpr (kLinear) out[k] = first_out + k * cursor.delta[1];
            A v[V];
            widen_pack<A, V>(raw[k], v);
#pragma unroll
            for (int e = 0; e < V; ++e) {
                const int j = VF > 1 ? e : 0;
                v[e] = epilogue(((v[e] - shift[j]) - mean_offset[j]) * factor[j] + bias[j]);
            }
            store_values<T, V>(y + out[k], v, alpha, beta);
        }
    };
    walk_in_groups<kLoad, kLinear>(r, share.end, rows, apply_group, [&] {
        A v[V];
        load_values<A, V>(x + cursor.offset[0], v);
#pragma unroll
        for (int e = 0; e < V; ++e) {
            const int j = VF > 1 ? e : 0;
            v[e] = epilogue(((v[e] - shift[j]) - mean_offset[j]) * factor[j] + bias[j]);
        }
        store_values<T, V>(y + cursor.offset[1], v, alpha, beta);
        cursor.advance(layout.reduce);
    });
}

}  // namespace gpu
}  // namespace mbn
