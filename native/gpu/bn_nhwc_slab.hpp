// Spatial batch-norm training and backward (from saved statistics) on packed
// NHWC tensors, in one launch that reads x (and dy) from DRAM once
// (bn_nhwc_slab.hip).
//
// Each block owns a slab of whole rows (a row: the C channels of one pixel,
// or a chunk of up to 64 vectors of them) and keeps it in registers; the
// grid meets once at a grid-wide barrier to hand over per-channel sums, the
// blocks of a thread-block cluster (Hopper) having merged theirs through
// distributed shared memory first.  Rows are read whole, so every DRAM
// access is a full, contiguous line: what the per-channel tiles cannot give
// NHWC once a channel's values spread over more rows than a block holds.
//
// Usable for half, bfloat16 and float data aligned to 16 bytes with C a
// multiple of the 16-byte vector, no fused activation, when the grid that
// holds the tensor is resident at once.  Opt-in for now (bn_nhwc_slab.hip
// says why): only MIOPEN_BN_GPU_ALGORITHM=nhwc_slabs takes it.
#pragma once

#include "common/problem.hpp"
#include "gpu/bn_launch.hpp"
#include "gpu/bn_planner.hpp"

#include <cstddef>
#include <cstdint>

namespace mbn {
namespace gpu {

struct NhwcSlabPlan {
    bool usable = false;
    int vector = 1;          // elements per access (16 bytes)
    int lanes = 1;           // threads across a row chunk: its vectors
    int chunks = 1;          // row chunks across C
    int row_threads = 1;     // rows a block steps over at once
    int per_thread = 1;      // vectors each thread holds per tensor
    int cluster = 1;         // blocks per group sharing sums on chip
    std::int64_t groups = 0; // groups per chunk
    std::size_t scratch_bytes = 0;
    std::int64_t counters = 1;
    int threads() const { return lanes * row_threads; }
    std::int64_t blocks() const { return chunks * groups * cluster; }
};

NhwcSlabPlan plan_nhwc_slabs(const BnForwardTraining& p, const DeviceShape& device);
NhwcSlabPlan plan_nhwc_slabs(const BnBackward& p, const DeviceShape& device);
void run_nhwc_slabs(const BnForwardTraining& p, const NhwcSlabPlan& plan, const LaunchTarget& target);
void run_nhwc_slabs(const BnBackward& p, const NhwcSlabPlan& plan, const LaunchTarget& target);

}  // namespace gpu
}  // namespace mbn
