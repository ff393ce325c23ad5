// The walks of the slices backward (gn_backward.hip): gn_backward_slices
// (per (split, slice) sums of g and g * xhat) and gn_backward_apply (dx),
// with what they share.  A header so that the emulator check
// (tests/gpu/emulation/gn_slices_backward_check.cpp) runs the same kernels;
// included by gn_backward.hip alone besides it, hence the unnamed namespace.
#pragma once

#include "gpu/block_reduce.h"
#include "gpu/dependent_launch.h"
#include "gpu/feature_share.h"
#include "gpu/gn_activation.h"
#include "gpu/gn_backward_finalize.h"
#include "gpu/gn_launch.hpp"
#include "gpu/gn_packed_walk.h"
#include "gpu/gn_planner.hpp"
#include "gpu/gn_scratch.hpp"
#include "gpu/gn_slices.h"
#include "gpu/gn_stat_io.h"
#include "gpu/gn_tile.hpp"
#include "gpu/nest_walk.h"
#include "gpu/norm_math.h"
#include "gpu/type_dispatch.hpp"

#include <cstdint>
#include <type_traits>

namespace mbn {
namespace gpu {
namespace {

template <typename P>
struct GnBackwardArgs {
    GnSliceOrder order;  // with the group shape
    GnParamGradients<P> params;
    const P* bias;  // nullptr: b = 0 (only the activation needs it)
    std::int64_t bias_stride;
    GnStatTensor mean;
    GnStatTensor rstd;
    float swish_beta;  // read by the swish instances only
    GnBackwardScratch scratch;
};

// What every element of a slice shares.  The bias is the activation's
// alone (left 0 without it); the weight the slices read only under the
// activation, apply always.
template <typename A>
struct GnSlice : GnSlicePlace {
    A mean, rstd, weight, bias;
};

template <typename A, bool Swish, typename P>
__device__ GnSlice<A> slice_of(const GnBackwardArgs<P>& a, const GnSlicePlace& place) {
    GnSlice<A> s;
    static_cast<GnSlicePlace&>(s) = place;
    s.mean = static_cast<A>(read_stat(a.mean, s.n, s.g));
    s.rstd = static_cast<A>(read_stat(a.rstd, s.n, s.g));
    s.weight = a.params.weight != nullptr ? static_cast<A>(widen(a.params.weight[s.c * a.params.weight_stride])) : A(1);
    s.bias = Swish && a.bias != nullptr ? static_cast<A>(widen(a.bias[s.c * a.bias_stride])) : A(0);
    return s;
}

template <typename A, bool Swish, typename P>
__device__ GnSlice<A> slice_at(const GnBackwardArgs<P>& a, std::int64_t slice) {
    return slice_of<A, Swish>(a, slice_place(a.order, slice));
}

// xhat and the pre-activation gradient g of one element.  Swish is a
// template parameter: the instances without it hold none of its state
// (bias, beta, the derivative's temporaries), which under a runtime branch
// cost the slices 8-15 registers and a block a multiprocessor.
template <bool Swish, typename A, typename P>
__device__ __forceinline__ void element_gradient(const GnBackwardArgs<P>& a, const GnSlice<A>& s, A x, A dy, A& xhat,
                                                 A& g) {
    xhat = (x - s.mean) * s.rstd;
    if constexpr (Swish)
        g = dy * swish_derivative(xhat * s.weight + s.bias, static_cast<A>(a.swish_beta));
    else
        g = dy;
}

// What dx of a slice's elements needs: the slice, and its group's means of
// w g and w g xhat (the finalize's group terms).
template <typename E>
struct GnSliceTerms {
    GnSlice<E> s;
    E mean_wg, mean_wg_xhat;
};

template <typename E, bool Swish, typename P>
__device__ __forceinline__ GnSliceTerms<E> slice_terms_of(const GnBackwardArgs<P>& a, const GnSlicePlace& place) {
    GnSliceTerms<E> t;
    t.s = slice_of<E, Swish>(a, place);
    const double* terms = a.scratch.group_terms + t.s.group * kGnGroupTerms;
    t.mean_wg = static_cast<E>(terms[0]);
    t.mean_wg_xhat = static_cast<E>(terms[1]);
    return t;
}

template <typename E, bool Swish, typename P>
__device__ __forceinline__ GnSliceTerms<E> slice_terms_at(const GnBackwardArgs<P>& a, std::int64_t slice) {
    return slice_terms_of<E, Swish>(a, slice_place(a.order, slice));
}

// The terms of L consecutive channels of one sample from `slice` on (the
// lanes of a channels-inner vector; C / W whole vectors a row, so never past
// the sample): one slice_place, then steps through the groups.
template <typename E, bool Swish, int L, typename P>
__device__ __forceinline__ void lane_terms_at(const GnBackwardArgs<P>& a, std::int64_t slice,
                                              GnSliceTerms<E> (&t)[L]) {
    GnSlicePlace place = slice_place(a.order, slice);
    const std::int64_t channels = a.order.shape.channels;
    std::int64_t k = place.c - place.g * channels;  // the channel within its group
#pragma unroll
    for (int j = 0; j < L; ++j) {
        t[j] = slice_terms_of<E, Swish>(a, place);
        ++place.c;
        if (++k == channels) {
            k = 0;
            ++place.g;
            ++place.group;
        }
    }
}

// dx of one element: rstd (w g - mean(w g) - xhat mean(w g xhat)).
template <bool Swish, typename E, typename P>
__device__ __forceinline__ E element_dx(const GnBackwardArgs<P>& a, const GnSliceTerms<E>& t, E x, E dy) {
    E xhat, g;
    element_gradient<Swish>(a, t.s, x, dy, xhat, g);
    return t.s.rstd * ((t.s.weight * g - t.mean_wg) - xhat * t.mean_wg_xhat);
}

// Positions a thread sums in E before adding into its double partials: 8
// to 16 values of each input (the numerics of the sums).
template <int V>
__host__ __device__ constexpr int batch_positions() {
    return V >= 4 ? 2 : 8 / V;
}

// Positions a thread loads together, a whole number of batches: on a walk
// of rank 1 (the packed layouts; LinearCursor) about 64 bytes of each input;
// one batch elsewhere, where NestCursor keeps every position's offset.
// With several features a thread (NHWC) on the linear walk in float 32
// bytes: the per-slice state took 88-108 registers at 64 (slices_min_blocks
// below).
template <typename T, typename E, int Rank, int VF, int V>
__host__ __device__ constexpr int load_positions() {
    constexpr int bytes = VF > 1 && linear_walk_min_blocks<E, Rank>() > 0 ? 32 : 64;
    if constexpr (Rank == 1)
        return linear_load_positions<T, V, bytes, batch_positions<V>()>();
    else
        return batch_positions<V>();
}

// Loads x and dy of the thread's next positions r, r + step, ... (those
// below end, at most kBatch) as stored, and advances the cursor past them;
// `at` gets each position's offset in the cursor's last slot.  The values
// are widened where they are used: widened here, the compiler kept them
// widened, twice the registers for half and bfloat16.
template <int kBatch, int V, typename Cursor, typename T>
__device__ __forceinline__ void load_batch(const T* x, const T* dy, const LoopNest& reduce,
                                           Cursor& cursor, std::int64_t r, std::int64_t step,
                                           std::int64_t end, Pack<T, V> (&xv)[kBatch], Pack<T, V> (&dyv)[kBatch],
                                           std::int64_t (&at)[kBatch]) {
    constexpr int kSlots = static_cast<int>(std::extent<decltype(Cursor::offset)>::value);
#pragma unroll
    for (int k = 0; k < kBatch; ++k) {
        if (r + k * step >= end) continue;
        xv[k] = load_pack<V>(x + cursor.offset[0]);
        dyv[k] = load_pack<V>(dy + cursor.offset[1]);
        at[k] = cursor.offset[kSlots - 1];
        cursor.advance(reduce);
    }
}

// Blocks of 256 threads a multiprocessor gn_backward_slices asks for.  With
// one slice a thread on the linear walk (NCHW-like planes) a block's 256
// rows each load a few positions and then wait on the rows' reduction: the
// kernel waits on latency, not bandwidth (1x1280x64x64 bfloat16 on the
// H200: 72 registers, three blocks, 34% occupancy, 29.5% of DRAM, its 1280
// blocks 3.2 rounds of resident ones).  The most that fit without stack
// (sm_90 SASS, 64 registers for four blocks, 80 for three): without the
// activation four, but three for bfloat16 with several slices a thread (8
// bytes of stack at four); with it four for one element a position, three
// for 8-element vectors (48 bytes of stack at four), and three with several
// slices a thread though that takes up to 24 bytes of stack: at two blocks
// (no stack) the swish backward channels-last ran 4-7% slower on its large
// rows (H200, run87: 1x1280x64x64 fp32 56.8 -> 61.3 us).
template <typename T, typename E, int Rank, int VR, int VF, bool Swish>
__host__ __device__ constexpr int slices_min_blocks() {
    if (Rank != 1 || sizeof(E) > 4) return linear_walk_min_blocks<E, Rank>();
    if (!Swish) return VF > 1 && std::is_same<T, mbn_bfloat16>::value ? 3 : 4;
    if (VF > 1) return 3;
    return VR >= 8 ? 3 : 4;
}

// Blocks gn_backward_apply asks for: as the slices without the activation
// (four on the linear walk in float), linear_walk_min_blocks with it.
template <typename E, int Rank, bool Swish>
__host__ __device__ constexpr int apply_min_blocks() {
    return !Swish && Rank == 1 && sizeof(E) <= 4 ? 4 : linear_walk_min_blocks<E, Rank>();
}

// Launched as the layout says: blockDim = (tile_features, rows), gridDim =
// (tiles, splits); thread (tx, ty) owns slices from (bx * tile_features +
// tx) * VF on (feature_layout.hpp).  E: the type of xhat in g * xhat and of
// dx's arithmetic (with_exact_type below): double in small float32 groups,
// where dx cancels (two values: xhat = +-1 up to epsilon) and float rounding
// of xhat in mean(w g xhat) would dominate it; A elsewhere.  A thread sums
// each batch in E, then into double.
template <typename T, typename P, typename A, typename E, int Rank, int VR, int VF, bool Swish>
__global__ void __launch_bounds__(kBlockThreads, (slices_min_blocks<T, E, Rank, VR, VF, Swish>()))
    gn_backward_slices(const T* x, const T* dy, FeatureLayout layout, GnBackwardArgs<P> a) {
    constexpr int V = VR * VF;
    constexpr int kBatch = batch_positions<V>();
    constexpr int kLoad = load_positions<T, E, Rank, VF, V>();
    static_assert(kLoad % kBatch == 0, "whole batches");
    __shared__ Sums2<double> shared[VF][kBlockThreads];
    allow_dependent_launch();  // the finalize
    const std::int64_t slices = layout.feature.size;
    const std::int64_t slice0 = (static_cast<std::int64_t>(blockIdx.x) * layout.tile_features + threadIdx.x) * VF;
    const std::int64_t begin = static_cast<std::int64_t>(blockIdx.y) * layout.chunk;
    const std::int64_t end = min64(layout.reduce.size, begin + layout.chunk);
    const std::int64_t step = layout.rows;

    Sums2<double> sums[VF];
#pragma unroll
    for (int j = 0; j < VF; ++j) sums[j] = Sums2<double>{0.0, 0.0};
    if (slice0 < slices) {
        GnSlice<E> s[VF];
#pragma unroll
        for (int j = 0; j < VF; ++j) s[j] = slice_at<E, Swish>(a, slice0 + j);
        std::int64_t base[2];
        nest_offsets<2>(layout.feature, slice0, kSlotX, base);
        std::int64_t r = begin + threadIdx.y;
        ReduceCursor<Rank, 2> cursor;
        cursor.start(layout.reduce, r, step, base);
        for (; r < end; r += kLoad * step) {
            Pack<T, V> xp[kLoad], dyp[kLoad];
            std::int64_t at[kLoad];
            load_batch(x, dy, layout.reduce, cursor, r, step, end, xp, dyp, at);
            // Batches of kBatch positions, each summed in E and then into
            // double: the same sums, in the same order, whatever kLoad.
#pragma unroll
            for (int k0 = 0; k0 < kLoad; k0 += kBatch) {
                if (r + k0 * step >= end) continue;
                Sums2<E> batch[VF];
#pragma unroll
                for (int j = 0; j < VF; ++j) batch[j] = Sums2<E>{E(0), E(0)};
#pragma unroll
                for (int k = k0; k < k0 + kBatch; ++k) {
                    if (r + k * step >= end) continue;
                    A xv[V], dyv[V];
                    widen_pack<A, V>(xp[k], xv);
                    widen_pack<A, V>(dyp[k], dyv);
#pragma unroll
                    for (int e = 0; e < V; ++e) {
                        const int j = VF > 1 ? e : 0;
                        E xhat, g;
                        element_gradient<Swish>(a, s[j], static_cast<E>(xv[e]), static_cast<E>(dyv[e]), xhat, g);
                        batch[j].a += g;
                        batch[j].b += g * xhat;
                    }
                }
#pragma unroll
                for (int j = 0; j < VF; ++j) {
                    sums[j].a += static_cast<double>(batch[j].a);
                    sums[j].b += static_cast<double>(batch[j].b);
                }
            }
        }
    }
    // One barrier a level for all VF slices: shared[j] holds slice j of
    // every thread, a level's accesses 16 bytes apart.
    reduce_each_over_rows(sums, &shared[0][0], kBlockThreads);
#pragma unroll
    for (int j = 0; j < VF; ++j) {
        if (threadIdx.y == 0 && slice0 + j < slices) {
            const std::int64_t at = static_cast<std::int64_t>(blockIdx.y) * slices + slice0 + j;
            a.scratch.sum_g[at] = sums[j].a;
            a.scratch.sum_g_xhat[at] = sums[j].b;
        }
    }
}

// dx, per element of each slice, its blocks in the reverse of the sums'
// order (feature_share.h: the sums' last blocks left x and dy in L2).  dx
// may be dy or x (in place): each thread reads a batch of positions before
// writing them.
template <typename T, typename P, typename A, typename E, int Rank, int VR, int VF, bool Swish>
__global__ void __launch_bounds__(kBlockThreads, (apply_min_blocks<E, Rank, Swish>()))
    gn_backward_apply(const T* x, const T* dy, T* dx, FeatureLayout layout, GnBackwardArgs<P> a) {
    constexpr int V = VR * VF;
    constexpr int kLoad = load_positions<T, E, Rank, VF, V>();
    const ThreadShare share = thread_share<VF>(layout, second_pass_place());
    if (!share.active) return;
    wait_for_prior_kernel();  // the finalize's group terms (a dependent launch)
    const std::int64_t slice0 = share.feature0;
    const std::int64_t end = share.end;
    const std::int64_t step = layout.rows;
    // g and dx in E, as the sums (double where dx cancels in small groups;
    // gn_backward_slices).
    GnSliceTerms<E> t[VF];
#pragma unroll
    for (int j = 0; j < VF; ++j) t[j] = slice_terms_at<E, Swish>(a, slice0 + j);

    std::int64_t base[3];
    nest_offsets<3>(layout.feature, slice0, kSlotX, base);
    std::int64_t r = share.first;
    ReduceCursor<Rank, 3> cursor;
    cursor.start(layout.reduce, r, step, base);
    for (; r < end; r += kLoad * step) {
        Pack<T, V> xp[kLoad], dyp[kLoad];
        std::int64_t at[kLoad];
        const std::int64_t dx0 = cursor.offset[2];
        load_batch(x, dy, layout.reduce, cursor, r, step, end, xp, dyp, at);
#pragma unroll
        for (int k = 0; k < kLoad; ++k) {
            if (r + k * step >= end) continue;
            // The linear walk's offsets again from the batch's first, not
            // kept in registers from the loads to the stores.
            if constexpr (Rank == 1) at[k] = dx0 + k * cursor.delta[2];
            A xv[V], dyv[V];
            widen_pack<A, V>(xp[k], xv);
            widen_pack<A, V>(dyp[k], dyv);
            E out[V];
#pragma unroll
            for (int e = 0; e < V; ++e)
                out[e] = element_dx<Swish>(a, t[VF > 1 ? e : 0], static_cast<E>(xv[e]), static_cast<E>(dyv[e]));
            store_values<T, V>(dx + at[k], out, 1.0f, 0.0f);
        }
    }
}

// dx over packed x, dy and dx (GnPackedWalk): the walk of the forward's
// packed normalize (gn_packed_normalize.h) with apply's arithmetic.  Each
// thread takes walk.batches batches of K vectors (packed_first_vector,
// blocks in the reverse of the sums' order), a batch's x and dy loaded
// before any is used (the first batch's before the group terms are
// awaited: neither input is an earlier kernel's output).  Positions inner
// a vector is one slice; channels inner (kInner) its W lanes are W
// channels of one position, the same W for every vector of a thread
// (walk.threads holds whole rows of C / W vectors), so a thread finds its
// lanes' terms once a sample.  dx may be x or dy: each thread reads a
// batch's vectors before it writes them.
template <typename T, typename P, typename A, typename E, bool Swish, bool kInner>
__global__ void __launch_bounds__(kPackedWalkMostThreads)
    gn_backward_packed_apply(const T* x, const T* dy, T* dx, GnPackedWalk walk, GnBackwardArgs<P> a) {
    constexpr int W = static_cast<int>(16 / sizeof(T));
    constexpr int K = kPackedWalkBatch;
    constexpr int L = kInner ? W : 1;  // term sets a vector needs
    const int threads = static_cast<int>(blockDim.x);
    int held = -1;  // the slice of lane 0 whose terms t hold
    GnSliceTerms<E> t[L];
    for (int batch = 0; batch < walk.batches; ++batch) {
        const int first = packed_first_vector(walk) + batch * K * threads;
        if (first >= walk.vectors) break;
        Pack<T, W> xp[K], dyp[K];
#pragma unroll
        for (int k = 0; k < K; ++k) {
            const int v = first + k * threads;
            if (v < walk.vectors) {
                xp[k] = load_pack<W>(x + static_cast<std::int64_t>(v) * W);
                dyp[k] = load_pack<W>(dy + static_cast<std::int64_t>(v) * W);
            }
        }
        if (batch == 0) wait_for_prior_kernel();  // the finalize's group terms
#pragma unroll
        for (int k = 0; k < K; ++k) {
            const int v = first + k * threads;
            if (v >= walk.vectors) MBN_UNROLLED_EXIT;
            const int slice = packed_slice(walk, v, W);
            if (slice != held) {
                held = slice;
                lane_terms_at<E, Swish>(a, slice, t);
            }
            A xv[W], dyv[W];
            widen_pack<A, W>(xp[k], xv);
            widen_pack<A, W>(dyp[k], dyv);
            E out[W];
#pragma unroll
            for (int e = 0; e < W; ++e)
                out[e] = element_dx<Swish>(a, t[L == W ? e : 0], static_cast<E>(xv[e]), static_cast<E>(dyv[e]));
            store_values<T, W>(dx + static_cast<std::int64_t>(v) * W, out, 1.0f, 0.0f);
        }
    }
}

// Calls body(TypeTag<E>) with E the slices' element precision: double for
// double data and for float32 groups under kGnTileExactGroup values (the
// rule of the on-chip backward, gn_tile.hpp), else acc_t<T>.
template <typename T, typename Body>
void with_exact_type(std::int64_t group_size, Body&& body) {
    if constexpr (!std::is_same<T, float>::value) {
        (void)group_size;
        body(TypeTag<acc_t<T>>{});
    } else if (group_size < kGnTileExactGroup) {
        body(TypeTag<double>{});
    } else {
        body(TypeTag<float>{});
    }
}

// The kernels and arguments of one call of the slices backward: calls
// launch(slices, apply, packed_apply, a, finalize, x, dy, dx) once, slices
// and apply the instances of the call's types, walk shape
// (with_linear_walk_shape_of) and activation, packed_apply apply's on the
// packed walk (plan.packed, its instance for the walk's order), a their
// arguments and finalize the planned finalize's (gn_backward_finalize.h),
// run between the two.  The activation is dispatched here, once: each
// kernel exists with and without swish.
template <typename Launch>
void with_backward_walks(const GnBackward& p, const GnSlicePlan& plan, void* scratch, Launch&& launch) {
    const FeatureLayout& layout = plan.layout;
    with_element_type(p.x.dtype, [&](auto x_tag) {
        using T = typename decltype(x_tag)::type;
        using A = acc_t<T>;
        const DType param_dtype = p.affine ? p.weight.dtype : DType::f32;
        with_parameter_type<T>(param_dtype, [&](auto p_tag) {
            using P = typename decltype(p_tag)::type;
            GnBackwardArgs<P> a{};
            a.order = plan.order;
            if (p.affine) {
                a.params.weight = static_cast<const P*>(p.weight.data);
                a.params.weight_stride = p.weight.stride[kC];
                a.params.dweight = static_cast<P*>(p.dweight.data);
                a.params.dweight_stride = p.dweight.stride[kC];
                a.params.dbias = static_cast<P*>(p.dbias.data);
                a.params.dbias_stride = p.dbias.stride[kC];
                if (p.bias.present()) {
                    a.bias = static_cast<const P*>(p.bias.data);
                    a.bias_stride = p.bias.stride[kC];
                }
            }
            a.mean = stat_tensor(p.mean);
            a.rstd = stat_tensor(p.rstd);
            a.swish_beta = p.swish_beta;
            a.scratch = carve_backward_scratch(scratch, layout.feature.size, layout.splits);
            GnFinalizeArgs<P> finalize{};
            finalize.order = a.order;
            finalize.slices = layout.feature.size;
            finalize.splits = layout.splits;
            finalize.params = a.params;
            finalize.scratch = a.scratch;
            plan_finalize(finalize);
            const T* x = static_cast<const T*>(p.x.data);
            const T* dy = static_cast<const T*>(p.dy.data);
            T* dx = static_cast<T*>(p.dx.data);
            with_exact_type<T>(a.order.shape.size, [&](auto exact_tag) {
                using E = typename decltype(exact_tag)::type;
                with_linear_walk_shape_of<T>(layout, [&](auto rank, auto vr, auto vf) {
                    constexpr int kRank = decltype(rank)::value;
                    constexpr int kVr = decltype(vr)::value;
                    constexpr int kVf = decltype(vf)::value;
                    auto with_activation = [&](auto swish) {
                        constexpr bool kSwish = decltype(swish)::value;
                        launch(gn_backward_slices<T, P, A, E, kRank, kVr, kVf, kSwish>,
                               gn_backward_apply<T, P, A, E, kRank, kVr, kVf, kSwish>,
                               plan.packed.channels_inner ? gn_backward_packed_apply<T, P, A, E, kSwish, true>
                                                          : gn_backward_packed_apply<T, P, A, E, kSwish, false>,
                               a, finalize, x, dy, dx);
                    };
                    if (p.activation == Activation::swish)
                        with_activation(std::true_type{});
                    else
                        with_activation(std::false_type{});
                });
            });
        });
    });
}

}  // namespace
}  // namespace gpu
}  // namespace mbn
