// Single-launch training forward and backward (see bn_fused.hpp): one block
// per tile of features, each holding its features' whole reduction, runs the
// phases of bn_block_phases.h back to back with __syncthreads between them;
// the per-feature results of a phase reach the block's other rows through
// shared memory.
#include "gpu/bn_fused.hpp"

#include "gpu/bn_block_phases.h"
#include "gpu/bn_dispatch.hpp"

#include <cstdlib>
#include <cstring>

namespace mbn {
namespace gpu {
namespace {

// Two blocks per multiprocessor at least (at most 128 registers): the double
// arithmetic of the backward kernel would otherwise take ~146, one block per
// multiprocessor, too few loads in flight to stream.
constexpr int kSingleLaunchMinBlocks = 2;

// Statistics, then normalize.  x may be y: every element of the block's
// features is read by the statistics before the barrier, and after it each
// thread reads an element before writing it.
template <typename T, typename P, int Rank, int VR, int VF>
__global__ void __launch_bounds__(kBlockThreads, kSingleLaunchMinBlocks)
    bn_training_single_launch(const T* x, T* y, BnLayout layout, StatsOutputs<P> out, float alpha, float beta) {
    using A = acc_t<T>;
    __shared__ ShiftedMoments<A> shared[kBlockThreads];
    __shared__ ForwardCoefficients coefficients[kBlockThreads];  // tile_features * VF <= kBlockThreads
    const ThreadShare share = thread_share<VF>(layout, 0);
    ShiftedMoments<A> total[VF];
    double shift[VF];
    block_moments<T, Rank, VR, VF>(x, layout, share, total, shift, shared);
    if (threadIdx.y == 0 && share.active) {
        const double m = static_cast<double>(layout.reduction_size());
#pragma unroll
        for (int j = 0; j < VF; ++j) {
            const ShiftedMoments<double> wide{
                {m, static_cast<double>(total[j].welford.mean), static_cast<double>(total[j].welford.m2)},
                total[j].sum};
            coefficients[threadIdx.x * VF + j] =
                write_statistics(out, layout, share.feature0 + j, shift[j], finish_statistics(wide, m, out.epsilon));
        }
    }
    __syncthreads();
    if (!share.active) return;
    A narrow_shift[VF], mean_offset[VF], factor[VF], bias[VF];
#pragma unroll
    for (int j = 0; j < VF; ++j) {
        const ForwardCoefficients& c = coefficients[threadIdx.x * VF + j];
        narrow_shift[j] = static_cast<A>(c.shift);
        mean_offset[j] = static_cast<A>(c.mean_offset);
        factor[j] = static_cast<A>(c.coef0);
        bias[j] = static_cast<A>(c.coef1);
    }
    normalize_share<T, Rank, VR, VF>(x, y, layout, share, narrow_shift, mean_offset, factor, bias, alpha, beta);
}

// Statistics (saved, or recomputed from x when saved_mean is null), gradient
// sums, then dx.  dx may be dy, as x may be y above.
template <typename T, typename G, typename P, int Rank, int VR, int VF>
__global__ void __launch_bounds__(kBlockThreads, kSingleLaunchMinBlocks)
    bn_backward_single_launch(const T* x, const G* dy, G* dx, BnLayout layout, const P* scale, P* dscale,
                              P* dbias, const P* saved_mean, const P* saved_inv_std, double epsilon, Blend param,
                              float alpha, float beta) {
    using A = acc_t<T>;
    __shared__ ShiftedMoments<A> moment_shared[kBlockThreads];
    __shared__ Sums2<double> sum_shared[kBlockThreads];
    __shared__ BackpropCoefficients coefficients[kBlockThreads];  // tile_features * VF <= kBlockThreads
    const ThreadShare share = thread_share<VF>(layout, 0);
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
                    {m, static_cast<double>(total[j].welford.mean), static_cast<double>(total[j].welford.m2)},
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
    backprop_share<T, G, Rank, VR, VF>(x, dy, dx, layout, share, c, alpha, beta);
}

dim3 single_launch_grid(const BnLayout& layout) { return dim3(static_cast<unsigned>(layout.tiles)); }
dim3 single_launch_block(const BnLayout& layout) {
    return dim3(static_cast<unsigned>(layout.tile_features), static_cast<unsigned>(layout.rows));
}

bool single_launch_switched_on() {
    static const bool on = [] {
        const char* value = std::getenv("MIOPEN_BN_GPU_SINGLE_LAUNCH");
        return value == nullptr || std::strcmp(value, "0") != 0;
    }();
    return on;
}

}  // namespace

bool use_single_launch(const BnLayout& layout) {
    return layout.splits == 1 &&
           static_cast<std::int64_t>(layout.tile_features) * layout.features_per_thread <= kBlockThreads &&
           single_launch_switched_on();
}

void run_training_single_launch(const TensorArg& x, const TensorArg& y, DType param_dtype, double epsilon,
                                const StatsWrites& writes, const Blend& out, const BnLayout& layout,
                                const LaunchTarget& target) {
    with_element_type(x.dtype, [&](auto x_tag) {
        using T = typename decltype(x_tag)::type;
        with_parameter_type<acc_t<T>>(param_dtype, [&](auto p_tag) {
            using P = typename decltype(p_tag)::type;
            const StatsOutputs<P> outputs = stats_outputs<P>(writes, epsilon);
            with_walk_shape_of<T>(layout, [&](auto rank, auto vr, auto vf) {
                bn_training_single_launch<T, P, decltype(rank)::value, decltype(vr)::value, decltype(vf)::value>
                    <<<single_launch_grid(layout), single_launch_block(layout), 0, target.stream>>>(
                    static_cast<const T*>(x.data), static_cast<T*>(y.data), layout, outputs, out.alpha, out.beta);
                check_launch("bn_training_single_launch");
            });
        });
    });
}

void run_backward_single_launch(const BnBackward& p, const BnLayout& layout, const LaunchTarget& target) {
    with_element_type(p.x.dtype, [&](auto x_tag) {
        using T = typename decltype(x_tag)::type;
        with_parameter_type<acc_t<T>>(p.scale.dtype, [&](auto p_tag) {
            using P = typename decltype(p_tag)::type;
            with_gradient_type<T>(p.x.dtype, p.dy.dtype, [&](auto g_tag) {
                using G = typename decltype(g_tag)::type;
                with_walk_shape_of<T, G>(layout, [&](auto rank, auto vr, auto vf) {
                    bn_backward_single_launch<T, G, P, decltype(rank)::value, decltype(vr)::value,
                                              decltype(vf)::value>
                        <<<single_launch_grid(layout), single_launch_block(layout), 0, target.stream>>>(
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
