// Single-launch training forward (see bn_fused.hpp): one block per tile of
// features, each holding its features' whole reduction, runs the statistics
// and normalize phases of bn_block_phases.h back to back, the per-feature
// coefficients reaching the block's other rows through shared memory.
#include "gpu/bn_fused.hpp"

#include "gpu/bn_block_phases.h"
#include "gpu/type_dispatch.hpp"

namespace mbn {
namespace gpu {
namespace {

// Statistics, then normalize (through the fused activation, as Epilogue
// says).  x may be y: every element of the block's features is read by the
// statistics before the barrier, and after it each thread reads an element
// before writing it.
template <typename T, int Rank, int VR, int VF, typename Epilogue>
__global__ void __launch_bounds__(kBlockThreads, kSingleLaunchMinBlocks)
    bn_training_single_launch(const T* x, T* y, FeatureLayout layout, StatsOutputs out, float alpha, float beta,
                              Epilogue epilogue) {
    using A = acc_t<T>;
    __shared__ ShiftedMoments<A> shared[kBlockThreads];
    __shared__ ForwardCoefficients coefficients[kBlockThreads];  // tile_features * VF <= kBlockThreads
    const ThreadShare share = thread_share<VF>(layout, BlockPlace{blockIdx.x, 0});
    ShiftedMoments<A> total[VF];
    double shift[VF];
    block_moments<T, Rank, VR, VF>(x, layout, share, total, shift, shared);
    if (threadIdx.y == 0 && share.active) {
        const double m = static_cast<double>(layout.reduction_size());
#pragma unroll
        for (int j = 0; j < VF; ++j) {
            const ShiftedMoments<double> wide{
                {m, static_cast<double>(total[j].welford.mean), total[j].welford.m2},
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
    normalize_share<T, Rank, VR, VF>(x, y, layout, share, narrow_shift, mean_offset, factor, bias, alpha, beta,
                                     epilogue);
}

}  // namespace

void run_training_single_launch(const TensorArg& x, const TensorArg& y, double epsilon, const StatsWrites& writes,
                                const Blend& out, const ActivationSpec& activation, const FeatureLayout& layout,
                                const LaunchTarget& target) {
    const StatsOutputs outputs = stats_outputs(writes, epsilon);
    with_element_type(x.dtype, [&](auto x_tag) {
        using T = typename decltype(x_tag)::type;
        with_activation(activation, [&](auto fused) {
            with_walk_shape_for<decltype(fused)::value, T>(layout, [&](auto rank, auto vr, auto vf) {
                auto epilogue = activation_epilogue<acc_t<T>>(fused, activation);
                bn_training_single_launch<T, decltype(rank)::value, decltype(vr)::value, decltype(vf)::value,
                                          decltype(epilogue)>
                    <<<walk_grid(layout), walk_block(layout), 0, target.stream>>>(
                        static_cast<const T*>(x.data), static_cast<T*>(y.data), layout, outputs, out.alpha, out.beta,
                        epilogue);
                check_launch("bn_training_single_launch");
            });
        });
    });
}

}  // namespace gpu
}  // namespace mbn
