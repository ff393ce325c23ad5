// Spatial batch-norm training and backward on packed NCHW channels that one
// wave holds in registers (bn_wave_tile.hip): each wave of a block owns a
// channel, a lane the plane positions lane, lane + W, ... of every sample,
// up to 16 values a lane and tensor.  Half, bfloat16 or float data of one
// type, no fused activation: the algorithm wave_tiles.
#pragma once

#include "common/problem.hpp"
#include "gpu/bn_launch.hpp"
#include "gpu/bn_planner.hpp"

#include <cstdint>

namespace mbn {
namespace gpu {

struct WaveTilePlan {
    bool usable = false;
    int plane_slots = 0;  // slots a lane takes in one plane: ceil(H*W / wave) rounded up to 1, 2, 4 or 8
    int threads = 0;
    std::int64_t blocks = 0;
};

WaveTilePlan plan_wave_tiles(const BnForwardTraining& p, const DeviceShape& device, PlanRule rule);
WaveTilePlan plan_wave_tiles(const BnBackward& p, const DeviceShape& device, PlanRule rule);
void run_wave_tiles(const BnForwardTraining& p, const WaveTilePlan& plan, const LaunchTarget& target);
void run_wave_tiles(const BnBackward& p, const WaveTilePlan& plan, const LaunchTarget& target);

}  // namespace gpu
}  // namespace mbn
