// Forward batch norm: training (batch statistics, then normalize) and
// inference (estimates, or the batch-statistics fallback the front turns into
// a training problem without outputs).  Every path ends in normalize_share:
//     y = alpha * (((x - shift) - mean_offset) * coef0 + coef1) + beta * y_prior
// with coef0 = scale * inv_std and coef1 = bias per feature.
//   training, layout.splits == 1: one launch (bn_fused.hpp);
//   training, several splits: bn_stats_partial, bn_stats_finalize, bn_forward_apply;
//   inference: one launch, each thread deriving its features' coefficients
//   from the estimates (a separate coefficients launch cost as much as a
//   small tensor's whole normalize).
#include "gpu/bn_block_phases.h"
#include "gpu/bn_dispatch.hpp"
#include "gpu/bn_fused.hpp"
#include "gpu/bn_launch.hpp"
#include "gpu/bn_scratch.hpp"
#include "gpu/gn_activation.h"

namespace mbn {
namespace gpu {
namespace {

// VR elements per position of one feature, or one element of each of VF
// consecutive features (bn_layout.hpp); the access is V = VR * VF wide.
template <typename T, int Rank, int VR, int VF, typename Epilogue>
__global__ void __launch_bounds__(kBlockThreads)
    bn_forward_apply(const T* x, T* y, BnLayout layout, Scratch scratch, float alpha, float beta, Epilogue epilogue) {
    using A = acc_t<T>;
    const ThreadShare share = thread_share<VF>(layout, second_pass_place(layout));
    if (!share.active) return;
    A shift[VF], mean_offset[VF], factor[VF], bias[VF];
#pragma unroll
    for (int j = 0; j < VF; ++j) {
        const std::int64_t f = share.feature0 + j;
        shift[j] = static_cast<A>(scratch.shift[f]);
        mean_offset[j] = static_cast<A>(scratch.mean_offset[f]);
        factor[j] = static_cast<A>(scratch.coef0[f]);
        bias[j] = static_cast<A>(scratch.coef1[f]);
    }
    normalize_share<T, Rank, VR, VF>(x, y, layout, share, shift, mean_offset, factor, bias, alpha, beta, epilogue);
}

// Inference: shift = estimated mean, coef0 = scale / sqrt(var + eps) (NaN for
// a negative var + eps, on purpose: no fabs), coef1 = bias.
template <typename T, typename P, int Rank, int VR, int VF>
__global__ void __launch_bounds__(kBlockThreads)
    bn_inference_apply(const T* x, T* y, BnLayout layout, const P* scale, const P* bias, const P* mean,
                       const P* var, double epsilon, float alpha, float beta) {
    using A = acc_t<T>;
    const ThreadShare share = thread_share<VF>(layout, launch_place());
    if (!share.active) return;
    A shift[VF], zero[VF], factor[VF], offset[VF];
#pragma unroll
    for (int j = 0; j < VF; ++j) {
        std::int64_t at[4];
        nest_offsets<4>(layout.feature, share.feature0 + j, kFwdScale, at);
        const double inv_std = inverse_std(static_cast<double>(widen(var[at[kFwdVar - kFwdScale]])), epsilon);
        shift[j] = static_cast<A>(static_cast<double>(widen(mean[at[kFwdMean - kFwdScale]])));
        zero[j] = A(0);
        factor[j] = static_cast<A>(static_cast<double>(widen(scale[at[0]])) * inv_std);
        offset[j] = static_cast<A>(static_cast<double>(widen(bias[at[kFwdBias - kFwdScale]])));
    }
    normalize_share<T, Rank, VR, VF>(x, y, layout, share, shift, zero, factor, offset, alpha, beta);
}

}  // namespace

void run_forward_training(const BnForwardTraining& p, const BnLayout& layout, const LaunchTarget& target) {
    StatsWrites writes;
    writes.scale = &p.scale;
    writes.bias = &p.bias;
    if (p.running_mean.present()) {
        writes.running_mean = &p.running_mean;
        writes.running_var = &p.running_var;
    }
    if (p.saved_mean.present()) {
        writes.saved_mean = &p.saved_mean;
        writes.saved_inv_std = &p.saved_inv_std;
    }
    writes.exp_avg_factor = p.exp_avg_factor;
    if (use_single_launch(layout)) {
        run_training_single_launch(p.x, p.y, p.scale.dtype, p.epsilon, writes, p.out, layout, target);
        return;
    }
    run_batch_statistics(p.x, p.scale.dtype, p.epsilon, writes, layout, target);
    run_normalize(p.x, p.y, layout, p.out, Activation::none, 1.0f, target);
}

void run_normalize(const TensorArg& x, const TensorArg& y, const BnLayout& layout, const Blend& out,
                   Activation activation, float swish_beta, const LaunchTarget& target) {
    with_element_type(x.dtype, [&](auto x_tag) {
        using T = typename decltype(x_tag)::type;
        using A = acc_t<T>;
        const Scratch scratch = carve_scratch(target.scratch, layout);
        with_walk_shape_of<T>(layout, [&](auto rank, auto vr, auto vf) {
            auto launch = [&](auto epilogue) {
                bn_forward_apply<T, decltype(rank)::value, decltype(vr)::value, decltype(vf)::value,
                                 decltype(epilogue)><<<walk_grid(layout), walk_block(layout), 0, target.stream>>>(
                    static_cast<const T*>(x.data), static_cast<T*>(y.data), layout, scratch, out.alpha, out.beta,
                    epilogue);
                check_launch("bn_forward_apply");
            };
            if (activation == Activation::swish)
                launch(SwishEpilogue<A>{static_cast<A>(swish_beta)});
            else
                launch(NoEpilogue{});
        });
    });
}

void run_forward_inference(const BnForwardInference& p, const BnLayout& layout, const LaunchTarget& target) {
    with_element_type(p.x.dtype, [&](auto x_tag) {
        using T = typename decltype(x_tag)::type;
        with_parameter_type<T>(p.scale.dtype, [&](auto p_tag) {
            using P = typename decltype(p_tag)::type;
            with_walk_shape_of<T>(layout, [&](auto rank, auto vr, auto vf) {
                bn_inference_apply<T, P, decltype(rank)::value, decltype(vr)::value, decltype(vf)::value>
                    <<<walk_grid(layout), walk_block(layout), 0, target.stream>>>(
                    static_cast<const T*>(p.x.data), static_cast<T*>(p.y.data), layout,
                    static_cast<const P*>(p.scale.data), static_cast<const P*>(p.bias.data),
                    static_cast<const P*>(p.mean.data), static_cast<const P*>(p.var.data), p.epsilon, p.out.alpha,
                    p.out.beta);
                check_launch("bn_inference_apply");
            });
        });
    });
}

}  // namespace gpu
}  // namespace mbn
