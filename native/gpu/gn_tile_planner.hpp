// Host-side cut of a group-norm problem into tiles for the on-chip kernels
// (gn_tile.hpp), or why they cannot take it.
#pragma once

#include "common/group_norm_problem.hpp"
#include "gpu/feature_plan.hpp"
#include "gpu/gn_tile.hpp"

#include <initializer_list>

namespace mbn {
namespace gpu {

// Fills `walk` and returns nullptr when the kernels take the problem, else
// a phrase saying why not.  `data`: every data tensor of the call, x first
// (x and y, or x, dy and dx); `backward` picks the kernel (its registers).
const char* plan_gn_tiles(const GnShape& shape, std::initializer_list<const TensorArg*> data, bool backward,
                          const DeviceShape& device, GnTileWalk& walk);

// Whether a forward plan's clusters run long: three rounds or more of
// register-only clusters, or streamed parts of more than twice the slots
// its registers hold.  There the persistent forward (gn_persistent.hpp), one
// round with one fixed chain of latencies, ran faster where its blocks are
// full (H200, bench/RESULTS.md, thirty-second session).
bool gn_tiles_run_long(const GnTileWalk& walk, const DeviceShape& device);

// Whether a backward plan yields to the persistent backward where that
// takes the call:
// - channels inner (NHWC) in three rounds of clusters or more: there the
//   persistent backward ran 1.16x-1.32x faster (H200, bench/RESULTS.md,
//   thirty-eighth session: 2x1280x64x64 half NHWC 54.1 -> 40.9 us,
//   bfloat16 54.8 -> 43.6, 2x640x64x64 float 39.1 -> 33.6);
// - positions inner in the streamed two-block form, whose blocks, fewer
//   than a round, spread one of 8 waves a multiprocessor, where the
//   persistent blocks hold the same data in 16 waves on each (forty-ninth
//   session, 1x1280x64x64 NCHW, the tiles against the persistent backward
//   with its merge spread over the block and no 64-bit division: bfloat16
//   25.9 against 23.1 us, half 24.6 against 22.9; the thirty-eighth's
//   persistent kernel had lost there, 26.3 against 27.8).
// Positions inner the other plans keep the lead (2x640x64x64 float NCHW
// 32.1 against 37.0, the wide streamed form).
bool gn_backward_tiles_yield(const GnTileWalk& walk, const DeviceShape& device);

}  // namespace gpu
}  // namespace mbn
