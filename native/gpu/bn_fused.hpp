// Single-launch batch norm for problems whose blocks own their features'
// whole reduction (layout.splits == 1): statistics, their finish and the
// elementwise pass run in one kernel, x (and dy) re-read from cache by the
// block that just reduced them.  Small and medium tensors are dominated by
// launches (each a few microseconds on an H100), so this path is the fast
// one there; the others take the multi-launch sequence (multi_pass).
#pragma once

#include "common/problem.hpp"
#include "gpu/bn_launch.hpp"

namespace mbn {
namespace gpu {

// True when `layout` suits the single-launch kernels (the algorithm
// single_launch): each block owns its features' whole reduction.
inline bool single_launch_fits(const FeatureLayout& layout) {
    return layout.splits == 1 &&
           static_cast<std::int64_t>(layout.tile_features) * layout.features_per_thread <= kBlockThreads;
}

// Two blocks per multiprocessor at least (at most 128 registers): the double
// arithmetic of the backward kernel would otherwise take ~146, one block per
// multiprocessor, too few loads in flight to stream.
constexpr int kSingleLaunchMinBlocks = 2;


void run_training_single_launch(const TensorArg& x, const TensorArg& y, double epsilon, const StatsWrites& writes,
                                const Blend& out, const ActivationSpec& activation, const FeatureLayout& layout,
                                const LaunchTarget& target);

void run_backward_single_launch(const BnBackward& p, const FeatureLayout& layout, const LaunchTarget& target);

}  // namespace gpu
}  // namespace mbn
