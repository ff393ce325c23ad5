// The NHWC columns' planner (bn_nhwc_columns.hpp): how many channels a
// column takes, how many blocks and register rows it gets, and how its
// blocks fold.  Host code apart from the launch so that a host check
// (tests/gpu/emulation/bn_columns_check.cpp) plans on a model device, its
// occupancy given; bn_nhwc_columns.hip asks the runtime's.  Include it in
// one translation unit only, after bn_nhwc_columns_kernel.h.
#pragma once

#include "common/numerics.hpp"
#include "gpu/bn_nhwc_columns.hpp"
#include "gpu/feature_plan.hpp"
#include "gpu/launch.hpp"

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <initializer_list>

namespace mbn {
namespace gpu {
namespace {

// Where the columns beat the channel tiles: from a megabyte of input and
// 1024 rows.  Below 1024 rows (wide and short: 8x2048x7x7, 4x1024x14x14)
// the tiles' cluster hand-over is the cheaper one, for every type since
// the tiles' rework (H200, bench/RESULTS.md "size rules": half 8x2048x7x7
// training 12.5 -> 9.4 us; no row from 1024 rows moved).
bool worth_columns(std::int64_t input_bytes, std::int64_t rows) {
    return input_bytes >= (std::int64_t(1) << 20) && rows >= 1024;
}

// x from this size on: columns of 128-byte rows.
constexpr std::int64_t kFullLineBytes = std::int64_t(32) << 20;

// The register rows of an op's instances, in order: 1, 2, 4 and 8, and for
// backward 6 between 4 and 8.
template <bool kBackward>
constexpr int next_register_rows(int k) {
    return kBackward && k == 4 ? 6 : kBackward && k == 6 ? 8 : k * 2;
}

// The plan for columns of `lanes` 16-byte vectors (fewer where C does not
// divide into them).
template <bool kBackward, typename Occupancy>
ColumnPlan plan_for_lanes(DType dtype, std::int64_t channels, std::int64_t rows, int lanes,
                          const DeviceShape& device, const Occupancy& blocks_per_multiprocessor) {
    ColumnPlan plan;
    const int V = 16 / static_cast<int>(dtype_size(dtype));
    while ((channels / V) % lanes != 0) lanes /= 2;
    const std::int64_t columns = channels / (lanes * V);
    if (columns > 65535) return plan;
    const std::int64_t stride = kThreads / lanes;

    // Blocks of the instance with k register rows the device holds at once
    // (with the most register rows, of either instance, streamed or not).
    auto resident_blocks = [&](int k) {
        int per_multiprocessor = blocks_per_multiprocessor(k, false);
        if (k == column_streamed_rows<kBackward>())
            per_multiprocessor = std::min(per_multiprocessor, blocks_per_multiprocessor(k, true));
        return static_cast<std::int64_t>(per_multiprocessor) * device.multiprocessors;
    };

    // The fewest register rows that hold every row at the grid the
    // instance's occupancy allows; where none does, the streamed instance's
    // (backward's 8-row instance, at one block a multiprocessor, only
    // serves the flat folds below).
    auto fit = [&](int k, bool stream) {
        const std::int64_t resident = resident_blocks(k);
        if (resident < 1) return false;
        // A block takes at least one row per thread; a team never outgrows
        // what is resident beside the other columns' teams.
        std::int64_t blocks = std::max<std::int64_t>(1, std::min(resident / columns, (rows + stride - 1) / stride));
        const std::int64_t per_block = (rows + blocks - 1) / blocks;
        blocks = (rows + per_block - 1) / per_block;
        const std::int64_t per_thread = (per_block + stride - 1) / stride;
        if (per_thread > k && !stream) return false;
        plan.register_rows = k;
        plan.blocks_per_column = static_cast<int>(blocks);
        plan.rows_per_block = static_cast<int>(per_block);
        return true;
    };
    bool planned = false;
    for (int k = 1; k <= column_held_rows<kBackward>() && !planned; k = next_register_rows<kBackward>(k))
        planned = fit(k, false);
    if (!planned && !fit(column_streamed_rows<kBackward>(), true)) return plan;
    // Where that needs a tree fold, fewer and fuller blocks whose registers
    // still hold every row fold flat: one wait instead of the tree's chain
    // of three (H200, bench/RESULTS.md "flat folds": half 2x64x56x56
    // backward 15.2 -> 13.0 us, 8x64x56x56 training 16.7 -> 15.5; letting
    // the flat fold take 128 blocks instead was slower).
    for (int k = plan.register_rows; plan.blocks_per_column > kMostFlatBlocks && k <= 8;
         k = next_register_rows<kBackward>(k)) {
        const std::int64_t per_block = stride * k;
        const std::int64_t blocks = (rows + per_block - 1) / per_block;
        if (blocks <= kMostFlatBlocks && blocks <= resident_blocks(k) / columns) {
            plan.register_rows = k;
            plan.blocks_per_column = static_cast<int>(blocks);
            plan.rows_per_block = static_cast<int>(per_block);
        }
    }
    plan.streamed = plan.rows_per_block > plan.register_rows * stride;
    const int B = plan.blocks_per_column;
    const ColumnTeams teams = column_teams(B);
    plan.team_size = teams.size;
    plan.teams = teams.count;
    plan.usable = true;
    plan.columns = static_cast<int>(columns);
    plan.lanes = lanes;
    const std::int64_t entry = static_cast<std::int64_t>(lanes) * V * 2;
    plan.scratch_bytes = static_cast<std::size_t>(scratch_layout(columns, B, plan.teams, entry).doubles) * sizeof(double);
    plan.counters = columns * (1 + plan.teams);
    return plan;
}

// The plan of a call: `blocks_per_multiprocessor(k, streamed)` is how many
// blocks of the instance with k register rows (streamed or not) a
// multiprocessor holds.
template <bool kBackward, typename Occupancy>
ColumnPlan plan_columns(const BnGeometry& geom, const TensorArg& x, std::initializer_list<const TensorArg*> data,
                        const DeviceShape& device, PlanRule rule, const Occupancy& blocks_per_multiprocessor) {
    ColumnPlan plan;
    if (geom.mode != BnMode::spatial) return plan;
    if (x.dtype != DType::f16 && x.dtype != DType::bf16 && x.dtype != DType::f32) return plan;
    if (x.order != MemoryOrder::packed_nhwc || !packed_alike(data)) return plan;  // data: x first
    const std::int64_t elements = x.element_count();
    const std::int64_t channels = geom.len[kC];
    const std::int64_t rows = geom.len[kN] * geom.spatial_size();
    const int element = static_cast<int>(dtype_size(x.dtype));
    const int V = 16 / element;
    if (elements >= (std::int64_t(1) << 31) || channels % V != 0 || rows < 2) return plan;
    if (kBackward && !float_backprop_enough(rows)) return plan;
    const int tensors = kBackward ? 2 : 1;
    if (rule == PlanRule::size_rule && !worth_columns(elements * element * tensors, rows)) return plan;

    // Rows of 128 bytes per column stream best (H200, bench/RESULTS.md
    // "128-byte NHWC columns": float 16x256x28x28 backward 1.17x over 64
    // bytes, half 64x1024x14x14 1.13x) unless the column's blocks then fold
    // in more than one batch of loads, or as a tree: every block folds every
    // partial, and 64-byte columns halve the blocks (half 16x256x28x28 and
    // 2x320x64x64 at 128 bytes: 0.89x-0.93x).  Where a thread streams more
    // rows than it holds, the full lines outweigh the fold (float
    // 16x128x56x56 backward 1.16x-1.18x, half 32x64x56x56 1.05x, as a
    // tree); so does 32 MB of x.
    const ColumnPlan wide =
        plan_for_lanes<kBackward>(x.dtype, channels, rows, kMaxLanes, device, blocks_per_multiprocessor);
    if (wide.usable) {  // (an unusable plan has no lanes to divide by)
        const bool one_batch =
            wide.teams == 1 && wide.blocks_per_column <= kFoldBatch * (kThreads / (wide.lanes * V));
        const bool streams_most = wide.rows_per_block > 2 * wide.register_rows * (kThreads / wide.lanes);
        if (one_batch || streams_most || elements * element >= kFullLineBytes) return wide;
    }
    return plan_for_lanes<kBackward>(x.dtype, channels, rows, kMaxLanes / 2, device, blocks_per_multiprocessor);
}

// The kernel's arguments a plan fixes (the callers add the tensors, the
// parameters and the scalars): its shape, and the scratch and counters of
// `target` carved as scratch_layout lays them out.
ColumnArgs common_args(const ColumnPlan& plan, const BnGeometry& geom, const LaunchTarget& target) {
    ColumnArgs a{};
    a.channels = static_cast<int>(geom.len[kC]);
    a.rows = static_cast<int>(geom.len[kN] * geom.spatial_size());
    a.count = static_cast<double>(a.rows);
    a.inv_count = 1.0 / a.count;
    a.unbiased_ratio = unbiased_ratio(a.count);
    a.lanes = plan.lanes;
    a.blocks_per_column = plan.blocks_per_column;
    a.rows_per_block = plan.rows_per_block;
    a.team_size = plan.team_size;
    a.teams = plan.teams;
    const ScratchLayout s = scratch_layout(plan.columns, plan.blocks_per_column, plan.teams, a.channels / plan.columns * 2);
    a.partials = static_cast<double*>(target.scratch);
    a.team_partials = a.partials + s.team_partials;
    a.totals = a.partials + s.totals;
    a.counters = target.counters;
    return a;
}

}  // namespace
}  // namespace gpu
}  // namespace mbn
