// Host-side planning of a validated group-norm problem: how the kernels walk
// it (gn_layout.hpp) and how much scratch it needs (gn_scratch.hpp).
#pragma once

#include "common/group_norm_problem.hpp"
#include "gpu/bn_planner.hpp"
#include "gpu/gn_layout.hpp"
#include "gpu/gn_scratch.hpp"

namespace mbn {
namespace gpu {

// The slices (n, c) by positions as a BnLayout (slots x, y or dy, dx), and
// how they are numbered.
struct GnSlicePlan {
    BnLayout layout;
    GnSliceOrder order;
};

struct GnForwardPlan {
    // Channels innermost in memory and few per group: a group's elements
    // are short runs a whole row apart, which the chunk walk reads poorly.
    // Then per-slice statistics over the slice layout, merged per group,
    // and a normalize over the same layout (x read twice, whole rows).
    bool by_slices;
    GnSlicePlan slices;  // when by_slices
    GnForwardWalk walk;  // otherwise: chunks of each group, held in registers
    GnChunks chunks;
    int width;  // elements per access: 16 bytes of x's type, or 1
    GnScratchNeeds needs;
};

struct GnBackwardPlan {
    GnSlicePlan slices;
    GnScratchNeeds needs;
};

GnForwardPlan plan_gn_forward(const GnForward& p, const DeviceShape& device);
GnBackwardPlan plan_gn_backward(const GnBackward& p, const DeviceShape& device);

}  // namespace gpu
}  // namespace mbn
