// Spatial batch-norm training and backward with each tile of channels owned
// by one block or one thread-block cluster, its values held in registers
// between the statistics and the output (bn_channel_tile.hip): packed NCHW
// (a tile is a channel) or NHWC (8-16 channels), half, bfloat16 or float,
// without a fused activation, up to 2048 vectors of x (16 bytes or the
// widest that divides an NCHW plane) per block and 8 blocks per tile.
// The algorithm channel_tiles (bn_algorithm.hip orders it after wave_tiles,
// bn_wave_tile.hpp), streamed tiles included: one block per NCHW channel too
// large for its registers (float data: a cluster where the channels are
// fewer than the multiprocessors), the rest read twice, the second time
// from L2 where it is still there.
#pragma once

#include "common/problem.hpp"
#include "gpu/bn_launch.hpp"
#include "gpu/bn_planner.hpp"

#include <cstdint>

namespace mbn {
namespace gpu {

struct ChannelTilePlan {
    bool usable = false;
    bool nhwc = false;
    bool stream = false;  // NCHW channels, the units past the blocks' registers streamed (read again, from L2)
    int vector = 1;      // elements per access
    int lanes = 1;       // threads across a row of an NHWC tile
    int per_thread = 1;  // vectors each thread holds per tensor
    int threads = 0;
    int cluster = 1;     // blocks per tile
    bool small_grid = false;  // NHWC in clusters of at most 4 blocks on at most 2/3 of the multiprocessors: ahead of the columns
    std::int64_t tiles = 0;
    std::int64_t blocks = 0;
    std::int64_t units = 0;        // vectors (NCHW) or rows (NHWC) per tile
    std::int64_t block_units = 0;  // of them per block
};

ChannelTilePlan plan_channel_tiles(const BnForwardTraining& p, const DeviceShape& device, PlanRule rule);
ChannelTilePlan plan_channel_tiles(const BnBackward& p, const DeviceShape& device, PlanRule rule);
void run_channel_tiles(const BnForwardTraining& p, const ChannelTilePlan& plan, const LaunchTarget& target);
void run_channel_tiles(const BnBackward& p, const ChannelTilePlan& plan, const LaunchTarget& target);

}  // namespace gpu
}  // namespace mbn
