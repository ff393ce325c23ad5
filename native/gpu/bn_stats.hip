// Batch statistics: per-feature mean and inverse standard deviation of x,
// in two launches.
//   1. bn_stats_partial: each block reduces its (features x reduction slice)
//      tile with Welford batches and Chan merges to (mean, M2) per feature,
//      plus the sum in double, written to the scratch partials.  Values are
//      shifted by the feature's first element first, so a channel with mean
//      1e4 and std 1e-2 keeps its digits in float and a constant channel gives
//      exactly zero deviations.
//   2. bn_stats_finalize: per feature, merges the partials in a fixed order
//      (deterministic results) in double, and writes the statistics, the
//      forward coefficients, saved and running statistics.
#include "gpu/bn_block_phases.h"
#include "gpu/bn_launch.hpp"
#include "gpu/feature_scratch.hpp"
#include "gpu/type_dispatch.hpp"

#include <cmath>

namespace mbn {
namespace gpu {
namespace {

template <typename T, int Rank, int VR, int VF>
__global__ void __launch_bounds__(kBlockThreads)
    bn_stats_partial(const T* __restrict__ x, FeatureLayout layout, FeatureArrays scratch) {
    using A = acc_t<T>;
    __shared__ ShiftedMoments<A> shared[kBlockThreads];
    const ThreadShare share = thread_share<VF>(layout, launch_place());
    ShiftedMoments<A> total[VF];
    double shift[VF];
    block_moments<T, Rank, VR, VF>(x, layout, share, total, shift, shared);
    if (threadIdx.y != 0 || !share.active) return;
    const std::int64_t features = layout.feature.size;
#pragma unroll
    for (int j = 0; j < VF; ++j) {
        if (blockIdx.y == 0) scratch.shift[share.feature0 + j] = shift[j];
        const std::int64_t at = static_cast<std::int64_t>(blockIdx.y) * features + share.feature0 + j;
        scratch.partial0[at] = static_cast<double>(total[j].welford.mean);
        scratch.partial1[at] = total[j].welford.m2;
        scratch.partial2[at] = total[j].sum;
    }
}

// Launched with finalize_shape(): the block's rows ("lanes") share the
// splits of one feature, merged lane by lane and then over the lanes in a
// fixed tree, so results do not depend on timing.
__global__ void __launch_bounds__(kBlockThreads)
    bn_stats_finalize(FeatureLayout layout, FeatureArrays scratch, StatsOutputs out) {
    __shared__ ShiftedMoments<double> shared[kBlockThreads];
    const std::int64_t features = layout.feature.size;
    const std::int64_t feature = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;

    ShiftedMoments<double> part{{0.0, 0.0, 0.0}, 0.0};
    if (feature < features) {
        for (int split = threadIdx.y; split < layout.splits; split += blockDim.y) {
            const std::int64_t at = static_cast<std::int64_t>(split) * features + feature;
            part = merge(part, ShiftedMoments<double>{{share_count(layout, split), scratch.partial0[at],
                                                       scratch.partial1[at]},
                                                      scratch.partial2[at]});
        }
    }
    part = reduce_over_rows(part, shared);
    if (feature >= features || threadIdx.y != 0) return;
    const FeatureStatistics s =
        finish_statistics(part, static_cast<double>(layout.reduction_size()), out.epsilon);
    const ForwardCoefficients c = write_statistics(out, layout, feature, scratch.shift[feature], s);
    scratch.mean_offset[feature] = s.mean_offset;
    scratch.inv_std[feature] = s.inv_std;
    scratch.coef0[feature] = c.coef0;
    scratch.coef1[feature] = c.coef1;
}

}  // namespace

void run_statistics_partials(const TensorArg& x, const FeatureLayout& layout, const LaunchTarget& target) {
    const FeatureArrays scratch = carve_scratch(target.scratch, layout);
    with_element_type(x.dtype, [&](auto x_tag) {
        using T = typename decltype(x_tag)::type;
        // Widths for x alone and for x with a float dy (backward's layout).
        using ReduceWidths = Widths<vector_width_of<T>(), vector_width_of<T, float>()>;
        using FeatureWidths = Widths<feature_width_of<T>(), feature_width_of<T, float>()>;
        with_walk_shape<ReduceWidths, FeatureWidths>(layout, [&](auto rank, auto vr, auto vf) {
            bn_stats_partial<T, decltype(rank)::value, decltype(vr)::value, decltype(vf)::value>
                <<<walk_grid(layout), walk_block(layout), 0, target.stream>>>(
                static_cast<const T*>(x.data), layout, scratch);
            check_launch("bn_stats_partial");
        });
    });
}

void run_batch_statistics(const TensorArg& x, double epsilon, const StatsWrites& writes, const FeatureLayout& layout,
                          const LaunchTarget& target) {
    run_statistics_partials(x, layout, target);
    const FinalizeShape shape = finalize_shape(layout);
    bn_stats_finalize<<<shape.grid, shape.block, 0, target.stream>>>(layout, carve_scratch(target.scratch, layout),
                                                                     stats_outputs(writes, epsilon));
    check_launch("bn_stats_finalize");
}

}  // namespace gpu
}  // namespace mbn
