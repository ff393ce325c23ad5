// Host-side planning of a validated group-norm problem: how the kernels walk
// it (gn_layout.hpp) and how much scratch it needs (gn_scratch.hpp).
#pragma once

#include "common/group_norm_problem.hpp"
#include "gpu/bn_planner.hpp"
#include "gpu/gn_layout.hpp"
#include "gpu/gn_scratch.hpp"

namespace mbn {
namespace gpu {

struct GnForwardPlan {
    GnForwardWalk walk;
    GnChunks chunks;
    int width;  // elements per access: 16 bytes of x's type, or 1
    GnScratchNeeds needs;
};

struct GnBackwardPlan {
    BnLayout layout;  // rows (n, c) by positions; slots x, dy, dx
    // Row index of (n, c): c * N + n when x's channel stride exceeds its
    // sample stride (the nest then puts channels outside), else n * C + c.
    bool channel_major;
    GnScratchNeeds needs;
};

GnForwardPlan plan_gn_forward(const GnForward& p, const DeviceShape& device);
GnBackwardPlan plan_gn_backward(const GnBackward& p, const DeviceShape& device);

}  // namespace gpu
}  // namespace mbn
