// Backward batch norm, with xhat = ((x - shift) - mean_offset) * inv_std:
//   1. statistics recomputed from x (run_batch_statistics) when no
//      savedMean / savedInvVariance are given;
//   2. bn_backward_partial: per (split, feature) sums of dy and
//      dy * (x - c), c being the feature's first element with saved
//      statistics, the mean with recomputed ones;
//   3. bn_backward_finalize: per feature, adds the splits in a fixed order,
//      takes the statistics (saved, or from step 1), moves the second sum to
//      the mean, writes dbias = sum(dy) and dscale = sum(dy * xhat)
//      (blended), and the coefficients of step 4;
//   4. bn_backward_apply: dx = scale * inv_std * (dy - dbias / M - xhat * dscale / M),
//      i.e. scale * inv_std / M * (M dy - dbias - xhat dscale), blended (docs/conventions.md).
// Step 4 does its per-element arithmetic in float for non-double data once
// M >= kFloatBackpropMinCount (bn_block_phases.h), else in double; the sums
// of step 2 are taken in double.
// Through a fused activation f (kernel instances with Fused = true), steps 2
// to 4 take g = dy * f'(z) in dy's place, z = scale * xhat + bias recomputed
// in each pass; step 2 then needs the statistics first, so its sums are taken
// about the mean (saved, or from step 1) rather than the first element.
// With layout.splits == 1 all four run in one launch (bn_fused.hpp).
#include "gpu/bn_block_phases.h"
#include "gpu/bn_fused.hpp"
#include "gpu/bn_launch.hpp"
#include "gpu/feature_scratch.hpp"
#include "gpu/type_dispatch.hpp"

