// One-launch batch norm for dense tensors that fit on chip ("resident").
//
// Covers spatial batch-norm training and backward on packed NCHW (NCDHW) or
// packed NHWC (NDHWC) tensors of half, bfloat16 or float whose share per
// block fits in shared memory.  One persistent block per multiprocessor
// copies its contiguous share of x (and dy) from DRAM into shared memory
// once, reduces it there, hands its partial sums to the grid through a
// grid barrier (grid_barrier.h), finishes a slice of the channels'
// statistics, meets the grid again, and writes y (or dx) from the copy it
// holds: DRAM sees every input byte once and every output byte once.
//
// plan_resident says whether a call qualifies (its tensors fit, and, by the
// size rule, they are large enough to amortize the launch's fixed cost:
// worth_one_launch); the other calls take the multi-pass kernels
// (bn_forward.hip, bn_backward.hip).
#pragma once

#include "common/problem.hpp"
#include "gpu/bn_launch.hpp"
#include "gpu/bn_planner.hpp"

#include <cstddef>
#include <cstdint>

namespace mbn {
namespace gpu {

// Where a call's work goes: the geometry every block derives its share
// from.  A "unit" is the smallest piece a block's share is made of: a row
// of C channels (NHWC) or a segment of one (n, c) plane (NCHW).
struct ResidentGeometry {
    int channels = 0;       // C
    int spatial = 0;        // S = D * H * W
    int samples = 0;        // N
    int units = 0;          // NHWC: N * S rows; NCHW: N * C * segments
    int segments = 1;       // NCHW: segments per plane
    int segment = 0;        // NCHW: elements per segment (the last may be shorter)
    int units_per_block = 0;
    int capacity = 0;       // elements of one tensor a block can hold
};

struct ResidentPlan {
    bool usable = false;
    bool channels_last = false;
    int blocks = 0;
    int threads = 0;
    std::size_t shared_bytes = 0;
    ResidentGeometry geom;
    std::size_t scratch_bytes = 0;
    std::int64_t counters = 0;
};

ResidentPlan plan_resident(const BnForwardTraining& p, const DeviceShape& device, PlanRule rule);
ResidentPlan plan_resident(const BnBackward& p, const DeviceShape& device, PlanRule rule);

void run_resident(const BnForwardTraining& p, const ResidentPlan& plan, const LaunchTarget& target);
void run_resident(const BnBackward& p, const ResidentPlan& plan, const LaunchTarget& target);

}  // namespace gpu
}  // namespace mbn
