// Validation of the group-norm entry points' arguments (see
// group_norm_problem.hpp for what the result guarantees).
#pragma once

#include "common/backend.hpp"
#include "tensor_descriptor.hpp"

#include <cstdint>

namespace mbn {

struct GnForwardCall {
    miopenNormMode_t mode;
    const miopenTensorDescriptor* x_desc;
    const void* x;
    const miopenTensorDescriptor* weight_desc;
    const void* weight;
    const miopenTensorDescriptor* bias_desc;
    const void* bias;
    std::uint64_t num_groups;
    float epsilon;
    miopenBNActivation_t activation;
    float activation_beta;
    const miopenTensorDescriptor* y_desc;
    void* y;
    const miopenTensorDescriptor* mean_desc;
    void* mean;
    const miopenTensorDescriptor* rstd_desc;
    void* rstd;
};

struct GnBackwardCall {
    miopenNormMode_t mode;
    const miopenTensorDescriptor* x_desc;
    const void* x;
    const miopenTensorDescriptor* dy_desc;
    const void* dy;
    const miopenTensorDescriptor* weight_desc;
    const void* weight;
    const miopenTensorDescriptor* bias_desc;
    const void* bias;
    const miopenTensorDescriptor* mean_desc;
    const void* mean;
    const miopenTensorDescriptor* rstd_desc;
    const void* rstd;
    std::uint64_t num_groups;
    miopenBNActivation_t activation;
    float activation_beta;
    const miopenTensorDescriptor* dx_desc;
    void* dx;
    const miopenTensorDescriptor* dweight_desc;
    void* dweight;
    const miopenTensorDescriptor* dbias_desc;
    void* dbias;
};

GnForward build_gn_forward(const Backend& backend, const GnForwardCall& call);
GnBackward build_gn_backward(const Backend& backend, const GnBackwardCall& call);

}  // namespace mbn
