// A launch configuration for cudaLaunchKernelEx with one attribute (a
// cluster shape, a programmatic dependent launch).  Host code of the .hip
// files only, NVIDIA only (not in the emulator, which launches nothing).
#pragma once

#include "gpu/hip_compat.h"

#include <cstddef>

namespace mbn {
namespace gpu {

#if MBN_GPU_CUDA && !defined(MBN_EMULATION)
// `attribute` must outlive the configuration (it points to it).
inline cudaLaunchConfig_t config_with(dim3 grid, dim3 block, std::size_t shared, hipStream_t stream,
                                      cudaLaunchAttribute& attribute) {
    cudaLaunchConfig_t config{};
    config.gridDim = grid;
    config.blockDim = block;
    config.dynamicSmemBytes = shared;
    config.stream = stream;
    config.attrs = &attribute;
    config.numAttrs = 1;
    return config;
}
#endif

}  // namespace gpu
}  // namespace mbn
