// The CPU batch-norm operations, one per Backend entry point.  Each takes a
// problem the front has validated and runs it on the process's thread pool.
#pragma once

#include "common/problem.hpp"

namespace mbn::cpu {

void forward_training(const BnForwardTraining& p);
void forward_inference(const BnForwardInference& p);
void backward(const BnBackward& p);

}  // namespace mbn::cpu
