// Launching a kernel whose grid is made of thread-block clusters of
// `cluster` consecutive blocks (gn_cluster.h): with the cluster attribute
// where the target has clusters and `cluster` > 1, else as a plain launch
// (the planners never ask for more than one block per cluster elsewhere).
// Host code of the .hip files only.
#pragma once

#include "gpu/hip_compat.h"
#include "gpu/launch.hpp"
#include "gpu/launch_config.h"

namespace mbn {
namespace gpu {

#if MBN_GPU_CUDA
// A launch configuration of clusters of `cluster` blocks along x; `attribute`
// must outlive the configuration.
inline cudaLaunchConfig_t cluster_config(dim3 grid, dim3 block, std::size_t shared, hipStream_t stream, int cluster,
                                         cudaLaunchAttribute& attribute) {
    attribute = cudaLaunchAttribute{};
    attribute.id = cudaLaunchAttributeClusterDimension;
    attribute.val.clusterDim.x = static_cast<unsigned>(cluster);
    attribute.val.clusterDim.y = 1;
    attribute.val.clusterDim.z = 1;
    return config_with(grid, block, shared, stream, attribute);
}
#endif

template <typename... Params, typename... Args>
void launch_clustered(void (*kernel)(Params...), dim3 grid, dim3 block, std::size_t shared, int cluster,
                      hipStream_t stream, const char* name, Args... args) {
#if MBN_GPU_CUDA
    if (cluster > 1) {
        cudaLaunchAttribute attribute;
        const cudaLaunchConfig_t config = cluster_config(grid, block, shared, stream, cluster, attribute);
        check_runtime(cudaLaunchKernelEx(&config, kernel, args...), name);
        return;
    }
#else
    (void)cluster;
#endif
    kernel<<<grid, block, shared, stream>>>(args...);
    check_launch(name);
}

}  // namespace gpu
}  // namespace mbn
