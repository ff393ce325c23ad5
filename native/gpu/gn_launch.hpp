// The kernel sequences of group norm (gn_tile_forward.hip,
// gn_tile_backward.hip, gn_forward.hip, gn_forward_slices.hip,
// gn_backward.hip).  All work goes to the target's stream; nothing
// allocates or waits on the host.
#pragma once

#include "common/group_norm_problem.hpp"
#include "gpu/gn_planner.hpp"
#include "gpu/launch.hpp"

namespace mbn {
namespace gpu {

// On chip (gn_tile.hpp): one launch each.
void run_gn_tile_forward(const GnForward& p, const GnTileWalk& walk, const LaunchTarget& target);
void run_gn_tile_backward(const GnBackward& p, const GnTileWalk& walk, const LaunchTarget& target);

// The clusters the on-chip kernels may use on `device` (the current one)
// into shape.cluster_slots (the forward's), shape.backward_cluster_slots
// (each backward form's) and shape.cluster_blocks: none (1) unless the
// device launches clusters and the code it runs was built for them (sm_90
// on); then, per size, each kernel's clusters resident at once, and the
// largest size every kernel launches.
void measure_gn_tile_clusters(int device, DeviceShape& shape);
// gn_tile_backward.hip's part of it: the form of `per_multiprocessor` blocks.
int gn_tile_backward_resident_clusters(int blocks, int per_multiprocessor);

// By chunks (gn_chunks): one launch when each group fits one team, or when
// all chunks of every group can be resident at once; two (statistics, then
// output) otherwise.
// plan.resident_blocks decides between the last two: the blocks of the
// plan's kernel the device (the current one) holds at once, from
// gn_forward_chunk_residency when the chunks are planned.
void run_gn_forward(const GnForward& p, const GnForwardPlan& plan, const LaunchTarget& target);
std::int64_t gn_forward_chunk_residency(const GnForward& p, const GnForwardPlan& plan, const DeviceShape& device);
bool chunk_passes_resident(const GnForwardPlan& plan);  // one launch for chunks of several blocks

// Persistent (gn_persistent.hpp): one launch of blocks that must all be
// resident; gn_persistent_resident says whether they are on `device` (the
// current one), with the walk's shared memory.
bool gn_persistent_resident(const GnForward& p, const GnPersistentWalk& walk, const DeviceShape& device);
void run_gn_forward_persistent(const GnForward& p, const GnPersistentWalk& walk, int rounds,
                               const LaunchTarget& target);
bool gn_persistent_backward_resident(const GnBackward& p, const GnPersistentWalk& walk, const DeviceShape& device);
void run_gn_backward_persistent(const GnBackward& p, const GnPersistentWalk& walk, const LaunchTarget& target);

// The blocks of a persistent kernel a multiprocessor holds with the walk's
// threads and dynamic shared memory (which it is first allowed).
template <typename Kernel>
int resident_blocks_of(Kernel kernel, const GnPersistentWalk& walk) {
    int per_multiprocessor = 0;
#if MBN_GPU_CUDA
    check_runtime(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                       static_cast<int>(walk.shared_bytes)),
                  "cudaFuncSetAttribute");
#endif
    check_runtime(
        hipOccupancyMaxActiveBlocksPerMultiprocessor(&per_multiprocessor, kernel, walk.threads, walk.shared_bytes),
        "hipOccupancyMaxActiveBlocksPerMultiprocessor");
    return per_multiprocessor;
}

// By slices (gn_slices, gn_forward_slices.hip): three launches.
void run_gn_forward_slices(const GnForward& p, const GnSlicePlan& plan, const LaunchTarget& target);

// By slices (gn_slices, gn_backward.hip), three launches: per-row sums;
// their merge per group and per channel; dx.
void run_gn_backward(const GnBackward& p, const GnBackwardPlan& plan, const LaunchTarget& target);

inline GnStatTensor stat_tensor(const TensorArg& t) {
    return GnStatTensor{t.data, t.dtype == DType::f64, t.stride[kN], t.stride[kC]};
}

}  // namespace gpu
}  // namespace mbn
