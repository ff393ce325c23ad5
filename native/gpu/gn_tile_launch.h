// Launching an on-chip group-norm kernel (gn_tile.hpp): tiles * cluster
// blocks, each tile's blocks one thread-block cluster where the target has
// them (the host never asks for more than one block per tile elsewhere).
// Host code of the .hip files only.
#pragma once

#include "gpu/bn_launch.hpp"
#include "gpu/cluster_launch.h"
#include "gpu/gn_tile.hpp"
#include "gpu/hip_compat.h"

namespace mbn {
namespace gpu {

// The most blocks (a power of two, up to kGnTileMaxCluster) a cluster of
// `kernel` may hold on the current device with blocks of `threads` threads
// and the most shared memory the planner gives them: 1 where clusters
// cannot be launched or none of that size can be resident.
template <typename... Params>
int largest_cluster(void (*kernel)(Params...), int threads) {
#if MBN_GPU_CUDA
    for (int blocks = kGnTileMaxCluster; blocks > 1; blocks /= 2) {
        cudaLaunchAttribute attribute;
        const cudaLaunchConfig_t config = cluster_config(dim3(static_cast<unsigned>(blocks)),
                                                         dim3(static_cast<unsigned>(threads)), kGnTileMaxSharedBytes,
                                                         nullptr, blocks, attribute);
        int resident = 0;
        if (cudaOccupancyMaxActiveClusters(&resident, kernel, &config) == cudaSuccess && resident > 0) return blocks;
        (void)cudaGetLastError();
    }
#else
    (void)kernel;
    (void)threads;
#endif
    return 1;
}

template <typename... Params, typename... Args>
void launch_tile_kernel(void (*kernel)(Params...), const GnTileWalk& w, hipStream_t stream, const char* name,
                        Args... args) {
    launch_clustered(kernel, dim3(static_cast<unsigned>(w.tiles() * w.cluster)), dim3(static_cast<unsigned>(w.threads)),
                     static_cast<std::size_t>(w.shared_bytes), w.cluster, stream, name, args...);
}

}  // namespace gpu
}  // namespace mbn
