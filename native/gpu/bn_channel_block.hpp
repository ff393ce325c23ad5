// Spatial batch-norm training and backward with one block per channel, for
// packed NCHW half, bfloat16 or float tensors with at most 2048 values per
// channel (bn_channel_block.hip).  Taken first (unless
// MIOPEN_BN_GPU_RESIDENT=force); other calls take the one-launch kernel
// (bn_resident.hpp) or the multi-pass ones.  MIOPEN_BN_GPU_CHANNEL_BLOCKS=0
// turns it off.
#pragma once

#include "common/problem.hpp"
#include "gpu/bn_launch.hpp"

namespace mbn {
namespace gpu {

bool channel_blocks_fit(const BnForwardTraining& p);
bool channel_blocks_fit(const BnBackward& p);
void run_channel_blocks(const BnForwardTraining& p, const LaunchTarget& target);
void run_channel_blocks(const BnBackward& p, const LaunchTarget& target);

}  // namespace gpu
}  // namespace mbn
