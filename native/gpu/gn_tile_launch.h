// Launching an on-chip group-norm kernel (gn_tile.hpp): tiles * cluster
// blocks, each tile's blocks one thread-block cluster where the target has
// them (the host never asks for more than one block per tile elsewhere).
// Host code of the .hip files only.
#pragma once

#include "gpu/bn_launch.hpp"
#include "gpu/gn_tile.hpp"
#include "gpu/hip_compat.h"

namespace mbn {
namespace gpu {

template <typename... Params, typename... Args>
void launch_tile_kernel(void (*kernel)(Params...), const GnTileWalk& w, hipStream_t stream, const char* name,
                        Args... args) {
    const dim3 grid(static_cast<unsigned>(w.tiles() * w.cluster));
    const dim3 block(static_cast<unsigned>(w.threads));
    const auto shared = static_cast<std::size_t>(w.shared_bytes);
#if MBN_GPU_CUDA
    if (w.cluster > 1) {
        cudaLaunchAttribute cluster{};
        cluster.id = cudaLaunchAttributeClusterDimension;
        cluster.val.clusterDim.x = static_cast<unsigned>(w.cluster);
        cluster.val.clusterDim.y = 1;
        cluster.val.clusterDim.z = 1;
        cudaLaunchConfig_t config{};
        config.gridDim = grid;
        config.blockDim = block;
        config.dynamicSmemBytes = shared;
        config.stream = stream;
        config.attrs = &cluster;
        config.numAttrs = 1;
        check_runtime(cudaLaunchKernelEx(&config, kernel, args...), name);
        return;
    }
#endif
    kernel<<<grid, block, shared, stream>>>(args...);
    check_launch(name);
}

}  // namespace gpu
}  // namespace mbn
