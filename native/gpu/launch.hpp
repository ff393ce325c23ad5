// Launching the kernels: the check every launch is followed by, the launch
// shapes of the kernels that walk a feature layout (feature_layout.hpp) and
// where a call's work goes.  All work goes to one stream; nothing here
// allocates or synchronizes with the host.
#pragma once

#include "common/error.hpp"
#include "gpu/feature_layout.hpp"
#include "gpu/hip_compat.h"

namespace mbn {
namespace gpu {

// A failed runtime call becomes InternalError.
inline void check_runtime(hipError_t status, const char* what) {
    if (status != hipSuccess)
        fail(miopenStatusInternalError, "GPU runtime call ", what, " failed: ", hipGetErrorString(status));
}

// Called right after each launch: a failed launch becomes InternalError.
inline void check_launch(const char* kernel) {
    const hipError_t status = hipGetLastError();
    if (status != hipSuccess)
        fail(miopenStatusInternalError, "GPU kernel ", kernel, " failed to launch: ", hipGetErrorString(status));
}

// Launch shape of the kernels that walk the layout (feature_layout.hpp):
// gridDim = (tiles, splits), blockDim = (tile_features, rows).
inline dim3 walk_grid(const FeatureLayout& layout) {
    return dim3(static_cast<unsigned>(layout.tiles), static_cast<unsigned>(layout.splits));
}
inline dim3 walk_block(const FeatureLayout& layout) {
    return dim3(static_cast<unsigned>(layout.tile_features), static_cast<unsigned>(layout.rows));
}

// Launch shape of the kernels that merge the splits of each feature:
// blockDim = (features per block, lanes), the lanes sharing the splits.
struct FinalizeShape {
    dim3 grid;
    dim3 block;
};
inline FinalizeShape finalize_shape(const FeatureLayout& layout) {
    unsigned lanes = 1;
    while (lanes < static_cast<unsigned>(layout.splits) && lanes < static_cast<unsigned>(kBlockThreads)) lanes *= 2;
    const unsigned per_block = static_cast<unsigned>(kBlockThreads) / lanes;
    const std::int64_t blocks = (layout.feature.size + per_block - 1) / per_block;
    return FinalizeShape{dim3(static_cast<unsigned>(blocks)), dim3(per_block, lanes)};
}

struct LaunchTarget {
    hipStream_t stream;
    void* scratch;  // at least the bytes the op asked for (scratch_bytes(layout) for batch norm)
    unsigned long long* counters;  // zero-initialized, as many as the op asked for (group norm)
    bool dependent_launches;       // DeviceShape::dependent_launches (dependent_launch.h)
};

}  // namespace gpu
}  // namespace mbn
