// Single-launch backward (see bn_fused.hpp): statistics (saved or
// recomputed), gradient sums and dx in one block per tile of features, the
// per-feature results reaching the block's other rows through shared memory.
#include "gpu/bn_fused.hpp"

#include "gpu/bn_block_phases.h"
#include "gpu/type_dispatch.hpp"

namespace mbn {
namespace gpu {
namespace {

// Statistics (saved, or recomputed from x when absent), gradient sums, then
// dx, in double: a block that owns whole features walks few positions per
// thread, so latency, not the double arithmetic, bounds it.  Fused, the sums
// and dx take the activated gradient (bn_backward.hip), whose terms reach the
// block's rows through shared memory with the statistics.  dx may be dy, as x
// may be y above.
template <typename T, typename G, int Rank, int VR, int VF, bool Fused>
__global__ void __launch_bounds__(kBlockThreads, kSingleLaunchMinBlocks)
    bn_backward_single_launch(const T* x, const G* dy, G* dx, FeatureLayout layout, BackwardParams params,
                              double epsilon, Blend param, float alpha, float beta, ActivationSpec activation) {
    using A = acc_t<T>;
    __shared__ ShiftedMoments<A> moment_shared[kBlockThreads];
    __shared__ Sums2<double> sum_shared[kBlockThreads];
    __shared__ BackpropCoefficients coefficients[kBlockThreads];  // tile_features * VF <= kBlockThreads
    __shared__ double z_bias[Fused ? kBlockThreads : 1];          // and coefficients' coef0 as the factor
    const ThreadShare share = thread_share<VF>(layout, BlockPlace{blockIdx.x, 0});
    const bool writer = threadIdx.y == 0 && share.active;

    if (!params.saved_mean.present()) {
        ShiftedMoments<A> total[VF];
        double shift[VF];
        block_moments<T, Rank, VR, VF>(x, layout, share, total, shift, moment_shared);
        if (writer) {
            const double m = static_cast<double>(layout.reduction_size());
#pragma unroll
            for (int j = 0; j < VF; ++j) {
                const ShiftedMoments<double> wide{
                    {m, static_cast<double>(total[j].welford.mean), total[j].welford.m2},
                    total[j].sum};
                const FeatureStatistics s = finish_statistics(wide, m, epsilon);
                coefficients[threadIdx.x * VF + j].center = shift[j] + s.mean_offset;
                coefficients[threadIdx.x * VF + j].inv_std = s.inv_std;
            }
        }
    } else if (writer) {
#pragma unroll
        for (int j = 0; j < VF; ++j) {
            BackpropCoefficients& c = coefficients[threadIdx.x * VF + j];
            load_saved_statistics(params, layout, share.feature0 + j, c.center, c.inv_std);
        }
    }
    if constexpr (Fused) {
        if (writer) {
#pragma unroll
            for (int j = 0; j < VF; ++j) {
                BackpropCoefficients& c = coefficients[threadIdx.x * VF + j];
                load_activation_terms(params, layout, share.feature0 + j, c.inv_std, c.coef0,
                                      z_bias[threadIdx.x * VF + j]);
            }
        }
    }
    __syncthreads();

    double center[VF];
    ActivationTerms<VF> act;
    act.spec = activation;
#pragma unroll
    for (int j = 0; j < VF; ++j) {
        const BackpropCoefficients& c = coefficients[threadIdx.x * VF + j];
        center[j] = share.active ? c.center : 0.0;
        if constexpr (Fused) {
            act.factor[j] = share.active ? c.coef0 : 0.0;
            act.bias[j] = share.active ? z_bias[threadIdx.x * VF + j] : 0.0;
        }
    }
    Sums2<double> sums[VF];
    block_gradient_sums<T, G, Rank, VR, VF, Fused>(x, dy, layout, share, center, sums, sum_shared, act);
    if (writer) {
#pragma unroll
        for (int j = 0; j < VF; ++j) {
            BackpropCoefficients& c = coefficients[threadIdx.x * VF + j];
            c = finish_gradients(layout, share.feature0 + j, c.center, c.inv_std, sums[j], params, param);
        }
    }
    __syncthreads();
    if (!share.active) return;
    BackpropCoefficients c[VF];
#pragma unroll
    for (int j = 0; j < VF; ++j) c[j] = coefficients[threadIdx.x * VF + j];
    backprop_share<T, G, double, Rank, VR, VF, Fused>(x, dy, dx, layout, share, c, alpha, beta, act);
}

}  // namespace

void run_backward_single_launch(const BnBackward& p, const FeatureLayout& layout, const LaunchTarget& target) {
    const BackwardParams params = backward_params(p);
    with_element_type(p.x.dtype, [&](auto x_tag) {
        using T = typename decltype(x_tag)::type;
        with_gradient_type<T>(p.x.dtype, p.dy.dtype, [&](auto g_tag) {
            using G = typename decltype(g_tag)::type;
            with_activation(p.activation, [&](auto fused) {
                with_walk_shape_for<decltype(fused)::value, T, G>(layout, [&](auto rank, auto vr, auto vf) {
                    bn_backward_single_launch<T, G, decltype(rank)::value, decltype(vr)::value, decltype(vf)::value,
                                              decltype(fused)::value>
                        <<<walk_grid(layout), walk_block(layout), 0, target.stream>>>(
                        static_cast<const T*>(p.x.data), static_cast<const G*>(p.dy.data),
                        static_cast<G*>(p.dx.data), layout, params, p.epsilon, p.param, p.data.alpha, p.data.beta,
                        p.activation);
                    check_launch("bn_backward_single_launch");
                });
            });
        });
    });
}

}  // namespace gpu
}  // namespace mbn
