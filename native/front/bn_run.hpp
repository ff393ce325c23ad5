// Running one validated batch-norm call on a handle: build the problem, log
// the driver command, dispatch.  Shared by the entry points and by fusion
// plans, so both go through the same checks.
#pragma once

#include "bn_problem_builder.hpp"

struct miopenHandle;

namespace mbn {

void forward_training(const char* function, miopenHandle* handle, const BnTrainingCall& call);
void forward_inference(const char* function, miopenHandle* handle, const BnInferenceCall& call);
void backward(const char* function, miopenHandle* handle, const BnBackwardCall& call);

}  // namespace mbn
