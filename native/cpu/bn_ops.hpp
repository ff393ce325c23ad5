// The CPU batch-norm operations, one per Backend entry point.  Each takes a
// problem the front has validated and runs it on the process's thread pool.
#pragma once

#include "common/bn_split_problem.hpp"
#include "common/problem.hpp"

namespace mbn::cpu {

void forward_training(const BnForwardTraining& p);
void forward_inference(const BnForwardInference& p);
void backward(const BnBackward& p);

// The split-phase (data-parallel) ops.
void local_statistics(const BnLocalStatistics& p);
void merge_statistics(const BnMergeStatistics& p);
void normalize(const BnNormalize& p);
void backward_reduce(const BnBackwardReduce& p);
void backward_elementwise(const BnBackwardElementwise& p);

}  // namespace mbn::cpu
