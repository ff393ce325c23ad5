// Batch-norm training forward and backward on the GPU: one launch per call
// (engine_plan.hpp says which of its four algorithms, and why).  Each block
// takes items (a tile of features and one split of their reduction):
//   reduce    moments of x (training; backward without saved statistics),
//             then for backward the sums of dy and dy (x - mean);
//   hand-over with one split, the block's own totals; with several, every
//             block stores its partials, the grid meets at a barrier, the
//             blocks of a tile divide its features, each merging its share
//             in split order and storing the results, and after a second
//             barrier every block reads its tile's results;
//   epilogue  y (training) or dx (backward), from registers when the block
//             kept its share there, else re-reading it.
// Outputs that belong to a feature (running and saved statistics, dscale,
// dbias) are written by the one block that finishes the feature.
#include "common/numerics.hpp"
#include "gpu/bn_block_phases.h"
#include "gpu/bn_dispatch.hpp"
#include "gpu/bn_engine.hpp"
#include "gpu/feature_reduce.h"
#include "gpu/grid_sync.h"
#include "gpu/param_io.h"

#include <map>
#include <mutex>
#include <utility>

namespace mbn {
namespace gpu {
namespace {

// Positions a thread keeps in registers in the cached algorithms: 16-byte
// packs, 8 of x for training (32 registers), 4 each of x and dy for backward.
constexpr int kTrainingCache = 8;
constexpr int kBackwardCache = 4;

struct TrainingArgs {
    ParamRef scale, bias, running_mean, running_var, saved_mean, saved_inv_std;
    double epsilon;
    double exp_avg_factor;
    float alpha, beta;
};

struct BackwardArgs {
    ParamRef scale, dscale, dbias, saved_mean, saved_inv_std;
    double epsilon;
    Blend param;
    float alpha, beta;
};

// Shared memory of the reductions, reused phase by phase (synchronized in
// between): the widest use is a merge of ShiftedMoments<double>.
union alignas(16) ReduceBuffer {
    ShiftedMoments<float> moments_f[kBlockThreads];
    ShiftedMoments<double> moments_d[kBlockThreads];
    Sums2<double> sums[kBlockThreads];
};
template <typename A>
__device__ __forceinline__ ShiftedMoments<A>* moments_buffer(ReduceBuffer& b);
template <>
__device__ __forceinline__ ShiftedMoments<float>* moments_buffer<float>(ReduceBuffer& b) {
    return b.moments_f;
}
template <>
__device__ __forceinline__ ShiftedMoments<double>* moments_buffer<double>(ReduceBuffer& b) {
    return b.moments_d;
}

// Feature f's statistics: writes its running and saved statistics and
// returns its forward coefficients.  Called once per feature.
__device__ ForwardCoefficients feature_statistics(const TrainingArgs& a, const BnLayout& layout, std::int64_t f,
                                                  double shift, const ShiftedMoments<double>& total) {
    const std::int64_t m = layout.reduction_size();
    const FeatureStatistics s = finish_statistics(total, static_cast<double>(m), a.epsilon);
    std::int64_t at[6];  // the forward parameter slots
    nest_offsets<6>(layout.feature, f, kSlotParam0, at);
    ForwardCoefficients c{shift, s.mean_offset, 0.0, 0.0};
    if (a.scale.present()) {
        c.coef0 = a.scale.load(at[kFwdScale - kSlotParam0]) * s.inv_std;
        c.coef1 = a.bias.load(at[kFwdBias - kSlotParam0]);
    }
    const double mean = shift + s.mean_offset;
    if (a.running_mean.present()) {
        // Unbiased for the running estimate; a single value has no M - 1.
        const double unbiased = m > 1 ? s.variance * static_cast<double>(m) / static_cast<double>(m - 1) : s.variance;
        const double k = a.exp_avg_factor;
        const std::int64_t rm = at[kFwdMean - kSlotParam0], rv = at[kFwdVar - kSlotParam0];
        a.running_mean.store(rm, (1.0 - k) * a.running_mean.load(rm) + k * mean);
        a.running_var.store(rv, (1.0 - k) * a.running_var.load(rv) + k * unbiased);
    }
    if (a.saved_mean.present()) {
        a.saved_mean.store(at[kFwdSavedMean - kSlotParam0], mean);
        a.saved_inv_std.store(at[kFwdSavedInvStd - kSlotParam0], s.inv_std);
    }
    return c;
}

// The moments of the block's share of x for each of the thread's VF features
// (valid in row 0), from registers (Cache > 0) or from memory.
template <typename T, int Rank, int VR, int VF, int Cache>
__device__ void share_moments(const T* x, const BnLayout& layout, const ThreadShare& share,
                              const Pack<T, VR * VF> (&px)[Cache > 0 ? Cache : 1], int count,
                              ShiftedMoments<acc_t<T>> (&total)[VF], double (&shift)[VF], ReduceBuffer& buffer) {
    using A = acc_t<T>;
    if constexpr (Cache > 0) {
        A narrow_shift[VF];
        ShiftedMoments<A> own[VF];
#pragma unroll
        for (int j = 0; j < VF; ++j) {
            narrow_shift[j] = A(0);
            own[j] = ShiftedMoments<A>{{A(0), A(0), 0.0}, 0.0};
        }
        if (share.active) {
            // Reduction index 0 of each feature: its first element.
            const std::int64_t base = nest_offset(layout.feature, share.feature0, kSlotX);
#pragma unroll
            for (int j = 0; j < VF; ++j) narrow_shift[j] = static_cast<A>(widen(x[base + j]));
            run_moments<Cache, VR, VF>(px, count, narrow_shift, own);
        }
#pragma unroll
        for (int j = 0; j < VF; ++j) {
            shift[j] = static_cast<double>(narrow_shift[j]);
            total[j] = reduce_over_rows(own[j], moments_buffer<A>(buffer));
        }
    } else {
        block_moments<T, Rank, VR, VF>(x, layout, share, total, shift, moments_buffer<A>(buffer));
    }
}

// Widened per-thread totals as the merge takes them.
template <typename A>
__device__ __forceinline__ ShiftedMoments<double> widened(const ShiftedMoments<A>& m) {
    return ShiftedMoments<double>{{static_cast<double>(m.welford.count), static_cast<double>(m.welford.mean),
                                   m.welford.m2},
                                  m.sum};
}

// The statistics of the block's features, from the row-0 totals of its
// share: with one split, keep(f, shift, merged) for each local feature f;
// with several, every block stores its partials, the blocks of the tile
// divide the merges (publish(feature, f, shift, merged) stores the results),
// and after a second barrier every block takes its tile's results
// (fetch(feature, f)).  Every thread calls it; the block is synchronized
// when it returns.
template <typename A, int VF, typename Keep, typename Publish, typename Fetch>
__device__ void hand_over_moments(const BnLayout& layout, const ThreadShare& share, const BlockPlace& place,
                                  const ShiftedMoments<A> (&total)[VF], const double (&shift)[VF],
                                  const EngineScratch& scratch, const GridBarrier& barrier, double* shift_buffer,
                                  ReduceBuffer& buffer, Keep&& keep, Publish&& publish, Fetch&& fetch) {
    const std::int64_t features = layout.feature.size;
    const bool writer = threadIdx.y == 0 && share.active;
    if (layout.splits == 1) {
        if (writer)
#pragma unroll
            for (int j = 0; j < VF; ++j) keep(threadIdx.x * VF + j, shift[j], widened(total[j]));
        __syncthreads();
        return;
    }
    if (writer)
#pragma unroll
        for (int j = 0; j < VF; ++j) {
            const std::int64_t at = place.split * features + share.feature0 + j;
            scratch.mean[at] = static_cast<double>(total[j].welford.mean);
            scratch.m2[at] = total[j].welford.m2;
            scratch.sum[at] = total[j].sum;
            shift_buffer[threadIdx.x * VF + j] = shift[j];
        }
    grid_barrier(barrier);
    const std::int64_t first = place.tile * layout.tile_features * VF;
    const int tile = layout.tile_features * VF;
    merge_owned_splits(
        tile, layout.splits, static_cast<int>(place.split), ShiftedMoments<double>{{0.0, 0.0, 0.0}, 0.0},
        [&](int f, int s) {
            if (first + f >= features) return ShiftedMoments<double>{{0.0, 0.0, 0.0}, 0.0};
            const std::int64_t at = static_cast<std::int64_t>(s) * features + first + f;
            return ShiftedMoments<double>{
                {share_count(layout, s), load_after_barrier(scratch.mean + at), load_after_barrier(scratch.m2 + at)},
                load_after_barrier(scratch.sum + at)};
        },
        [&](int f, const ShiftedMoments<double>& merged) {
            if (first + f < features) publish(first + f, f, shift_buffer[f], merged);
        },
        buffer.moments_d);
    grid_barrier(barrier);
    for (int f = flat_thread_index(); f < tile; f += static_cast<int>(blockDim.x * blockDim.y))
        if (first + f < features) fetch(first + f, f);
    __syncthreads();
}

// Entry k of a feature's published results.
__device__ __forceinline__ double* final_of(const EngineScratch& scratch, std::int64_t feature, int k) {
    return scratch.finals + feature * kFinalsPerFeature + k;
}

// ---- training forward ------------------------------------------------------

template <typename T, int Rank, int VR, int VF, int Cache>
__global__ void __launch_bounds__(kBlockThreads)
    bn_training_engine(const T* x, T* y, BnLayout layout, TrainingArgs args, EngineScratch scratch,
                       GridBarrier barrier) {
    using A = acc_t<T>;
    constexpr int V = VR * VF;
    __shared__ ReduceBuffer buffer;
    __shared__ ForwardCoefficients coef[kBlockThreads];
    __shared__ double shift_buffer[kBlockThreads];
    const std::int64_t items = layout.tiles * layout.splits;
    for (std::int64_t item = blockIdx.x; item < items; item += gridDim.x) {
        const BlockPlace place{item % layout.tiles, item / layout.tiles};
        const ThreadShare share = thread_share<VF>(layout, place);
        const int count = run_length(share.first, share.end, layout.rows);
        Pack<T, V> px[Cache > 0 ? Cache : 1];
        std::int64_t base[2] = {0, 0};
        if (share.active) nest_offsets<2>(layout.feature, share.feature0, kSlotX, base);
        if constexpr (Cache > 0) {
            if (share.active) {
                NestCursor<Rank, 1> cursor;
                cursor.start(layout.reduce, share.first, layout.rows, {base[0]});
                load_run<Cache, V>(x, layout.reduce, cursor, count, px);
            }
        }
        ShiftedMoments<A> total[VF];
        double shift[VF];
        share_moments<T, Rank, VR, VF, Cache>(x, layout, share, px, count, total, shift, buffer);
        const std::int64_t first = place.tile * layout.tile_features * VF;
        hand_over_moments<A, VF>(
            layout, share, place, total, shift, scratch, barrier, shift_buffer, buffer,
            [&](int f, double feature_shift, const ShiftedMoments<double>& merged) {
                coef[f] = feature_statistics(args, layout, first + f, feature_shift, merged);
            },
            [&](std::int64_t feature, int, double feature_shift, const ShiftedMoments<double>& merged) {
                const ForwardCoefficients c = feature_statistics(args, layout, feature, feature_shift, merged);
                *final_of(scratch, feature, 0) = c.shift;
                *final_of(scratch, feature, 1) = c.mean_offset;
                *final_of(scratch, feature, 2) = c.coef0;
                *final_of(scratch, feature, 3) = c.coef1;
            },
            [&](std::int64_t feature, int f) {
                coef[f] = ForwardCoefficients{load_after_barrier(final_of(scratch, feature, 0)),
                                              load_after_barrier(final_of(scratch, feature, 1)),
                                              load_after_barrier(final_of(scratch, feature, 2)),
                                              load_after_barrier(final_of(scratch, feature, 3))};
            });
        if (share.active) {
            A c_shift[VF], c_offset[VF], c_factor[VF], c_bias[VF];
#pragma unroll
            for (int j = 0; j < VF; ++j) {
                const ForwardCoefficients& c = coef[threadIdx.x * VF + j];
                c_shift[j] = static_cast<A>(c.shift);
                c_offset[j] = static_cast<A>(c.mean_offset);
                c_factor[j] = static_cast<A>(c.coef0);
                c_bias[j] = static_cast<A>(c.coef1);
            }
            if constexpr (Cache > 0) {
                NestCursor<Rank, 2> cursor;
                cursor.start(layout.reduce, share.first, layout.rows, base);
#pragma unroll
                for (int k = 0; k < Cache; ++k)
                    if (k < count) {
                        A v[V];
                        widen_pack<A, V>(px[k], v);
#pragma unroll
                        for (int e = 0; e < V; ++e) {
                            const int j = VF > 1 ? e : 0;
                            v[e] = ((v[e] - c_shift[j]) - c_offset[j]) * c_factor[j] + c_bias[j];
                        }
                        store_values<T, V>(y + cursor.offset[1], v, args.alpha, args.beta);
                        cursor.advance(layout.reduce);
                    }
            } else {
                normalize_share<T, Rank, VR, VF>(x, y, layout, share, c_shift, c_offset, c_factor, c_bias,
                                                 args.alpha, args.beta);
            }
        }
        __syncthreads();  // coef and the buffers are reused by the next item
    }
}

// ---- backward ----------------------------------------------------------------

// One item of the backward (see the file's comment).  Kept out of line:
// inlined into the kernel's item loop, the loop-invariant branches (saved
// statistics, one split) made the compiler copy the body for each
// combination, for minutes per instance.
template <typename T, typename G, typename C, int Rank, int VR, int VF, int Cache>
__device__ __noinline__ void backward_item(const T* x, const G* dy, G* dx, const BnLayout& layout,
                                           const BackwardArgs& args, const EngineScratch& scratch,
                                           const GridBarrier& barrier, std::int64_t item, ReduceBuffer& buffer,
                                           BackpropCoefficients* coef, double* shift_buffer) {
    using A = acc_t<T>;
    constexpr int V = VR * VF;
    const std::int64_t features = layout.feature.size;
    const BlockPlace place{item % layout.tiles, item / layout.tiles};
    const ThreadShare share = thread_share<VF>(layout, place);
    const int count = run_length(share.first, share.end, layout.rows);
    const std::int64_t first = place.tile * layout.tile_features * VF;
    const bool writer = threadIdx.y == 0 && share.active;
    Pack<T, V> px[Cache > 0 ? Cache : 1];
    Pack<G, V> pg[Cache > 0 ? Cache : 1];
    std::int64_t base[3] = {0, 0, 0};
    if (share.active) nest_offsets<3>(layout.feature, share.feature0, kSlotX, base);
    if constexpr (Cache > 0) {
        if (share.active) {
            NestCursor<Rank, 2> cursor;
            cursor.start(layout.reduce, share.first, layout.rows, {base[0], base[1]});
            load_run<Cache, V>(x, dy, layout.reduce, cursor, count, px, pg);
        }
    }

    // The statistics: saved, or recomputed from x.
    if (args.saved_mean.present()) {
        if (writer)
#pragma unroll
            for (int j = 0; j < VF; ++j) {
                std::int64_t at[2];
                nest_offsets<2>(layout.feature, share.feature0 + j, kBwdSavedMean, at);
                coef[threadIdx.x * VF + j].center = args.saved_mean.load(at[0]);
                coef[threadIdx.x * VF + j].inv_std = args.saved_inv_std.load(at[1]);
            }
        __syncthreads();
    } else {
        ShiftedMoments<A> total[VF];
        double shift[VF];
        share_moments<T, Rank, VR, VF, Cache>(x, layout, share, px, count, total, shift, buffer);
        const double m = static_cast<double>(layout.reduction_size());
        hand_over_moments<A, VF>(
            layout, share, place, total, shift, scratch, barrier, shift_buffer, buffer,
            [&](int f, double feature_shift, const ShiftedMoments<double>& merged) {
                const FeatureStatistics s = finish_statistics(merged, m, args.epsilon);
                coef[f].center = feature_shift + s.mean_offset;
                coef[f].inv_std = s.inv_std;
            },
            [&](std::int64_t feature, int, double feature_shift, const ShiftedMoments<double>& merged) {
                const FeatureStatistics s = finish_statistics(merged, m, args.epsilon);
                *final_of(scratch, feature, 0) = feature_shift + s.mean_offset;
                *final_of(scratch, feature, 1) = s.inv_std;
            },
            [&](std::int64_t feature, int f) {
                coef[f].center = load_after_barrier(final_of(scratch, feature, 0));
                coef[f].inv_std = load_after_barrier(final_of(scratch, feature, 1));
            });
    }

    // sum(dy) and sum(dy (x - mean)) in double, about the exact mean.
    double center[VF];
#pragma unroll
    for (int j = 0; j < VF; ++j) center[j] = share.active ? coef[threadIdx.x * VF + j].center : 0.0;
    Sums2<double> sums[VF];
    if constexpr (Cache > 0) {
        Sums2<double> own[VF];
#pragma unroll
        for (int j = 0; j < VF; ++j) own[j] = Sums2<double>{0.0, 0.0};
#pragma unroll
        for (int k = 0; k < Cache; ++k)
            if (k < count) {
                double xv[V], g[V];
                widen_pack<double, V>(px[k], xv);
                widen_pack<double, V>(pg[k], g);
#pragma unroll
                for (int e = 0; e < V; ++e) {
                    const int j = VF > 1 ? e : 0;
                    own[j].a += g[e];
                    own[j].b += g[e] * (xv[e] - center[j]);
                }
            }
#pragma unroll
        for (int j = 0; j < VF; ++j) sums[j] = reduce_over_rows(own[j], buffer.sums);
    } else {
        block_gradient_sums<T, G, Rank, VR, VF>(x, dy, layout, share, center, sums, buffer.sums);
    }

    // dscale, dbias and the backprop coefficients of each feature (written by
    // the one block that finishes the feature).
    auto finish = [&](int f, const Sums2<double>& s) {
        const std::int64_t feature = first + f;
        BackpropCoefficients& c = coef[f];
        std::int64_t at[3];
        nest_offsets<3>(layout.feature, feature, kBwdScale, at);
        const double sum_dy_xhat = s.b * c.inv_std;
        args.dscale.store_blended(at[kBwdDscale - kBwdScale], sum_dy_xhat, args.param.alpha, args.param.beta);
        args.dbias.store_blended(at[kBwdDbias - kBwdScale], s.a, args.param.alpha, args.param.beta);
        const double m = static_cast<double>(layout.reduction_size());
        c.coef0 = args.scale.load(at[0]) * c.inv_std;
        c.coef1 = s.a / m;
        c.coef2 = sum_dy_xhat / m;
    };
    if (layout.splits == 1) {
        if (writer)
#pragma unroll
            for (int j = 0; j < VF; ++j) finish(threadIdx.x * VF + j, sums[j]);
        __syncthreads();
    } else {
        if (writer)
#pragma unroll
            for (int j = 0; j < VF; ++j) {
                const std::int64_t at = place.split * features + share.feature0 + j;
                scratch.dy_sum[at] = sums[j].a;
                scratch.dy_x_sum[at] = sums[j].b;
            }
        grid_barrier(barrier);
        const int tile = layout.tile_features * VF;
        merge_owned_splits(
            tile, layout.splits, static_cast<int>(place.split), Sums2<double>{0.0, 0.0},
            [&](int f, int s) {
                if (first + f >= features) return Sums2<double>{0.0, 0.0};
                const std::int64_t at = static_cast<std::int64_t>(s) * features + first + f;
                return Sums2<double>{load_after_barrier(scratch.dy_sum + at), load_after_barrier(scratch.dy_x_sum + at)};
            },
            [&](int f, const Sums2<double>& merged) {
                if (first + f >= features) return;
                finish(f, merged);
                const BackpropCoefficients& c = coef[f];
                *final_of(scratch, first + f, 2) = c.coef0;
                *final_of(scratch, first + f, 3) = c.coef1;
                *final_of(scratch, first + f, 4) = c.coef2;
            },
            buffer.sums);
        grid_barrier(barrier);
        for (int f = flat_thread_index(); f < tile; f += static_cast<int>(blockDim.x * blockDim.y))
            if (first + f < features) {
                coef[f].coef0 = load_after_barrier(final_of(scratch, first + f, 2));
                coef[f].coef1 = load_after_barrier(final_of(scratch, first + f, 3));
                coef[f].coef2 = load_after_barrier(final_of(scratch, first + f, 4));
            }
        __syncthreads();
    }

    // dx.
    if (share.active) {
        BackpropCoefficients c[VF];
#pragma unroll
        for (int j = 0; j < VF; ++j) c[j] = coef[threadIdx.x * VF + j];
        if constexpr (Cache > 0) {
            BackpropFactors<C> f[VF];
#pragma unroll
            for (int j = 0; j < VF; ++j) f[j] = backprop_factors<C>(c[j]);
            NestCursor<Rank, 3> cursor;
            cursor.start(layout.reduce, share.first, layout.rows, base);
#pragma unroll
            for (int k = 0; k < Cache; ++k)
                if (k < count) {
                    C xv[V], g[V];
                    widen_pack<C, V>(px[k], xv);
                    widen_pack<C, V>(pg[k], g);
                    backprop_values<V, VF, C>(f, xv, g);
                    store_values<G, V>(dx + cursor.offset[2], g, args.alpha, args.beta);
                    cursor.advance(layout.reduce);
                }
        } else {
            backprop_share<T, G, C, Rank, VR, VF>(x, dy, dx, layout, share, c, args.alpha, args.beta);
        }
    }
}

template <typename T, typename G, typename C, int Rank, int VR, int VF, int Cache>
__global__ void __launch_bounds__(kBlockThreads)
    bn_backward_engine(const T* x, const G* dy, G* dx, const MBN_GRID_CONSTANT BnLayout layout,
                       const MBN_GRID_CONSTANT BackwardArgs args, const MBN_GRID_CONSTANT EngineScratch scratch,
                       const MBN_GRID_CONSTANT GridBarrier barrier) {
    __shared__ ReduceBuffer buffer;
    __shared__ BackpropCoefficients coef[kBlockThreads];
    __shared__ double shift_buffer[kBlockThreads];
    const std::int64_t items = layout.tiles * layout.splits;
    for (std::int64_t item = blockIdx.x; item < items; item += gridDim.x) {
        backward_item<T, G, C, Rank, VR, VF, Cache>(x, dy, dx, layout, args, scratch, barrier, item, buffer, coef,
                                                    shift_buffer);
        __syncthreads();  // coef and the buffers are reused by the next item
    }
}

// ---- host side -------------------------------------------------------------------

// Blocks of `kernel` resident on one multiprocessor, asked of the runtime
// once per kernel instance and block size.
template <typename Kernel>
std::int64_t resident_blocks(Kernel kernel, int block_threads, const DeviceShape& device) {
    static std::mutex mutex;
    static std::map<std::pair<const void*, int>, int> known;
    const auto key = std::make_pair(reinterpret_cast<const void*>(kernel), block_threads);
    int per_multiprocessor = 0;
    {
        std::lock_guard<std::mutex> lock(mutex);
        const auto found = known.find(key);
        if (found != known.end()) {
            per_multiprocessor = found->second;
        } else {
            check_runtime(hipOccupancyMaxActiveBlocksPerMultiprocessor(&per_multiprocessor, kernel, block_threads, 0),
                          "hipOccupancyMaxActiveBlocksPerMultiprocessor");
            known.emplace(key, per_multiprocessor);
        }
    }
    return static_cast<std::int64_t>(per_multiprocessor) * device.multiprocessors;
}

dim3 engine_block(const BnLayout& layout) {
    return dim3(static_cast<unsigned>(layout.tile_features), static_cast<unsigned>(layout.rows));
}

// Calls body(TypeTag<T>, cached_kernel, streamed_kernel) with the training
// kernel instances of the call's types and walk shape.
template <typename Body>
void with_training_kernels(const BnForwardTraining& p, const BnLayout& layout, Body&& body) {
    with_element_type(p.x.dtype, [&](auto x_tag) {
        using T = typename decltype(x_tag)::type;
        with_walk_shape_of<T>(layout, [&](auto rank, auto vr, auto vf) {
            constexpr int R = decltype(rank)::value, VR = decltype(vr)::value, VF = decltype(vf)::value;
            body(x_tag, &bn_training_engine<T, R, VR, VF, kTrainingCache>, &bn_training_engine<T, R, VR, VF, 0>);
        });
    });
}

// Calls body(TypeTag<T>, TypeTag<G>, cached_kernel, streamed_kernel) likewise.
template <typename Body>
void with_backward_kernels(const BnBackward& p, const BnLayout& layout, Body&& body) {
    const bool float_math = layout.reduction_size() >= kFloatBackpropMinCount;
    with_element_type(p.x.dtype, [&](auto x_tag) {
        using T = typename decltype(x_tag)::type;
        with_gradient_type<T>(p.x.dtype, p.dy.dtype, [&](auto g_tag) {
            using G = typename decltype(g_tag)::type;
            with_backprop_type<T>(float_math, [&](auto c_tag) {
                using C = typename decltype(c_tag)::type;
                with_walk_shape_of<T, G>(layout, [&](auto rank, auto vr, auto vf) {
                    constexpr int R = decltype(rank)::value, VR = decltype(vr)::value, VF = decltype(vf)::value;
                    body(x_tag, g_tag, &bn_backward_engine<T, G, C, R, VR, VF, kBackwardCache>,
                         &bn_backward_engine<T, G, C, R, VR, VF, 0>);
                });
            });
        });
    });
}

template <typename Kernel>
EnginePlan plan_for(Kernel cached_kernel, Kernel streamed_kernel, const BnLayout& layout, int cache_positions,
                    const DeviceShape& device) {
    const int threads = layout.tile_features * layout.rows;
    const EngineCapacity capacity{resident_blocks(cached_kernel, threads, device),
                                  resident_blocks(streamed_kernel, threads, device), cache_positions};
    return plan_engine(layout, capacity);
}

bool is_cached(const EnginePlan& plan) {
    return plan.algorithm == EngineAlgorithm::single_cached || plan.algorithm == EngineAlgorithm::split_cached;
}

}  // namespace

EnginePlan plan_forward_training(const BnForwardTraining& p, const BnLayout& layout, const DeviceShape& device) {
    EnginePlan plan{};
    with_training_kernels(p, layout, [&](auto, auto cached_kernel, auto streamed_kernel) {
        plan = plan_for(cached_kernel, streamed_kernel, layout, kTrainingCache, device);
    });
    return plan;
}

EnginePlan plan_backward(const BnBackward& p, const BnLayout& layout, const DeviceShape& device) {
    EnginePlan plan{};
    with_backward_kernels(p, layout, [&](auto, auto, auto cached_kernel, auto streamed_kernel) {
        plan = plan_for(cached_kernel, streamed_kernel, layout, kBackwardCache, device);
    });
    return plan;
}

void run_forward_training(const BnForwardTraining& p, const EnginePlan& plan, const LaunchTarget& target) {
    const TrainingArgs args{param_ref(p.scale),         param_ref(p.bias),       param_ref(p.running_mean),
                            param_ref(p.running_var),   param_ref(p.saved_mean), param_ref(p.saved_inv_std),
                            p.epsilon,                  p.exp_avg_factor,        p.out.alpha,
                            p.out.beta};
    const EngineScratch scratch = carve_engine_scratch(target.scratch, plan.layout);
    with_training_kernels(p, plan.layout, [&](auto x_tag, auto cached_kernel, auto streamed_kernel) {
        using T = typename decltype(x_tag)::type;
        const auto kernel = is_cached(plan) ? cached_kernel : streamed_kernel;
        kernel<<<plan.grid, engine_block(plan.layout), 0, target.stream>>>(
            static_cast<const T*>(p.x.data), static_cast<T*>(p.y.data), plan.layout, args, scratch,
            target.barrier);
        check_launch(algorithm_name(plan.algorithm));
    });
}

void run_backward(const BnBackward& p, const EnginePlan& plan, const LaunchTarget& target) {
    const BackwardArgs args{param_ref(p.scale),      param_ref(p.dscale),        param_ref(p.dbias),
                            param_ref(p.saved_mean), param_ref(p.saved_inv_std), p.epsilon,
                            p.param,                 p.data.alpha,               p.data.beta};
    const EngineScratch scratch = carve_engine_scratch(target.scratch, plan.layout);
    with_backward_kernels(p, plan.layout, [&](auto x_tag, auto g_tag, auto cached_kernel, auto streamed_kernel) {
        using T = typename decltype(x_tag)::type;
        using G = typename decltype(g_tag)::type;
        const auto kernel = is_cached(plan) ? cached_kernel : streamed_kernel;
        kernel<<<plan.grid, engine_block(plan.layout), 0, target.stream>>>(
            static_cast<const T*>(p.x.data), static_cast<const G*>(p.dy.data), static_cast<G*>(p.dx.data),
            plan.layout, args, scratch, target.barrier);
        check_launch(algorithm_name(plan.algorithm));
    });
}

}  // namespace gpu
}  // namespace mbn
