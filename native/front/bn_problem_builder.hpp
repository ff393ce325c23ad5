// Validation of the batch-norm entry points' arguments: turns raw C arguments
// into the problem structs of problem.hpp, or throws mbn::Error with the
// status miopen_bn.h documents.  Nothing is written before all checks pass.
#pragma once

#include "common/backend.hpp"
#include "tensor_descriptor.hpp"

#include "common/activation.hpp"

namespace mbn {

// The parameter descriptors of a call; V1 passes the same one four times.
struct BnParamDescs {
    const miopenTensorDescriptor* scale;
    const miopenTensorDescriptor* bias;
    const miopenTensorDescriptor* mean;  // running / estimated / saved mean
    const miopenTensorDescriptor* var;   // running / estimated variance, saved inverse std
};

struct BnTrainingCall {
    miopenBatchNormMode_t mode;
    const void* alpha;
    const void* beta;
    const miopenTensorDescriptor* x_desc;
    const void* x;
    const miopenTensorDescriptor* y_desc;
    void* y;
    BnParamDescs params;
    const void* scale;
    const void* bias;
    double exp_avg_factor;
    void* running_mean;
    void* running_var;
    double epsilon;
    void* saved_mean;
    void* saved_inv_std;
    // V3: the running statistics are read from these (else from running_*).
    bool separate_previous = false;
    const void* prev_running_mean = nullptr;
    const void* prev_running_var = nullptr;
    ActivationSpec activation{};
};

struct BnInferenceCall {
    miopenBatchNormMode_t mode;
    const void* alpha;
    const void* beta;
    const miopenTensorDescriptor* x_desc;
    const void* x;
    const miopenTensorDescriptor* y_desc;
    void* y;
    BnParamDescs params;
    const void* scale;
    const void* bias;
    const void* mean;
    const void* var;  // the variance, or 1 / sqrt(variance + epsilon) with var_is_inv_std
    double epsilon;
    bool var_is_inv_std = false;
    ActivationSpec activation{};
};

struct BnBackwardCall {
    miopenBatchNormMode_t mode;
    const void* alpha_data;
    const void* beta_data;
    const void* alpha_param;
    const void* beta_param;
    const miopenTensorDescriptor* x_desc;
    const void* x;
    const miopenTensorDescriptor* dy_desc;
    const void* dy;
    const miopenTensorDescriptor* dx_desc;
    void* dx;
    BnParamDescs params;
    const void* scale;
    void* dscale;
    void* dbias;
    double epsilon;
    const void* saved_mean;
    const void* saved_inv_std;
    const void* bias = nullptr;  // needed (and read) only with an activation
    ActivationSpec activation{};
};

// The epsilon MIOpen's inverse-variance inference takes when both estimates
// are NULL (its batch-statistics fallback).
constexpr double kInvVarianceFallbackEpsilon = 1e-5;

BnForwardTraining build_forward_training(const Backend& backend, const BnTrainingCall& call);
// True when both estimates are given, false when both are NULL (the batch-
// statistics fallback); BadParm when exactly one is NULL.
bool inference_uses_estimates(const BnInferenceCall& call);
BnForwardInference build_forward_inference(const Backend& backend, const BnInferenceCall& call);
// The inference call with both estimates NULL: normalize with the batch's own
// statistics, write nothing but y.
BnForwardTraining build_batch_statistics_inference(const Backend& backend, const BnInferenceCall& call);
BnBackward build_backward(const Backend& backend, const BnBackwardCall& call);

// Parameter descriptor for x in `mode` (miopenDeriveBNTensorDescriptor).
void derive_bn_descriptor(miopenTensorDescriptor* derived, const TensorDesc& x,
                          miopenBatchNormMode_t mode);

}  // namespace mbn
