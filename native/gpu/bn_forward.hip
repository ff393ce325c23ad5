// Forward batch norm: training (batch statistics, then normalize) and
// inference (estimates, or the batch-statistics fallback the front turns into
// a training problem without outputs).  Every path ends in normalize_share:
//     y = alpha * f(((x - shift) - mean_offset) * coef0 + coef1) + beta * y_prior
// with coef0 = scale * inv_std and coef1 = bias per feature, f the fused
// activation (bn_activation.h; an instance without one is the identity).
//   training, layout.splits == 1: one launch (bn_fused.hpp);
//   training, several splits: feature_stats_partial, bn_stats_finalize,
//   feature_normalize (feature_passes.hip, feature_normalize.h);
//   inference: one launch, each thread deriving its features' coefficients
//   from the estimates (a separate coefficients launch cost as much as a
//   small tensor's whole normalize).
#include "gpu/bn_block_phases.h"
#include "gpu/bn_fused.hpp"
#include "gpu/bn_launch.hpp"
#include "gpu/feature_normalize.h"
#include "gpu/feature_scratch.hpp"
#include "gpu/type_dispatch.hpp"

namespace mbn {
namespace gpu {
namespace {

// The tensors of an inference call, each of its own type.
struct InferenceParams {
    ParamRef scale, bias, mean, var;
    bool var_is_inv_std;  // var holds 1 / sqrt(variance + epsilon)
    double epsilon;
};

// Inference: shift = estimated mean, coef0 = scale * inv_std with inv_std =
// 1 / sqrt(var + eps) (NaN for a negative var + eps, on purpose: no fabs) or
// var itself, coef1 = bias.
template <typename T, int Rank, int VR, int VF, typename Epilogue>
__global__ void __launch_bounds__(kBlockThreads)
    bn_inference_apply(const T* x, T* y, FeatureLayout layout, InferenceParams p, float alpha, float beta,
                       Epilogue epilogue) {
    using A = acc_t<T>;
    const ThreadShare share = thread_share<VF>(layout, launch_place());
    if (!share.active) return;
    A shift[VF], zero[VF], factor[VF], offset[VF];
#pragma unroll
    for (int j = 0; j < VF; ++j) {
        std::int64_t at[4];
        nest_offsets<4>(layout.feature, share.feature0 + j, kFwdScale, at);
        const double var = p.var.load(at[kFwdVar - kFwdScale]);
        const double inv_std = p.var_is_inv_std ? var : inverse_std(var, p.epsilon);
        shift[j] = static_cast<A>(p.mean.load(at[kFwdMean - kFwdScale]));
        zero[j] = A(0);
        factor[j] = static_cast<A>(p.scale.load(at[0]) * inv_std);
        offset[j] = static_cast<A>(p.bias.load(at[kFwdBias - kFwdScale]));
    }
    normalize_share<T, Rank, VR, VF>(x, y, layout, share, shift, zero, factor, offset, alpha, beta, epilogue);
}

}  // namespace

void run_forward_training(const BnForwardTraining& p, const FeatureLayout& layout, bool single_launch,
                          const LaunchTarget& target) {
    StatsWrites writes;
    writes.scale = &p.scale;
    writes.bias = &p.bias;
    if (p.running_mean.present()) {
        writes.prev_running_mean = &p.prev_running_mean;
        writes.prev_running_var = &p.prev_running_var;
        writes.running_mean = &p.running_mean;
        writes.running_var = &p.running_var;
    }
    if (p.saved_mean.present()) {
        writes.saved_mean = &p.saved_mean;
        writes.saved_inv_std = &p.saved_inv_std;
    }
    writes.exp_avg_factor = p.exp_avg_factor;
    if (single_launch) {
        run_training_single_launch(p.x, p.y, p.epsilon, writes, p.out, p.activation, layout, target);
        return;
    }
    run_batch_statistics(p.x, p.epsilon, writes, layout, target);
    with_activation(p.activation, [&](auto fused) {
        // The plain instance is the one group norm's slices use too.
        if constexpr (decltype(fused)::value)
            launch_feature_normalize<true>(p.x, p.y, layout, p.out, target, [&](auto a_tag) {
                return activation_epilogue<typename decltype(a_tag)::type>(fused, p.activation);
            });
        else
            run_normalize(p.x, p.y, layout, p.out, Activation::none, 0.0f, target);
    });
}

void run_forward_inference(const BnForwardInference& p, const FeatureLayout& layout, const LaunchTarget& target) {
    const InferenceParams params{param_ref(p.scale), param_ref(p.bias), param_ref(p.mean),
                                 param_ref(p.var),   p.var_is_inv_std,  p.epsilon};
    with_element_type(p.x.dtype, [&](auto x_tag) {
        using T = typename decltype(x_tag)::type;
        with_activation(p.activation, [&](auto fused) {
            with_walk_shape_for<decltype(fused)::value, T>(layout, [&](auto rank, auto vr, auto vf) {
                auto epilogue = activation_epilogue<acc_t<T>>(fused, p.activation);
                bn_inference_apply<T, decltype(rank)::value, decltype(vr)::value, decltype(vf)::value,
                                   decltype(epilogue)><<<walk_grid(layout), walk_block(layout), 0, target.stream>>>(
                    static_cast<const T*>(p.x.data), static_cast<T*>(p.y.data), layout, params, p.out.alpha,
                    p.out.beta, epilogue);
                check_launch("bn_inference_apply");
            });
        });
    });
}

}  // namespace gpu
}  // namespace mbn