namespace mbn {
namespace gpu {
namespace {

// With saved statistics the sums are taken about each feature's first
// element, its shift (no statistics are needed yet, and float data keeps its
// digits as in bn_stats.hip); the finalize moves the second to the mean.
// Fused, they are taken about the saved mean, which becomes the shift.
// VR elements per position of one feature, or one element of each of VF
// consecutive features (feature_layout.hpp).
template <typename T, typename G, int Rank, int VR, int VF, bool Fused>
__global__ void __launch_bounds__(kBlockThreads)
    bn_backward_partial(const T* __restrict__ x, const G* __restrict__ dy, FeatureLayout layout, FeatureArrays scratch,
                        bool statistics_in_scratch, BackwardParams params, ActivationSpec activation) {
    __shared__ Sums2<double> shared[kBlockThreads];
    const ThreadShare share = thread_share<VF>(layout, launch_place());
    double shift[VF] = {};
    ActivationTerms<VF> act;
    act.spec = activation;
    if (share.active) {
        std::int64_t base[1];
        nest_offsets<1>(layout.feature, share.feature0, kSlotX, base);
#pragma unroll
        for (int j = 0; j < VF; ++j) {
            const std::int64_t f = share.feature0 + j;
            // Recomputed statistics: about the mean itself (no correction
            // later, which tiny float64 batches would feel).
            if (statistics_in_scratch) {
                shift[j] = scratch.shift[f] + scratch.mean_offset[f];
                if constexpr (Fused)
                    load_activation_terms(params, layout, f, scratch.inv_std[f], act.factor[j], act.bias[j]);
            } else if constexpr (Fused) {
                double inv_std;
                load_saved_statistics(params, layout, f, shift[j], inv_std);
                load_activation_terms(params, layout, f, inv_std, act.factor[j], act.bias[j]);
            } else {
                shift[j] = static_cast<double>(widen(x[base[0] + j]));
            }
        }
    }
    Sums2<double> total[VF];
    block_gradient_sums<T, G, Rank, VR, VF, Fused>(x, dy, layout, share, shift, total, shared, act);
    if (threadIdx.y != 0 || !share.active) return;
#pragma unroll
    for (int j = 0; j < VF; ++j) {
        const std::int64_t feature = share.feature0 + j;
        if (blockIdx.y == 0 && !statistics_in_scratch) scratch.shift[feature] = shift[j];
        const std::int64_t at = static_cast<std::int64_t>(blockIdx.y) * layout.feature.size + feature;
        scratch.partial0[at] = total[j].a;
        scratch.partial1[at] = total[j].b;
    }
}

// Launched with finalize_shape(): the lanes add the splits of one feature
// in a fixed order (results do not depend on timing).  The statistics come
// from savedMean / savedInvVariance when given, else from the scratch
// (run_batch_statistics); either way the scratch holds them afterwards for
// bn_backward_apply, and with an activation (params.bias present) its z_bias.
__global__ void __launch_bounds__(kBlockThreads)
    bn_backward_finalize(FeatureLayout layout, FeatureArrays scratch, BackwardParams params, Blend param) {
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
    const double shift = scratch.shift[feature];
    double mean_offset, inv_std;
    if (params.saved_mean.present()) {
        double mean;
        load_saved_statistics(params, layout, feature, mean, inv_std);
        mean_offset = mean - shift;  // 0 with an activation: the shift is the mean
        scratch.mean_offset[feature] = mean_offset;
        scratch.inv_std[feature] = inv_std;
        // sum(dy (x - mean)) = sum(dy (x - shift)) - (mean - shift) sum(dy)
        sums.b -= mean_offset * sums.a;
    } else {  // recomputed statistics: the sums are about the mean already
        mean_offset = scratch.mean_offset[feature];
        inv_std = scratch.inv_std[feature];
    }
    const BackpropCoefficients c =
        finish_gradients(layout, feature, shift + mean_offset, inv_std, sums, params, param);
    scratch.coef0[feature] = c.coef0;
    scratch.coef1[feature] = c.coef1;
    scratch.coef2[feature] = c.coef2;
    if (params.bias.present())
        scratch.z_bias[feature] = params.bias.load(nest_offset(layout.feature, feature, kBwdBias));
}

template <typename T, typename G, typename C, int Rank, int VR, int VF, bool Fused>
__global__ void __launch_bounds__(kBlockThreads)
    bn_backward_apply(const T* x, const G* dy, G* dx, FeatureLayout layout, FeatureArrays scratch, float alpha,
                      float beta, ActivationSpec activation) {
    const ThreadShare share = thread_share<VF>(layout, second_pass_place());
    if (!share.active) return;
    BackpropCoefficients c[VF];
    ActivationTerms<VF> act;
    act.spec = activation;
#pragma unroll
    for (int j = 0; j < VF; ++j) {
        const std::int64_t f = share.feature0 + j;
        c[j] = BackpropCoefficients{scratch.shift[f] + scratch.mean_offset[f], scratch.inv_std[f], scratch.coef0[f],
                                    scratch.coef1[f], scratch.coef2[f]};
        if constexpr (Fused) act.bias[j] = scratch.z_bias[f];  // its factor is coef0
    }
    backprop_share<T, G, C, Rank, VR, VF, Fused>(x, dy, dx, layout, share, c, alpha, beta, act);
}

}  // namespace

void run_backward(const BnBackward& p, const FeatureLayout& layout, bool single_launch, const LaunchTarget& target) {
    if (single_launch) {
        run_backward_single_launch(p, layout, target);
        return;
    }
    if (!p.saved_mean.present()) run_batch_statistics(p.x, p.epsilon, StatsWrites{}, layout, target);

    const FeatureArrays scratch = carve_scratch(target.scratch, layout);
    const BackwardParams params = backward_params(p);
    const bool float_math = float_backprop_enough(layout.reduction_size());
    with_element_type(p.x.dtype, [&](auto x_tag) {
        using T = typename decltype(x_tag)::type;
        with_gradient_type<T>(p.x.dtype, p.dy.dtype, [&](auto g_tag) {
            using G = typename decltype(g_tag)::type;
            with_activation(p.activation, [&](auto fused) {
                with_walk_shape_for<decltype(fused)::value, T, G>(layout, [&](auto rank, auto vr, auto vf) {
                    bn_backward_partial<T, G, decltype(rank)::value, decltype(vr)::value, decltype(vf)::value,
                                        decltype(fused)::value><<<walk_grid(layout), walk_block(layout), 0,
                                                                  target.stream>>>(
                        static_cast<const T*>(p.x.data), static_cast<const G*>(p.dy.data), layout, scratch,
                        !p.saved_mean.present(), params, p.activation);
                    check_launch("bn_backward_partial");
                });
            });
        });
    });
    const FinalizeShape shape = finalize_shape(layout);
    bn_backward_finalize<<<shape.grid, shape.block, 0, target.stream>>>(layout, scratch, params, p.param);
    check_launch("bn_backward_finalize");
    with_element_type(p.x.dtype, [&](auto x_tag) {
        using T = typename decltype(x_tag)::type;
        with_gradient_type<T>(p.x.dtype, p.dy.dtype, [&](auto g_tag) {
            using G = typename decltype(g_tag)::type;
            with_backprop_type<T>(float_math, [&](auto c_tag) {
                using C = typename decltype(c_tag)::type;
                with_activation(p.activation, [&](auto fused) {
                    with_walk_shape_for<decltype(fused)::value, T, G>(layout, [&](auto rank, auto vr, auto vf) {
                        bn_backward_apply<T, G, C, decltype(rank)::value, decltype(vr)::value, decltype(vf)::value,
                                          decltype(fused)::value><<<walk_grid(layout), walk_block(layout), 0,
                                                                    target.stream>>>(
                            static_cast<const T*>(p.x.data), static_cast<const G*>(p.dy.data),
                            static_cast<G*>(p.dx.data), layout, scratch, p.data.alpha, p.data.beta, p.activation);
                        check_launch("bn_backward_apply");
                    });
                });
            });
        });
    });
}

}  // namespace gpu
}  // namespace mbn
