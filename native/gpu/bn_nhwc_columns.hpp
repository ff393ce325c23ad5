// One-launch batch-norm training and backward on packed NHWC (NDHWC)
// tensors, cut into channel columns.
//
// A column is the channels of 128 bytes of a row (8 vectors of 16 bytes: 64
// half or 32 float channels), or of 64 bytes where x is under 32 MB, a
// column of 128 bytes would need more blocks than one batch of the fold's
// loads covers, and its threads would hold at least half their rows; fewer
// where C does not divide into that.  Each column gets its own blocks, and
// each block a contiguous run of rows: its threads load the rows' vectors of
// the column into registers, all loads in flight together, rows past the
// registers streamed; the block sums its channels and stores its partial
// sums; the column's blocks meet (grid_barrier.h's hand-over) and fold them,
// each block all of them in the same order where the column has few blocks,
// as a tree of teams whose last folder publishes the totals where it has
// many; every block finishes the column's coefficients; then y (or dx) is
// written from the registers, the streamed rows read again in reverse order
// so that the latest ones still sit in L2.
//
// Only blocks of one column wait for each other, at one hand-over (two for
// backward without saved statistics); the grid is sized so that every block
// is resident.  Deterministic: fixed summation order, no float atomics.
#pragma once

#include "common/problem.hpp"
#include "gpu/bn_launch.hpp"
#include "gpu/bn_planner.hpp"

#include <cstddef>
#include <cstdint>

namespace mbn {
namespace gpu {

struct ColumnPlan {
    bool usable = false;
    int columns = 0;            // channel columns (gridDim.y)
    int lanes = 0;              // 16-byte vectors side by side in a column's row
    int blocks_per_column = 0;  // gridDim.x
    int rows_per_block = 0;
    int register_rows = 0;      // rows a thread holds in registers (the kernel instance)
    bool streamed = false;      // rows past the register rows streamed (the instance with the streamed loops)
    int team_size = 0;          // columns of many blocks fold in teams of this many
    int teams = 0;              // per column (1: every block folds all partials)
    std::size_t scratch_bytes = 0;
    std::int64_t counters = 0;  // per column 1 + teams
};

// The size rule (rule == size_rule): from 1 MB of input and 1024 rows;
// below either the channel tiles are faster.
ColumnPlan plan_nhwc_columns(const BnForwardTraining& p, const DeviceShape& device, PlanRule rule);
ColumnPlan plan_nhwc_columns(const BnBackward& p, const DeviceShape& device, PlanRule rule);

void run_nhwc_columns(const BnForwardTraining& p, const ColumnPlan& plan, const LaunchTarget& target);
void run_nhwc_columns(const BnBackward& p, const ColumnPlan& plan, const LaunchTarget& target);

}  // namespace gpu
}  // namespace mbn
