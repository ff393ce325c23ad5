// The two launches of a per-feature reduction that batch norm and group
// norm's slices share (feature_passes.hip defines them): the
// per (split, feature) moments into the scratch partials (feature_scratch.hpp),
// and the elementwise normalize from the scratch's per-feature factors.
#pragma once

#include "common/group_norm_problem.hpp"
#include "common/problem.hpp"
#include "gpu/feature_layout.hpp"
#include "gpu/launch.hpp"

namespace mbn {
namespace gpu {

// The cursor the two launches walk a packed layout's reduction (a nest of
// rank <= 1) with: the nest cursor, one batch of loads a thread (batch
// norm), or the linear walk (LinearCursor, nest_walk.h), about 64 bytes a
// thread loaded before the math and the tail as one guarded group (group
// norm's slices).  Other layouts take the nest cursor either way.
enum class PackedWalk { nest, linear };

// Per (split, feature) moments of x and each feature's shift, into the
// scratch partials (batch norm's statistics launch alone; group norm merges
// them per group itself).
void run_statistics_partials(const TensorArg& x, const FeatureLayout& layout, const LaunchTarget& target,
                             PackedWalk packed = PackedWalk::nest);

// The forward's last launch: y = act(((x - shift) - mean_offset) * coef0 +
// coef1) per feature from the scratch, blended as `out` says; act is the
// identity for batch norm, Swish with swish_beta where group norm fuses it.
void run_normalize(const TensorArg& x, const TensorArg& y, const FeatureLayout& layout, const Blend& out,
                   Activation activation, float swish_beta, const LaunchTarget& target,
                   PackedWalk packed = PackedWalk::nest);

}  // namespace gpu
}  // namespace mbn
