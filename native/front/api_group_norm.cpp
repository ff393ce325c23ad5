// Group-normalization entry points: MIOpen's forward and our extensions
// (fused activation, backward), each log -> validate -> dispatch in api_call.
#include "api_guard.hpp"
#include "driver_command.hpp"
#include "gn_problem_builder.hpp"
#include "handle.hpp"
#include "logging.hpp"

namespace mbn {
namespace {

void log_gn_command(const char* function, bool backward, const miopenTensorDescriptor* x_desc, const GnShape& shape,
                    const TensorArg& x, const TensorArg& weight, miopenNormMode_t mode, Activation activation,
                    float beta) {
    if (!command_logging_enabled()) return;
    const DType param = weight.present() ? weight.dtype : x.dtype;
    const GnCommandInfo info{backward, &shape,     snapshot_descriptor(x_desc, "xDesc").rank, x.dtype, param, static_cast<int>(mode),
                             x.order,  activation, beta};
    log_command(function, gn_driver_command(info));
}

void group_norm_forward(const char* function, miopenHandle* handle, const GnForwardCall& call) {
    const auto h = use_handle(handle);
    const GnForward p = build_gn_forward(h.backend(), call);
    log_gn_command(function, false, call.x_desc, p.shape, p.x, p.weight, call.mode, p.activation, p.swish_beta);
    dispatch(h, [&](Backend& b) { b.gn_forward(p); });
}

}  // namespace
}  // namespace mbn

extern "C" {

miopenStatus_t miopenGroupNormForward(miopenHandle_t handle, miopenNormMode_t mode, const miopenTensorDescriptor_t xDesc,
                                      const void* x, const miopenTensorDescriptor_t weightDesc, const void* weight,
                                      const miopenTensorDescriptor_t biasDesc, const void* bias,
                                      const uint64_t num_groups, const float epsilon,
                                      const miopenTensorDescriptor_t yDesc, void* y,
                                      const miopenTensorDescriptor_t meanDesc, void* mean,
                                      const miopenTensorDescriptor_t rstdDesc, void* rstd) {
    return mbn::api_call(__func__, [&](const char* fn) {
        MBN_LOG_CALL(fn, handle, mode, xDesc, x, weightDesc, weight, biasDesc, bias, num_groups, epsilon, yDesc, y,
                     meanDesc, mean, rstdDesc, rstd);
        mbn::group_norm_forward(fn, handle,
                                {mode, xDesc, x, weightDesc, weight, biasDesc, bias, num_groups, epsilon,
                                 miopenBNActivationNone, 1.0f, yDesc, y, meanDesc, mean, rstdDesc, rstd});
    });
}

miopenStatus_t miopenBNGroupNormForwardActivation(
    miopenHandle_t handle, miopenNormMode_t mode, const miopenTensorDescriptor_t xDesc, const void* x,
    const miopenTensorDescriptor_t weightDesc, const void* weight, const miopenTensorDescriptor_t biasDesc,
    const void* bias, const uint64_t num_groups, const float epsilon, miopenBNActivation_t activation,
    const float activationBeta, const miopenTensorDescriptor_t yDesc, void* y,
    const miopenTensorDescriptor_t meanDesc, void* mean, const miopenTensorDescriptor_t rstdDesc, void* rstd) {
    return mbn::api_call(__func__, [&](const char* fn) {
        MBN_LOG_CALL(fn, handle, mode, xDesc, x, weightDesc, weight, biasDesc, bias, num_groups, epsilon, activation,
                     activationBeta, yDesc, y, meanDesc, mean, rstdDesc, rstd);
        mbn::group_norm_forward(fn, handle,
                                {mode, xDesc, x, weightDesc, weight, biasDesc, bias, num_groups, epsilon, activation,
                                 activationBeta, yDesc, y, meanDesc, mean, rstdDesc, rstd});
    });
}

miopenStatus_t miopenBNGroupNormBackward(
    miopenHandle_t handle, miopenNormMode_t mode, const miopenTensorDescriptor_t xDesc, const void* x,
    const miopenTensorDescriptor_t dyDesc, const void* dy, const miopenTensorDescriptor_t weightDesc,
    const void* weight, const miopenTensorDescriptor_t biasDesc, const void* bias,
    const miopenTensorDescriptor_t meanDesc, const void* mean, const miopenTensorDescriptor_t rstdDesc,
    const void* rstd, const uint64_t num_groups, miopenBNActivation_t activation, const float activationBeta,
    const miopenTensorDescriptor_t dxDesc, void* dx, const miopenTensorDescriptor_t dweightDesc, void* dweight,
    const miopenTensorDescriptor_t dbiasDesc, void* dbias) {
    return mbn::api_call(__func__, [&](const char* fn) {
        MBN_LOG_CALL(fn, handle, mode, xDesc, x, dyDesc, dy, weightDesc, weight, biasDesc, bias, meanDesc, mean,
                     rstdDesc, rstd, num_groups, activation, activationBeta, dxDesc, dx, dweightDesc, dweight,
                     dbiasDesc, dbias);
        const auto h = mbn::use_handle(handle);
        const mbn::GnBackward p = mbn::build_gn_backward(
            h.backend(), {mode, xDesc, x, dyDesc, dy, weightDesc, weight, biasDesc, bias, meanDesc, mean, rstdDesc,
                         rstd, num_groups, activation, activationBeta, dxDesc, dx, dweightDesc, dweight, dbiasDesc,
                         dbias});
        mbn::log_gn_command(fn, true, xDesc, p.shape, p.x, p.weight, mode, p.activation, p.swish_beta);
        mbn::dispatch(h, [&](mbn::Backend& b) { b.gn_backward(p); });
    });
}

}  // extern "C"
