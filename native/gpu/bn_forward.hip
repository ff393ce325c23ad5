// Forward normalize passes over normalize_share:
//     y = alpha * (((x - shift) - mean_offset) * coef0 + coef1) + beta * y_prior
// with coef0 = scale * inv_std and coef1 = bias per feature.
//   inference: one launch, each thread deriving its features' coefficients
//   from the estimates (a separate coefficients launch cost as much as a
//   small tensor's whole normalize);
//   run_normalize: the coefficients from the scratch (group norm's slices).
// Training (and the inference fallback on batch statistics, which the front
// turns into a training problem) is the engine's: bn_engine.hip.
#include "gpu/bn_block_phases.h"
#include "gpu/bn_dispatch.hpp"
#include "gpu/bn_launch.hpp"
#include "gpu/bn_scratch.hpp"
#include "gpu/gn_activation.h"
#include "gpu/param_io.h"

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
template <typename T, int Rank, int VR, int VF>
__global__ void __launch_bounds__(kBlockThreads)
    bn_inference_apply(const T* x, T* y, BnLayout layout, ParamRef scale, ParamRef bias, ParamRef mean,
                       ParamRef var, double epsilon, float alpha, float beta) {
    using A = acc_t<T>;
    const ThreadShare share = thread_share<VF>(layout, launch_place());
    if (!share.active) return;
    A shift[VF], zero[VF], factor[VF], offset[VF];
#pragma unroll
    for (int j = 0; j < VF; ++j) {
        std::int64_t at[4];
        nest_offsets<4>(layout.feature, share.feature0 + j, kFwdScale, at);
        const double inv_std = 1.0 / sqrt(var.load(at[kFwdVar - kFwdScale]) + epsilon);
        shift[j] = static_cast<A>(mean.load(at[kFwdMean - kFwdScale]));
        zero[j] = A(0);
        factor[j] = static_cast<A>(scale.load(at[0]) * inv_std);
        offset[j] = static_cast<A>(bias.load(at[kFwdBias - kFwdScale]));
    }
    normalize_share<T, Rank, VR, VF>(x, y, layout, share, shift, zero, factor, offset, alpha, beta);
}

}  // namespace

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
        with_walk_shape_of<T>(layout, [&](auto rank, auto vr, auto vf) {
            bn_inference_apply<T, decltype(rank)::value, decltype(vr)::value, decltype(vf)::value>
                <<<walk_grid(layout), walk_block(layout), 0, target.stream>>>(
                static_cast<const T*>(p.x.data), static_cast<T*>(p.y.data), layout, param_ref(p.scale),
                param_ref(p.bias), param_ref(p.mean), param_ref(p.var), p.epsilon, p.out.alpha, p.out.beta);
            check_launch("bn_inference_apply");
        });
    });
}

}  // namespace gpu
}  // namespace mbn
