// Backward group norm from the forward's saved mean and rstd.  With
// xhat = (x - mean) * rstd, z = xhat * w + b (what the activation saw) and
// g = dy * act'(z) (g = dy without activation), over each group of M values:
//   dbias[c]   = sum over samples and positions of g
//   dweight[c] = sum over samples and positions of g * xhat
//   dx         = rstd * (w g - mean(w g) - xhat * mean(w g xhat))
// (the two group means come from differentiating the group's mean and
// variance inside xhat; eps stays inside rstd).
//
// Three launches over a FeatureLayout whose features are the slices (n, c) -- the
// positions of channel c of sample n -- and whose reduction is the positions
// (gn_planner.hpp), in any layout:
//   1. gn_backward_slices (gn_backward_walks.h): per (split, slice) sums of
//      g and g * xhat;
//   2. gn_backward_finalize (gn_backward_finalize.h): a team of threads per
//      group merges its slices' sums into the group's two means, one per
//      channel writes dbias and dweight, each in a fixed order
//      (deterministic);
//   3. gn_backward_apply (gn_backward_walks.h): dx; on packed NCHW-like
//      tensors gn_backward_packed_apply (GnPackedWalk, gn_layout.hpp).
// The hand-over between 1 and 2 is a launch, not a last-block-done count:
// with channels innermost (NHWC) every block holds many slices, and counting
// each (split, slice) serialized on a few counters cost ten times the
// kernel's reads (seen on the H100).
#include "gpu/gn_backward_finalize.h"
#include "gpu/gn_backward_walks.h"
#include "gpu/gn_launch.hpp"
#include "gpu/launch.hpp"

namespace mbn {
namespace gpu {
namespace {

// The finalize (gn_backward_finalize.h): plan_finalize's grid of 1-D blocks.
template <typename P>
__global__ void __launch_bounds__(kBlockThreads) gn_backward_finalize(GnFinalizeArgs<P> f) {
    __shared__ Sums2<double> wave_totals[kBlockThreads / MBN_WAVE_SIZE];
    allow_dependent_launch();  // the apply
    wait_for_prior_kernel();   // the slices' sums
    finalize_block(f, wave_totals);
}

template <typename P>
void launch_finalize(const GnFinalizeArgs<P>& f, const LaunchTarget& target) {
    launch_dependent(gn_backward_finalize<P>, dim3(f.blocks), dim3(kBlockThreads), 0, target, "gn_backward_finalize",
                     f);
}
}  // namespace

void run_gn_backward(const GnBackward& p, const GnBackwardPlan& plan, const LaunchTarget& target) {
    const FeatureLayout& layout = plan.slices.layout;
    with_backward_walks(p, plan.slices, target.scratch,
                        [&](auto slices, auto apply, auto packed_apply, const auto& a, const auto& finalize, auto x,
                            auto dy, auto dx) {
                            slices<<<walk_grid(layout), walk_block(layout), 0, target.stream>>>(x, dy, layout, a);
                            check_launch("gn_backward_slices");
                            launch_finalize(finalize, target);
                            const GnPackedWalk& packed = plan.slices.packed;
                            if (packed.vectors > 0)
                                launch_dependent(packed_apply, packed_walk_grid(packed),
                                                 dim3(static_cast<unsigned>(packed.threads)), 0, target,
                                                 "gn_backward_packed_apply", x, dy, dx, packed, a);
                            else
                                launch_dependent(apply, walk_grid(layout), walk_block(layout), 0, target,
                                                 "gn_backward_apply", x, dy, dx, layout, a);
                        });
}

}  // namespace gpu
}  // namespace mbn
