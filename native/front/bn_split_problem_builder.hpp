// Validation of the split-phase (data-parallel) batch-norm entry points'
// arguments: raw C arguments in, the problems of bn_split_problem.hpp out, or
// mbn::Error with the status the header documents.  Nothing is written before
// every check passes.
#pragma once

#include "common/backend.hpp"
#include "tensor_descriptor.hpp"

namespace mbn {

struct BnLocalStatisticsCall {
    miopenBatchNormMode_t mode;
    const miopenTensorDescriptor* x_desc;
    const void* x;
    const miopenTensorDescriptor* stats_desc;
    void* count;
    void* mean;
    void* m2;
};

struct BnMergeStatisticsCall {
    const miopenTensorDescriptor* partial_desc;
    const void* count;
    const void* mean;
    const void* m2;
    double epsilon;
    const miopenTensorDescriptor* saved_desc;
    void* saved_mean;
    void* saved_inv_std;
    double exp_avg_factor;
    const miopenTensorDescriptor* running_desc;
    void* running_mean;
    void* running_var;
};

struct BnNormalizeCall {
    miopenBatchNormMode_t mode;
    const void* alpha;
    const void* beta;
    const miopenTensorDescriptor* x_desc;
    const void* x;
    const miopenTensorDescriptor* y_desc;
    void* y;
    const miopenTensorDescriptor* param_desc;
    const void* scale;
    const void* bias;
    const void* mean;
    const void* inv_std;
};

struct BnBackwardReduceCall {
    miopenBatchNormMode_t mode;
    const void* alpha_param;
    const void* beta_param;
    const miopenTensorDescriptor* x_desc;
    const void* x;
    const miopenTensorDescriptor* dy_desc;
    const void* dy;
    const miopenTensorDescriptor* param_desc;
    const void* mean;
    const void* inv_std;
    void* dscale;
    void* dbias;
    const miopenTensorDescriptor* sums_desc;
    void* sum_dy;
    void* sum_dy_xmu;
};

struct BnBackwardElementwiseCall {
    miopenBatchNormMode_t mode;
    const void* alpha_data;
    const void* beta_data;
    const miopenTensorDescriptor* x_desc;
    const void* x;
    const miopenTensorDescriptor* dy_desc;
    const void* dy;
    const miopenTensorDescriptor* dx_desc;
    void* dx;
    const miopenTensorDescriptor* param_desc;
    const void* scale;
    const void* mean;
    const void* inv_std;
    const miopenTensorDescriptor* sums_desc;
    const void* sum_dy;
    const void* sum_dy_xmu;
    const void* count;
};

BnLocalStatistics build_local_statistics(const Backend& backend, const BnLocalStatisticsCall& call);
BnMergeStatistics build_merge_statistics(const Backend& backend, const BnMergeStatisticsCall& call);
BnNormalize build_normalize(const Backend& backend, const BnNormalizeCall& call);
BnBackwardReduce build_backward_reduce(const Backend& backend, const BnBackwardReduceCall& call);
BnBackwardElementwise build_backward_elementwise(const Backend& backend, const BnBackwardElementwiseCall& call);

}  // namespace mbn
