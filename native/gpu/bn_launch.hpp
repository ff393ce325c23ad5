// The kernel sequences of each batch-norm op (one .hip file each).  All
// work goes to one stream; nothing here allocates or synchronizes with the
// host.
#pragma once

#include "common/problem.hpp"
#include "gpu/bn_layout.hpp"
#include "gpu/feature_passes.hpp"
#include "gpu/launch.hpp"

namespace mbn {
namespace gpu {

// With `single_launch` the single-launch kernels (bn_fused.hpp; the layout
// must fit them: single_launch_fits), else the multi-pass sequence.
void run_forward_training(const BnForwardTraining& p, const FeatureLayout& layout, bool single_launch,
                          const LaunchTarget& target);
void run_forward_inference(const BnForwardInference& p, const FeatureLayout& layout, const LaunchTarget& target);
void run_backward(const BnBackward& p, const FeatureLayout& layout, bool single_launch, const LaunchTarget& target);

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
void run_batch_statistics(const TensorArg& x, double epsilon, const StatsWrites& writes, const FeatureLayout& layout,
                          const LaunchTarget& target);

}  // namespace gpu
}  // namespace mbn
