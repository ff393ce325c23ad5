// Launching an on-chip group-norm kernel (gn_tile.hpp): tiles * cluster
// blocks, each tile's blocks one thread-block cluster where the target has
// them (the host never asks for more than one block per tile elsewhere).
// Host code of the .hip files only.
#pragma once

#include "gpu/cluster_launch.h"
#include "gpu/gn_tile.hpp"
#include "gpu/hip_compat.h"
#include "gpu/launch.hpp"

namespace mbn {
namespace gpu {

// Clusters of `blocks` blocks of `kernel` (blocks of `threads` threads and
// the most shared memory the planner gives them) that can run at once on
// the current device: 0 where such clusters cannot be launched.
template <typename... Params>
int resident_clusters(void (*kernel)(Params...), int threads, int blocks) {
#if MBN_GPU_CUDA
    cudaLaunchAttribute attribute;
    const cudaLaunchConfig_t config = cluster_config(dim3(static_cast<unsigned>(blocks)),
                                                     dim3(static_cast<unsigned>(threads)), kGnTileMaxSharedBytes,
                                                     nullptr, blocks, attribute);
    int resident = 0;
    if (cudaOccupancyMaxActiveClusters(&resident, kernel, &config) == cudaSuccess) return resident;
    (void)cudaGetLastError();
#else
    (void)kernel;
    (void)threads;
    (void)blocks;
#endif
    return 0;
}

template <typename... Params, typename... Args>
void launch_tile_kernel(void (*kernel)(Params...), const GnTileWalk& w, hipStream_t stream, const char* name,
                        Args... args) {
    launch_clustered(kernel, dim3(static_cast<unsigned>(w.tiles() * w.cluster)), dim3(static_cast<unsigned>(w.threads)),
                     static_cast<std::size_t>(w.shared_bytes), w.launch_cluster(), stream, name, args...);
}

}  // namespace gpu
}  // namespace mbn
