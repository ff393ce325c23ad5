// The two launches of a per-feature reduction that batch norm and group
// norm's slices share (feature_passes.hpp):
//   feature_stats_partial: each block reduces its (features x reduction
//      slice) tile with Welford batches and Chan merges to (mean, M2) per
//      feature, plus the sum in double, written to the scratch partials.
//      Values are shifted by the feature's first element first, so a channel
//      with mean 1e4 and std 1e-2 keeps its digits in float and a constant
//      channel gives exactly zero deviations.  Each op merges the partials
//      itself (batch norm's bn_stats_finalize, group norm's slice terms).
//   feature_normalize (feature_normalize.h): the elementwise pass from the
//      scratch's per-feature factors, plain or with group norm's swish.
#include "gpu/feature_passes.hpp"

#include "gpu/dependent_launch.h"
#include "gpu/feature_normalize.h"
#include "gpu/feature_phases.h"
#include "gpu/feature_scratch.hpp"
#include "gpu/gn_activation.h"
#include "gpu/type_dispatch.hpp"

namespace mbn {
namespace gpu {
namespace {

template <typename T, int Rank, int VR, int VF>
__global__ void __launch_bounds__(kBlockThreads, (linear_walk_min_blocks<acc_t<T>, Rank>()))
    feature_stats_partial(const T* __restrict__ x, FeatureLayout layout, FeatureArrays scratch) {
    using A = acc_t<T>;
    allow_dependent_launch();  // group norm's slice terms (batch norm launches its next kernel plainly)
    // The linear walk reduces its VF features over the rows together.
    __shared__ ShiftedMoments<A> shared[Rank == 1 ? VF : 1][kBlockThreads];
    const ThreadShare share = thread_share<VF>(layout, launch_place());
    ShiftedMoments<A> total[VF];
    double shift[VF];
    block_moments<T, Rank, VR, VF>(x, layout, share, total, shift, &shared[0][0]);
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

}  // namespace

void run_statistics_partials(const TensorArg& x, const FeatureLayout& layout, const LaunchTarget& target,
                             PackedWalk packed) {
    const FeatureArrays scratch = carve_scratch(target.scratch, layout);
    with_element_type(x.dtype, [&](auto x_tag) {
        using T = typename decltype(x_tag)::type;
        auto launch = [&](auto rank, auto vr, auto vf) {
            feature_stats_partial<T, decltype(rank)::value, decltype(vr)::value, decltype(vf)::value>
                <<<walk_grid(layout), walk_block(layout), 0, target.stream>>>(
                static_cast<const T*>(x.data), layout, scratch);
            check_launch("feature_stats_partial");
        };
        if (packed == PackedWalk::linear) {
            // Group norm's slices: x's widths alone.
            with_linear_walk_shape_of<T>(layout, launch);
        } else {
            // Widths for x alone and for x with a float dy (backward's layout).
            using ReduceWidths = Widths<vector_width_of<T>(), vector_width_of<T, float>()>;
            using FeatureWidths = Widths<feature_width_of<T>(), feature_width_of<T, float>()>;
            with_walk_shape<ReduceWidths, FeatureWidths>(layout, launch);
        }
    });
}

void run_normalize(const TensorArg& x, const TensorArg& y, const FeatureLayout& layout, const Blend& out,
                   Activation activation, float swish_beta, const LaunchTarget& target, PackedWalk packed) {
    auto launch = [&](auto make) {
        if (packed == PackedWalk::linear)
            launch_feature_normalize<false, true>(x, y, layout, out, target, make);
        else
            launch_feature_normalize<false, false>(x, y, layout, out, target, make);
    };
    if (activation == Activation::swish) {
        launch([&](auto a_tag) {
            using A = typename decltype(a_tag)::type;
            return SwishEpilogue<A>{static_cast<A>(swish_beta)};
        });
    } else {
        launch([](auto) { return NoEpilogue{}; });
    }
}

}  // namespace gpu
}  // namespace mbn
