// Host-side planning of a validated group-norm problem: how the kernels walk
// it (gn_layout.hpp) and how much scratch it needs (gn_scratch.hpp).
#pragma once

#include "common/group_norm_problem.hpp"
#include "gpu/bn_planner.hpp"
#include "gpu/gn_layout.hpp"
#include "gpu/gn_scratch.hpp"
#include "gpu/gn_tile.hpp"

namespace mbn {
namespace gpu {

// The slices (n, c) by positions as a BnLayout (slots x, y or dy, dx), and
// how they are numbered.
struct GnSlicePlan {
    BnLayout layout;
    GnSliceOrder order;
};

// Which kernels run a call.  On chip (gn_tile.hpp): one launch, data read
// once; taken whenever the problem fits them (float64, mixed layouts,
// unaligned tensors and groups too large for a cluster's registers do not).
// MIOPEN_BN_GN_ONCHIP overrides the choice: 0 never, 1 whenever the problem
// fits (the default), 2 the same and a problem that does not fit fails
// (NotImplemented; for tests that must run these kernels).
struct GnForwardPlan {
    bool on_chip;
    GnTileWalk tiles;  // when on_chip
    // Otherwise: channels innermost in memory and few per group: a group's elements
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
    bool on_chip;
    GnTileWalk tiles;    // when on_chip
    GnSlicePlan slices;  // otherwise
    GnScratchNeeds needs;
};

GnForwardPlan plan_gn_forward(const GnForward& p, const DeviceShape& device);
GnBackwardPlan plan_gn_backward(const GnBackward& p, const DeviceShape& device);

}  // namespace gpu
}  // namespace mbn
