// Spatial batch-norm inference on packed NCHW or NHWC half, bfloat16 or
// float tensors in one elementwise pass (bn_dense_inference.hip).  Other
// inference calls take bn_forward.hip's nest walk.
#pragma once

#include "common/problem.hpp"
#include "gpu/bn_launch.hpp"
#include "gpu/bn_planner.hpp"

namespace mbn {
namespace gpu {

bool dense_inference_fits(const BnForwardInference& p);
void run_dense_inference(const BnForwardInference& p, const DeviceShape& device, const LaunchTarget& target);

}  // namespace gpu
}  // namespace mbn
