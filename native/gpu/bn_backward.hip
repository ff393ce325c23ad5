// Backward batch norm, with xhat = ((x - shift) - mean_offset) * inv_std:
//   1. statistics: from savedMean / savedInvVariance (bn_saved_statistics),
//      or recomputed from x (run_batch_statistics);
//   2. bn_backward_partial: per (split, feature) sums of dy and dy * (x - mean);
//   3. bn_backward_finalize: per feature, adds the splits in a fixed order,
//      writes dbias = sum(dy) and dscale = sum(dy * xhat) (blended), and the
//      coefficients of step 4;
//   4. bn_backward_apply: dx = scale * inv_std * (dy - dbias / M - xhat * dscale / M),
//      which is SPEC's scale * inv_std / M * (M dy - dbias - xhat dscale), blended.
#include "gpu/bn_device_math.h"
#include "gpu/bn_dispatch.hpp"
#include "gpu/bn_launch.hpp"
#include "gpu/bn_nest_walk.h"
#include "gpu/bn_scratch.hpp"

namespace mbn {
namespace gpu {
namespace {

// Positions per thread in flight: about 8 values of each input (they are
// held as doubles).
template <int V>
__host__ __device__ constexpr int batch_positions() {
    return V >= 8 ? 1 : V == 4 ? 2 : 4;
}

template <typename P>
__global__ void __launch_bounds__(kBlockThreads)
    bn_saved_statistics(BnLayout layout, Scratch scratch, const P* saved_mean, const P* saved_inv_std) {
    const std::int64_t feature = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
    if (feature >= layout.feature.size) return;
    std::int64_t at[2];
    nest_offsets<2>(layout.feature, feature, kBwdSavedMean, at);
    scratch.shift[feature] = static_cast<double>(widen(saved_mean[at[0]]));
    scratch.mean_offset[feature] = 0.0;
    scratch.inv_std[feature] = static_cast<double>(widen(saved_inv_std[at[1]]));
}

// Sums in double: sum(dy) and sum(dy * (x - mean)), the mean being
// shift + mean_offset in double (the finalize scales the latter by inv_std).
// VR elements per position of one feature, or one element of each of VF
// consecutive features (bn_layout.hpp); the access is V = VR * VF wide.
template <typename T, typename G, int Rank, int VR, int VF>
__global__ void __launch_bounds__(kBlockThreads)
    bn_backward_partial(const T* __restrict__ x, const G* __restrict__ dy, BnLayout layout, Scratch scratch) {
    constexpr int V = VR * VF;
    constexpr int kBatch = batch_positions<V>();
    __shared__ Sums2<double> shared[kBlockThreads];
    const std::int64_t features = layout.feature.size;
    const std::int64_t feature0 = (static_cast<std::int64_t>(blockIdx.x) * layout.tile_features + threadIdx.x) * VF;
    const std::int64_t begin = static_cast<std::int64_t>(blockIdx.y) * layout.chunk;
    const std::int64_t end = min64(layout.reduce.size, begin + layout.chunk);
    const std::int64_t rows = layout.rows;

    Sums2<double> sums[VF];
#pragma unroll
    for (int j = 0; j < VF; ++j) sums[j] = Sums2<double>{0.0, 0.0};
    if (feature0 < features) {
        double center[VF];
#pragma unroll
        for (int j = 0; j < VF; ++j) center[j] = scratch.shift[feature0 + j] + scratch.mean_offset[feature0 + j];
        std::int64_t base[2];
        nest_offsets<2>(layout.feature, feature0, kSlotX, base);
        std::int64_t r = begin + threadIdx.y;
        NestCursor<Rank, 2> cursor;
        cursor.start(layout.reduce, r, rows, base);
        for (; r + (kBatch - 1) * rows < end; r += kBatch * rows) {
            double xv[kBatch][V], g[kBatch][V];
#pragma unroll
            for (int k = 0; k < kBatch; ++k) {
                load_values<double, V>(x + cursor.offset[0], xv[k]);
                load_values<double, V>(dy + cursor.offset[1], g[k]);
                cursor.advance(layout.reduce);
            }
#pragma unroll
            for (int k = 0; k < kBatch; ++k)
#pragma unroll
                for (int e = 0; e < V; ++e) {
                    const int j = VF > 1 ? e : 0;
                    sums[j].a += g[k][e];
                    sums[j].b += g[k][e] * (xv[k][e] - center[j]);
                }
        }
        for (; r < end; r += rows) {
            double xv[V], g[V];
            load_values<double, V>(x + cursor.offset[0], xv);
            load_values<double, V>(dy + cursor.offset[1], g);
#pragma unroll
            for (int e = 0; e < V; ++e) {
                const int j = VF > 1 ? e : 0;
                sums[j].a += g[e];
                sums[j].b += g[e] * (xv[e] - center[j]);
            }
            cursor.advance(layout.reduce);
        }
    }
#pragma unroll
    for (int j = 0; j < VF; ++j) {
        const Sums2<double> total = reduce_over_rows(sums[j], shared);
        if (threadIdx.y == 0 && feature0 < features) {
            const std::int64_t at = static_cast<std::int64_t>(blockIdx.y) * features + feature0 + j;
            scratch.partial0[at] = total.a;
            scratch.partial1[at] = total.b;
        }
    }
}

// Launched with finalize_shape(): the lanes add the splits of one feature
// in a fixed order (results do not depend on timing).
template <typename P>
__global__ void __launch_bounds__(kBlockThreads)
    bn_backward_finalize(BnLayout layout, Scratch scratch, const P* scale, P* dscale, P* dbias, Blend param) {
    __shared__ Sums2<double> shared[kBlockThreads];
    const std::int64_t features = layout.feature.size;
    const std::int64_t feature = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
    Sums2<double> sums{0.0, 0.0};
    if (feature < features) {
        for (int split = threadIdx.y; split < layout.splits; split += blockDim.y) {
            const std::int64_t at = static_cast<std::int64_t>(split) * features + feature;
            sums.a += scratch.partial0[at];
            sums.b += scratch.partial1[at];
        }
    }
    sums = reduce_over_rows(sums, shared);
    if (feature >= features || threadIdx.y != 0) return;
    const double sum_dy = sums.a;
    const double sum_dy_centered = sums.b;
    const double inv_std = scratch.inv_std[feature];
    const double sum_dy_xhat = sum_dy_centered * inv_std;
    std::int64_t at[3];
    nest_offsets<3>(layout.feature, feature, kBwdScale, at);
    store_blended(dscale, at[kBwdDscale - kBwdScale], sum_dy_xhat, param.alpha, param.beta);
    store_blended(dbias, at[kBwdDbias - kBwdScale], sum_dy, param.alpha, param.beta);
    const double m = static_cast<double>(layout.reduction_size());
    scratch.coef0[feature] = static_cast<double>(widen(scale[at[0]])) * inv_std;
    scratch.coef1[feature] = sum_dy / m;
    scratch.coef2[feature] = sum_dy_xhat / m;
}

// In double: dx cancels to small values for tiny batches (M = 2 per
// activation), where float rounding of xhat would dominate.
template <typename T, typename G, int Rank, int VR, int VF>
__global__ void __launch_bounds__(kBlockThreads)
    bn_backward_apply(const T* x, const G* dy, G* dx, BnLayout layout, Scratch scratch, float alpha, float beta) {
    constexpr int V = VR * VF;
    constexpr int kBatch = batch_positions<V>();
    const std::int64_t feature0 = (static_cast<std::int64_t>(blockIdx.x) * layout.tile_features + threadIdx.x) * VF;
    if (feature0 >= layout.feature.size) return;
    const std::int64_t begin = static_cast<std::int64_t>(blockIdx.y) * layout.chunk;
    const std::int64_t end = min64(layout.reduce.size, begin + layout.chunk);
    const std::int64_t rows = layout.rows;
    double center[VF], inv_std[VF], factor[VF], mean_dy[VF], mean_dy_xhat[VF];
#pragma unroll
    for (int j = 0; j < VF; ++j) {
        const std::int64_t f = feature0 + j;
        center[j] = scratch.shift[f] + scratch.mean_offset[f];
        inv_std[j] = scratch.inv_std[f];
        factor[j] = scratch.coef0[f];
        mean_dy[j] = scratch.coef1[f];
        mean_dy_xhat[j] = scratch.coef2[f];
    }

    std::int64_t base[3];
    nest_offsets<3>(layout.feature, feature0, kSlotX, base);
    std::int64_t r = begin + threadIdx.y;
    NestCursor<Rank, 3> cursor;
    cursor.start(layout.reduce, r, rows, base);
    // dx may be dy (in place): each element is read before this thread writes it.
    for (; r + (kBatch - 1) * rows < end; r += kBatch * rows) {
        double xv[kBatch][V], g[kBatch][V];
        std::int64_t out[kBatch];
#pragma unroll
        for (int k = 0; k < kBatch; ++k) {
            load_values<double, V>(x + cursor.offset[0], xv[k]);
            load_values<double, V>(dy + cursor.offset[1], g[k]);
            out[k] = cursor.offset[2];
            cursor.advance(layout.reduce);
        }
#pragma unroll
        for (int k = 0; k < kBatch; ++k) {
#pragma unroll
            for (int e = 0; e < V; ++e) {
                const int j = VF > 1 ? e : 0;
                const double xhat = (xv[k][e] - center[j]) * inv_std[j];
                g[k][e] = factor[j] * ((g[k][e] - mean_dy[j]) - xhat * mean_dy_xhat[j]);
            }
            store_values<G, V>(dx + out[k], g[k], alpha, beta);
        }
    }
    for (; r < end; r += rows) {
        double xv[V], g[V];
        load_values<double, V>(x + cursor.offset[0], xv);
        load_values<double, V>(dy + cursor.offset[1], g);
#pragma unroll
        for (int e = 0; e < V; ++e) {
            const int j = VF > 1 ? e : 0;
            const double xhat = (xv[e] - center[j]) * inv_std[j];
            g[e] = factor[j] * ((g[e] - mean_dy[j]) - xhat * mean_dy_xhat[j]);
        }
        store_values<G, V>(dx + cursor.offset[2], g, alpha, beta);
        cursor.advance(layout.reduce);
    }
}

}  // namespace

void run_backward(const BnBackward& p, const BnLayout& layout, const LaunchTarget& target) {
    const std::int64_t feature_blocks = (layout.feature.size + kBlockThreads - 1) / kBlockThreads;
    const dim3 grid(static_cast<unsigned>(layout.tiles), static_cast<unsigned>(layout.splits));
    const dim3 block(static_cast<unsigned>(layout.tile_features), static_cast<unsigned>(layout.rows));

    if (!p.saved_mean.present()) run_batch_statistics(p.x, p.scale.dtype, p.epsilon, StatsWrites{}, layout, target);

    const Scratch scratch = carve_scratch(target.scratch, layout);
    with_element_type(p.x.dtype, [&](auto x_tag) {
        using T = typename decltype(x_tag)::type;
        with_parameter_type<acc_t<T>>(p.scale.dtype, [&](auto p_tag) {
            using P = typename decltype(p_tag)::type;
            if (p.saved_mean.present()) {
                bn_saved_statistics<P><<<static_cast<unsigned>(feature_blocks), kBlockThreads, 0, target.stream>>>(
                    layout, scratch, static_cast<const P*>(p.saved_mean.data),
                    static_cast<const P*>(p.saved_inv_std.data));
                check_launch("bn_saved_statistics");
            }
        });
        with_gradient_type<T>(p.x.dtype, p.dy.dtype, [&](auto g_tag) {
            using G = typename decltype(g_tag)::type;
            with_walk_shape_of<T, G>(layout, [&](auto rank, auto vr, auto vf) {
                bn_backward_partial<T, G, decltype(rank)::value, decltype(vr)::value, decltype(vf)::value>
                    <<<grid, block, 0, target.stream>>>(
                    static_cast<const T*>(p.x.data), static_cast<const G*>(p.dy.data), layout, scratch);
                check_launch("bn_backward_partial");
            });
        });
        with_parameter_type<acc_t<T>>(p.scale.dtype, [&](auto p_tag) {
            using P = typename decltype(p_tag)::type;
            const FinalizeShape shape = finalize_shape(layout);
            bn_backward_finalize<P><<<shape.grid, shape.block, 0, target.stream>>>(
                layout, scratch, static_cast<const P*>(p.scale.data), static_cast<P*>(p.dscale.data),
                static_cast<P*>(p.dbias.data), p.param);
            check_launch("bn_backward_finalize");
        });
        with_gradient_type<T>(p.x.dtype, p.dy.dtype, [&](auto g_tag) {
            using G = typename decltype(g_tag)::type;
            with_walk_shape_of<T, G>(layout, [&](auto rank, auto vr, auto vf) {
                bn_backward_apply<T, G, decltype(rank)::value, decltype(vr)::value, decltype(vf)::value>
                    <<<grid, block, 0, target.stream>>>(
                    static_cast<const T*>(p.x.data), static_cast<const G*>(p.dy.data), static_cast<G*>(p.dx.data),
                    layout, scratch, p.data.alpha, p.data.beta);
                check_launch("bn_backward_apply");
            });
        });
    });
}

}  // namespace gpu
}  // namespace mbn
