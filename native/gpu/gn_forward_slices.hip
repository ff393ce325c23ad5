// Forward group norm by slices (the algorithm gn_slices, gn_planner.hpp):
// for channels-innermost tensors whose groups hold few channels, where a
// group's elements are short runs a row apart.  Three launches over the
// slice layout, whose rows are whole runs of channels:
//   1. run_statistics_partials (feature_passes.hpp): the per (split,
//      feature) moments, the features being the slices (n, c), each shifted
//      by its first element;
//   2. gn_forward_slice_terms (gn_slice_terms.h): one block per group, of
//      threads sized to its partials, merges its slices' moments in a fixed
//      order into the group's mean and rstd (written out), and sets each
//      slice's normalize factors in the scratch;
//   3. y = act(((x - shift) - mean_offset) * coef0 + coef1): on packed x
//      and y gn_packed_normalize (gn_packed_normalize.h), else run_normalize.
// Launches 2 and 3 are dependent launches (dependent_launch.h).
// x is read twice (3B moved, against 2B for the chunk walk's single read),
// but as whole lines.  Launch 1 takes the linear walk on packed layouts
// (PackedWalk::linear, feature_passes.hpp): about 64 bytes of x loaded a
// thread before the math, as the backward's slices; so does launch 3 where
// the packed walk does not serve.
#include "gpu/dependent_launch.h"
#include "gpu/feature_passes.hpp"
#include "gpu/feature_scratch.hpp"
#include "gpu/gn_launch.hpp"
#include "gpu/gn_packed_normalize.h"
#include "gpu/gn_slice_terms.h"
#include "gpu/type_dispatch.hpp"

namespace mbn {
namespace gpu {
namespace {

// The group terms (gn_slice_terms.h): one block a group, of the plan's threads.
template <typename P>
__global__ void __launch_bounds__(kSliceTermsMaxThreads)
    gn_forward_slice_terms(FeatureLayout layout, FeatureArrays scratch, GnSliceTermsArgs<P> a) {
    __shared__ Total<double> wave_totals[kSliceTermsMaxThreads / MBN_WAVE_SIZE];
    allow_dependent_launch();  // the normalize
    wait_for_prior_kernel();   // the statistics' partials
    slice_terms_block(layout, scratch, a, wave_totals);
}

template <typename T>
void launch_packed_normalize(const GnForward& p, const GnPackedWalk& walk, const FeatureArrays& scratch,
                             const LaunchTarget& target) {
    auto launch = [&](auto kernel) {
        launch_dependent(kernel, packed_walk_grid(walk), dim3(static_cast<unsigned>(walk.threads)), 0, target,
                         "gn_packed_normalize", static_cast<const T*>(p.x.data), static_cast<T*>(p.y.data), walk,
                         scratch, p.swish_beta);
    };
    const bool swish = p.activation == Activation::swish;
    if (walk.channels_inner)
        swish ? launch(gn_packed_normalize<T, true, true>) : launch(gn_packed_normalize<T, true, false>);
    else
        swish ? launch(gn_packed_normalize<T, false, true>) : launch(gn_packed_normalize<T, false, false>);
}

}  // namespace

void run_gn_forward_slices(const GnForward& p, const GnSlicePlan& plan, const LaunchTarget& target) {
    const FeatureLayout& layout = plan.layout;
    run_statistics_partials(p.x, layout, target, PackedWalk::linear);
    with_element_type(p.x.dtype, [&](auto x_tag) {
        using T = typename decltype(x_tag)::type;
        const DType param_dtype = p.affine ? p.weight.dtype : DType::f32;
        with_parameter_type<T>(param_dtype, [&](auto p_tag) {
            using P = typename decltype(p_tag)::type;
            GnSliceTermsArgs<P> a{};
            a.order = plan.order;
            if (p.affine) {
                a.weight = static_cast<const P*>(p.weight.data);
                a.bias = static_cast<const P*>(p.bias.data);
                a.weight_stride = p.weight.stride[kC];
                a.bias_stride = p.bias.stride[kC];
            }
            a.mean = stat_tensor(p.mean);
            a.rstd = stat_tensor(p.rstd);
            a.epsilon = p.epsilon;
            set_slice_terms_counts(a, layout);
            const std::int64_t groups = plan.order.shape.group_count();
            launch_dependent(gn_forward_slice_terms<P>, dim3(static_cast<unsigned>(groups)),
                             dim3(static_cast<unsigned>(plan.terms_threads)), 0, target,
                             "gn_forward_slice_terms", layout, carve_scratch(target.scratch, layout), a);
        });
    });
    if (plan.packed.vectors > 0) {
        with_element_type(p.x.dtype, [&](auto x_tag) {
            launch_packed_normalize<typename decltype(x_tag)::type>(p, plan.packed, carve_scratch(target.scratch, layout),
                                                                   target);
        });
    } else {
        run_normalize(p.x, p.y, layout, Blend{}, p.activation, p.swish_beta, target, PackedWalk::linear);
    }
}

}  // namespace gpu
}  // namespace mbn
