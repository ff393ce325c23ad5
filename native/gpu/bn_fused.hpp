// Single-launch batch norm for problems whose blocks own their features'
// whole reduction (layout.splits == 1): statistics, their finish and the
// elementwise pass run in one kernel, x (and dy) re-read from cache by the
// block that just reduced them.  Small and medium tensors are dominated by
// launches (each a few microseconds on an H100), so this path is the fast
// one there; bn_forward.hip / bn_backward.hip fall back to the multi-launch
// sequence when there are several splits.
#pragma once

#include "common/problem.hpp"
#include "gpu/bn_launch.hpp"

namespace mbn {
namespace gpu {

// True when `layout` suits the single-launch kernels and they are not
// switched off (MIOPEN_BN_GPU_SINGLE_LAUNCH=0 keeps the multi-launch path:
// for comparing the two in the bench).
bool use_single_launch(const BnLayout& layout);

// Two blocks per multiprocessor at least (at most 128 registers): the double
// arithmetic of the backward kernel would otherwise take ~146, one block per
// multiprocessor, too few loads in flight to stream.
constexpr int kSingleLaunchMinBlocks = 2;


void run_training_single_launch(const TensorArg& x, const TensorArg& y, double epsilon, const StatsWrites& writes,
                                const Blend& out, const ActivationSpec& activation, const BnLayout& layout,
                                const LaunchTarget& target);

void run_backward_single_launch(const BnBackward& p, const BnLayout& layout, const LaunchTarget& target);

}  // namespace gpu
}  // namespace mbn
