// Host-side planning of a validated group-norm problem: how the kernels walk
// it (gn_layout.hpp) and how much scratch it needs (gn_scratch.hpp).
#pragma once

#include "common/group_norm_problem.hpp"
#include "gpu/feature_plan.hpp"
#include "gpu/gn_layout.hpp"
#include "gpu/gn_persistent.hpp"
#include "gpu/gn_scratch.hpp"
#include "gpu/gn_tile.hpp"

namespace mbn {
namespace gpu {

// The slices (n, c) by positions as a FeatureLayout (slots x, y or dy, dx), and
// how they are numbered.
struct GnSlicePlan {
    FeatureLayout layout;
    GnSliceOrder order;
    int terms_threads;  // the forward's: its group-terms block (slice_terms_threads)
    GnPackedWalk packed;  // the last launch's where the data tensors are packed (vectors 0: not)
};

// The forward slices' group-terms block (gn_slice_terms.h): a thread holds
// at most kSliceTermsBatch of its group's partials in registers at a time,
// and a block has at most kSliceTermsMaxThreads threads.
constexpr int kSliceTermsBatch = 4;
constexpr int kSliceTermsMaxThreads = 1024;

// Its threads for a group of `partials` (channels x splits): enough that
// each holds one batch where the block allows, a whole number of waves.
int slice_terms_threads(std::int64_t partials, int wave_size);

// The plans of group norm's algorithms (algorithm_names.hpp; chosen in
// bn_algorithm.hip): each fills its own part.
struct GnForwardPlan {
    GnTileWalk tiles;    // gn_on_chip (gn_tile.hpp): one launch, data read once
    GnPersistentWalk persistent;  // gn_persistent (gn_persistent.hpp): one launch, x held on chip and in L2
    int rounds;          // gn_persistent: launches, each over an equal run of groups (plan_gn_persistent_rounds)
    GnSlicePlan slices;  // gn_slices: per-slice statistics over the slice layout,
                         // merged per group, and a normalize over the same layout
    GnForwardWalk walk;  // gn_chunks: chunks of each group, held in registers
    GnChunks chunks;
    int width;           // gn_chunks: elements per access, 16 bytes of x's type or 1
    std::int64_t resident_blocks;  // gn_chunks of several parts: chunk blocks resident at once (gn_launch.hpp)
    GnScratchNeeds needs;
};

struct GnBackwardPlan {
    GnTileWalk tiles;    // gn_on_chip
    GnPersistentWalk persistent;  // gn_persistent: one launch, x and dy held on chip and in L2
    GnSlicePlan slices;  // gn_slices
    GnScratchNeeds needs;
};

// On chip: nullptr when the tiles take the problem (float64, mixed layouts,
// unaligned tensors and groups too large for a cluster's registers do not),
// else a phrase saying why not.  Where the tiles fit, they beat the slices
// in both directions (bench/RESULTS.md, twenty-seventh session), so there is
// no size rule beyond fitting.
const char* plan_gn_forward_on_chip(const GnForward& p, const DeviceShape& device, GnForwardPlan& plan);
const char* plan_gn_backward_on_chip(const GnBackward& p, const DeviceShape& device, GnBackwardPlan& plan);

// Off chip, the forward: plan_gn_forward_walk fills the chunks' walk and
// their cut, and says whether the slices read x better: channels innermost
// in memory and few per group (a group's elements are short runs a whole row
// apart, which the chunk walk reads poorly), or groups of many chunks (which
// the chunk kernel, bound by its instructions, streams slower); then one of
// the two completes the plan.
bool plan_gn_forward_walk(const GnForward& p, const DeviceShape& device, GnForwardPlan& plan);
void plan_gn_forward_chunks(GnForwardPlan& plan);
void plan_gn_forward_slices(const GnForward& p, const DeviceShape& device, GnForwardPlan& plan);
void plan_gn_backward_slices(const GnBackward& p, const DeviceShape& device, GnBackwardPlan& plan);

}  // namespace gpu
}  // namespace mbn
