// The one-launch batch-norm engine (bn_engine.hip): plan a training or
// backward call (engine_plan.hpp), then run it.  Planning asks the runtime
// how many blocks of the call's kernel instances fit the device, so it
// happens on the host before the backend sizes the call's scratch.
#pragma once

#include "common/problem.hpp"
#include "gpu/bn_launch.hpp"
#include "gpu/bn_planner.hpp"
#include "gpu/engine_plan.hpp"

namespace mbn {
namespace gpu {

EnginePlan plan_forward_training(const BnForwardTraining& p, const BnLayout& layout, const DeviceShape& device);
EnginePlan plan_backward(const BnBackward& p, const BnLayout& layout, const DeviceShape& device);

void run_forward_training(const BnForwardTraining& p, const EnginePlan& plan, const LaunchTarget& target);
void run_backward(const BnBackward& p, const EnginePlan& plan, const LaunchTarget& target);

}  // namespace gpu
}  // namespace mbn
