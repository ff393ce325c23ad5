// Spatial batch-norm training and backward on small packed tensors held in
// registers by waves, float32 parameters, half, bfloat16 or float data of
// one type, no fused activation: the algorithm wave_tiles.
//   NCHW (bn_wave_tile.hip): each wave of a block owns a channel, a lane the
//     plane positions lane, lane + W, ... of every sample, up to 16 values
//     a lane and tensor.
//   NHWC (bn_wave_tile_nhwc.hip): each block owns a tile of the channels of
//     one or two 16-byte vectors of a row, its lanes the rows side by side,
//     up to 4 vectors a lane and tensor, its waves adding their sums through
//     shared memory.
#pragma once

#include "common/problem.hpp"
#include "gpu/bn_launch.hpp"
#include "gpu/bn_planner.hpp"

#include <cstdint>

namespace mbn {
namespace gpu {

struct WaveTilePlan {
    bool usable = false;
    bool nhwc = false;
    int plane_slots = 0;  // NCHW: slots a lane takes in one plane: ceil(H*W / wave) rounded up to 1, 2, 4 or 8
    int row_slots = 0;    // NHWC: rows (16-byte vectors) a lane holds per tensor: 1, 2 or 4
    int lanes = 0;        // NHWC: lanes side by side across a row of the tile, 1 or 2
    int threads = 0;
    std::int64_t blocks = 0;
};

WaveTilePlan plan_wave_tiles(const BnForwardTraining& p, const DeviceShape& device, PlanRule rule);
WaveTilePlan plan_wave_tiles(const BnBackward& p, const DeviceShape& device, PlanRule rule);
void run_wave_tiles(const BnForwardTraining& p, const WaveTilePlan& plan, const LaunchTarget& target);
void run_wave_tiles(const BnBackward& p, const WaveTilePlan& plan, const LaunchTarget& target);

}  // namespace gpu
}  // namespace mbn
