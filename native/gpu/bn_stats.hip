// Batch statistics: per-feature mean and inverse standard deviation of x,
// in two launches.
//   1. feature_stats_partial (run_statistics_partials, feature_passes.hip):
//      per (split, feature) shifted moments into the scratch partials.
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
