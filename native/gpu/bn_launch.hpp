// The kernel sequences of each batch-norm op (one .hip file each) and the
// check every launch is followed by.  All work goes to one stream; nothing
// here allocates or synchronizes with the host.
#pragma once

#include "common/error.hpp"
#include "common/group_norm_problem.hpp"
#include "common/problem.hpp"
#include "gpu/bn_layout.hpp"
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

// Launch shape of the kernels that merge the splits of each feature:
// blockDim = (features per block, lanes), the lanes sharing the splits.
struct FinalizeShape {
    dim3 grid;
    dim3 block;
};
inline FinalizeShape finalize_shape(const BnLayout& layout) {
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
};

// With `single_launch` the single-launch kernels (bn_fused.hpp; the layout
// must fit them: single_launch_fits), else the multi-pass sequence.
void run_forward_training(const BnForwardTraining& p, const BnLayout& layout, bool single_launch,
                          const LaunchTarget& target);
void run_forward_inference(const BnForwardInference& p, const BnLayout& layout, const LaunchTarget& target);
void run_backward(const BnBackward& p, const BnLayout& layout, bool single_launch, const LaunchTarget& target);

// Batch statistics of x into the scratch (shift, mean_offset, inv_std), for
// forward training and for backward without saved statistics.  Whatever
// `writes` names is written too; its tensors sit in the forward parameter
// slots of `layout` (ForwardParam), each read and written in its own type.
struct StatsWrites {
    const TensorArg* scale = nullptr;  // with bias: coef0 = scale * inv_std, coef1 = bias
    const TensorArg* bias = nullptr;
    const TensorArg* prev_running_mean = nullptr;  // read, then the update written to running_mean
    const TensorArg* prev_running_var = nullptr;   // (V3: other buffers; else the same)
    const TensorArg* running_mean = nullptr;       // all four, or none
    const TensorArg* running_var = nullptr;
    const TensorArg* saved_mean = nullptr;  // with saved_inv_std
    const TensorArg* saved_inv_std = nullptr;
    double exp_avg_factor = 0.0;
};
void run_batch_statistics(const TensorArg& x, double epsilon, const StatsWrites& writes, const BnLayout& layout,
                          const LaunchTarget& target);

// Its first launch alone: per (split, feature) moments of x and each
// feature's shift, into the scratch partials (group norm merges them per
// group itself).
void run_statistics_partials(const TensorArg& x, const BnLayout& layout, const LaunchTarget& target);

// The forward's last launch: y = act(((x - shift) - mean_offset) * coef0 +
// coef1) per feature from the scratch, blended as `out` says; act is the
// identity for batch norm, Swish with swish_beta where group norm fuses it.
void run_normalize(const TensorArg& x, const TensorArg& y, const BnLayout& layout, const Blend& out,
                   Activation activation, float swish_beta, const LaunchTarget& target);

}  // namespace gpu
}  // namespace mbn
