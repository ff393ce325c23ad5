// What every launch gets (stream, scratch, counters), the check each launch
// is followed by, and the kernel sequences of inference and of group norm's
// batch-norm parts.  All work goes to one stream; nothing
// here allocates or synchronizes with the host.
#pragma once

#include "common/error.hpp"
#include "common/group_norm_problem.hpp"
#include "common/problem.hpp"
#include "gpu/bn_layout.hpp"
#include "gpu/grid_sync.h"
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

// Launch shape of the kernels that walk the layout (bn_layout.hpp):
// gridDim = (tiles, splits), blockDim = (tile_features, rows).
inline dim3 walk_grid(const BnLayout& layout) {
    return dim3(static_cast<unsigned>(layout.tiles), static_cast<unsigned>(layout.splits));
}
inline dim3 walk_block(const BnLayout& layout) {
    return dim3(static_cast<unsigned>(layout.tile_features), static_cast<unsigned>(layout.rows));
}

struct LaunchTarget {
    hipStream_t stream;
    void* scratch;  // at least the bytes the op asked for
    unsigned long long* counters;  // zero-initialized, as many as the op asked for; left at zero
    GridBarrier barrier;           // the handle's own pair (grid_sync.h), apart from `counters`
};

// Inference: one pass, each thread deriving its features' coefficients from
// the estimates.  (Training and backward: bn_engine.hpp.)
void run_forward_inference(const BnForwardInference& p, const BnLayout& layout, const LaunchTarget& target);

// Group norm's per-slice statistics: per (split, feature) moments of x and
// each feature's shift, into the scratch partials (bn_stats.hip).
void run_statistics_partials(const TensorArg& x, const BnLayout& layout, const LaunchTarget& target);

// The forward's last launch: y = act(((x - shift) - mean_offset) * coef0 +
// coef1) per feature from the scratch, blended as `out` says; act is the
// identity for batch norm, Swish with swish_beta where group norm fuses it.
void run_normalize(const TensorArg& x, const TensorArg& y, const BnLayout& layout, const Blend& out,
                   Activation activation, float swish_beta, const LaunchTarget& target);

}  // namespace gpu
}  // namespace mbn
