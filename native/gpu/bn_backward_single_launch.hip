// Single-launch backward (see bn_fused.hpp): statistics (saved or
// recomputed), gradient sums and dx in one block per tile of features, the
// per-feature results reaching the block's other rows through shared memory.
#include "gpu/bn_fused.hpp"

#include "gpu/bn_block_phases.h"
#include "gpu/bn_dispatch.hpp"

namespace mbn {
namespace gpu {
namespace {

// Statistics (saved, or recomputed from x when saved_mean is null), gradient
// sums, then dx, in double: a block that owns whole features walks few
// positions per thread, so latency, not the double arithmetic, bounds it.
// dx may be dy, as x may be y above.
template <typename T, typename G, typename P, int Rank, int VR, int VF>
__global__ void __launch_bounds__(kBlockThreads, kSingleLaunchMinBlocks)
    bn_backward_single_launch(const T* x, const G* dy, G* dx, BnLayout layout, const P* scale, P* dscale,
                              P* dbias, const P* saved_mean, const P* saved_inv_std, double epsilon, Blend param,
                              float alpha, float beta) {
    using A = acc_t<T>;
    __shared__ ShiftedMoments<A> moment_shared[kBlockThreads];
    __shared__ Sums2<double> sum_shared[kBlockThreads];
    __shared__ BackpropCoefficients coefficients[kBlockThreads];  // tile_features * VF <= kBlockThreads
    const ThreadShare share = thread_share<VF>(layout, BlockPlace{blockIdx.x, 0});
    const bool writer = threadIdx.y == 0 && share.active;

    if (saved_mean == nullptr) {
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
            std::int64_t at[2];
            nest_offsets<2>(layout.feature, share.feature0 + j, kBwdSavedMean, at);
            coefficients[threadIdx.x * VF + j].center = static_cast<double>(widen(saved_mean[at[0]]));
            coefficients[threadIdx.x * VF + j].inv_std = static_cast<double>(widen(saved_inv_std[at[1]]));
        }
    }
    __syncthreads();

    double center[VF];
#pragma unroll
    for (int j = 0; j < VF; ++j) center[j] = share.active ? coefficients[threadIdx.x * VF + j].center : 0.0;
    Sums2<double> sums[VF];
    block_gradient_sums<T, G, Rank, VR, VF>(x, dy, layout, share, center, sums, sum_shared);
    if (writer) {
#pragma unroll
        for (int j = 0; j < VF; ++j) {
            BackpropCoefficients& c = coefficients[threadIdx.x * VF + j];
            c = finish_gradients(layout, share.feature0 + j, c.center, c.inv_std, sums[j], scale, dscale, dbias,
                                 param);
        }
    }
    __syncthreads();
    if (!share.active) return;
    BackpropCoefficients c[VF];
#pragma unroll
    for (int j = 0; j < VF; ++j) c[j] = coefficients[threadIdx.x * VF + j];
    backprop_share<T, G, double, Rank, VR, VF>(x, dy, dx, layout, share, c, alpha, beta);
}

}  // namespace

void run_backward_single_launch(const BnBackward& p, const BnLayout& layout, const LaunchTarget& target) {
    with_element_type(p.x.dtype, [&](auto x_tag) {
        using T = typename decltype(x_tag)::type;
        with_parameter_type<T>(p.scale.dtype, [&](auto p_tag) {
            using P = typename decltype(p_tag)::type;
            with_gradient_type<T>(p.x.dtype, p.dy.dtype, [&](auto g_tag) {
                using G = typename decltype(g_tag)::type;
                with_walk_shape_of<T, G>(layout, [&](auto rank, auto vr, auto vf) {
                    bn_backward_single_launch<T, G, P, decltype(rank)::value, decltype(vr)::value,
                                              decltype(vf)::value>
                        <<<walk_grid(layout), walk_block(layout), 0, target.stream>>>(
                        static_cast<const T*>(p.x.data), static_cast<const G*>(p.dy.data),
                        static_cast<G*>(p.dx.data), layout, static_cast<const P*>(p.scale.data),
                        static_cast<P*>(p.dscale.data), static_cast<P*>(p.dbias.data),
                        data_of<const P>(&p.saved_mean), data_of<const P>(&p.saved_inv_std), p.epsilon, p.param,
                        p.data.alpha, p.data.beta);
                    check_launch("bn_backward_single_launch");
                });
            });
        });
    });
}

}  // namespace gpu
}  // namespace mbn
