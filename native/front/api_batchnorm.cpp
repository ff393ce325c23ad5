// Batch-normalization entry points: each one logs its arguments, builds a
// validated problem (bn_problem_builder), logs the driver command, and
// dispatches to the handle's backend (bn_run.hpp, also what fusion plans
// execute), all inside api_call.
#include "activation_descriptor.hpp"
#include "api_guard.hpp"
#include "bn_problem_builder.hpp"
#include "bn_run.hpp"
#include "driver_command.hpp"
#include "handle.hpp"
#include "logging.hpp"

namespace mbn {
namespace {

// grad is dy for backward and x otherwise; param_blend matters for backward only.
void log_bn_command(const char* function, BnDirection direction, const miopenTensorDescriptor* x_desc,
                    const BnGeometry& geom, const TensorArg& x, const TensorArg& scale, const TensorArg& grad,
                    bool saved, bool running, Blend blend, Blend param_blend = {},
                    const BnCommandExtras& extras = {}) {
    if (!command_logging_enabled()) return;
    const BnCommandInfo info{direction, &geom, snapshot_descriptor(x_desc, "xDesc").rank, x.dtype, scale.dtype, grad.dtype, x.order,
                             saved,     running, blend,      param_blend, extras};
    log_command(function, bn_driver_command(info));
}

void log_dispatch(const char* function, const Backend& backend, const BnGeometry& geom) {
    if (!log_level_enabled(LogLevel::info)) return;
    log_info(function, concat("backend ", backend.name(), ", N ", geom.len[kN], " C ", geom.len[kC], " D ",
                              geom.len[kD], " H ", geom.len[kH], " W ", geom.len[kW], ", M ",
                              geom.reduction_size(), ", F ", geom.feature_count()));
}

}  // namespace

void forward_training(const char* function, miopenHandle* handle, const BnTrainingCall& call) {
    const auto h = use_handle(handle);
    const BnForwardTraining p = build_forward_training(h.backend(), call);
    const bool ping_pong = p.prev_running_mean.data != p.running_mean.data;
    log_bn_command(function, BnDirection::training, call.x_desc, p.geom, p.x, p.scale, p.x,
                   p.saved_mean.present(), p.running_mean.present(), p.out, {}, {p.activation, false, ping_pong});
    log_dispatch(function, h.backend(), p.geom);
    dispatch(h, [&](Backend& b) { b.bn_forward_training(p); });
}

void forward_inference(const char* function, miopenHandle* handle, const BnInferenceCall& call) {
    const auto h = use_handle(handle);
    if (!inference_uses_estimates(call)) {
        // MIOpen's documented fallback: normalize with the batch's own statistics.
        const BnForwardTraining p = build_batch_statistics_inference(h.backend(), call);
        log_bn_command(function, BnDirection::inference, call.x_desc, p.geom, p.x, p.scale, p.x, false, false, p.out,
                       {}, {p.activation, call.var_is_inv_std, false});
        log_dispatch(function, h.backend(), p.geom);
        dispatch(h, [&](Backend& b) { b.bn_forward_training(p); });
        return;
    }
    const BnForwardInference p = build_forward_inference(h.backend(), call);
    log_bn_command(function, BnDirection::inference, call.x_desc, p.geom, p.x, p.scale, p.x, false, true, p.out, {},
                   {p.activation, p.var_is_inv_std, false});
    log_dispatch(function, h.backend(), p.geom);
    dispatch(h, [&](Backend& b) { b.bn_forward_inference(p); });
}

void backward(const char* function, miopenHandle* handle, const BnBackwardCall& call) {
    const auto h = use_handle(handle);
    const BnBackward p = build_backward(h.backend(), call);
    log_bn_command(function, BnDirection::backward, call.x_desc, p.geom, p.x, p.scale, p.dy,
                   p.saved_mean.present(), false, p.data, p.param, {p.activation, false, false});
    log_dispatch(function, h.backend(), p.geom);
    dispatch(h, [&](Backend& b) { b.bn_backward(p); });
}

namespace {

ActivationSpec activation_of(miopenActivationDescriptor* desc) {
    return snapshot_activation(desc, "activDesc");
}

}  // namespace
}  // namespace mbn

extern "C" {

miopenStatus_t miopenDeriveBNTensorDescriptor(miopenTensorDescriptor_t derivedBnDesc,
                                              const miopenTensorDescriptor_t xDesc,
                                              miopenBatchNormMode_t bn_mode) {
    return mbn::api_call(__func__, [&](const char* fn) {
        MBN_LOG_CALL(fn, derivedBnDesc, xDesc, bn_mode);
        mbn::require_live_descriptor(derivedBnDesc, "derivedBnDesc");
        mbn::derive_bn_descriptor(derivedBnDesc, mbn::require_descriptor(xDesc, "xDesc"), bn_mode);
    });
}

miopenStatus_t miopenBatchNormalizationForwardTraining(
    miopenHandle_t handle, miopenBatchNormMode_t bn_mode, void* alpha, void* beta,
    const miopenTensorDescriptor_t xDesc, const void* x, const miopenTensorDescriptor_t yDesc, void* y,
    const miopenTensorDescriptor_t bnScaleBiasMeanVarDesc, void* bnScale, void* bnBias,
    double expAvgFactor, void* resultRunningMean, void* resultRunningVariance, double epsilon,
    void* resultSaveMean, void* resultSaveInvVariance) {
    return mbn::api_call(__func__, [&](const char* fn) {
        MBN_LOG_CALL(fn, handle, bn_mode, alpha, beta, xDesc, x, yDesc, y, bnScaleBiasMeanVarDesc,
                     bnScale, bnBias, expAvgFactor, resultRunningMean, resultRunningVariance, epsilon,
                     resultSaveMean, resultSaveInvVariance);
        const auto d = bnScaleBiasMeanVarDesc;
        mbn::forward_training(fn, handle,
                              {bn_mode, alpha, beta, xDesc, x, yDesc, y, {d, d, d, d}, bnScale, bnBias,
                               expAvgFactor, resultRunningMean, resultRunningVariance, epsilon,
                               resultSaveMean, resultSaveInvVariance});
    });
}

miopenStatus_t miopenBatchNormalizationForwardTraining_V2(
    miopenHandle_t handle, miopenBatchNormMode_t bn_mode, void* alpha, void* beta,
    const miopenTensorDescriptor_t xDesc, const void* x, const miopenTensorDescriptor_t yDesc, void* y,
    const miopenTensorDescriptor_t scaleDesc, const miopenTensorDescriptor_t biasVarDesc,
    const miopenTensorDescriptor_t savedMeanDesc, const miopenTensorDescriptor_t savedVarDesc,
    void* bnScale, void* bnBias, double expAvgFactor, void* resultRunningMean,
    void* resultRunningVariance, double epsilon, void* resultSaveMean, void* resultSaveInvVariance) {
    return mbn::api_call(__func__, [&](const char* fn) {
        MBN_LOG_CALL(fn, handle, bn_mode, alpha, beta, xDesc, x, yDesc, y, scaleDesc, biasVarDesc,
                     savedMeanDesc, savedVarDesc, bnScale, bnBias, expAvgFactor, resultRunningMean,
                     resultRunningVariance, epsilon, resultSaveMean, resultSaveInvVariance);
        mbn::forward_training(fn, handle,
                              {bn_mode, alpha, beta, xDesc, x, yDesc, y,
                               {scaleDesc, biasVarDesc, savedMeanDesc, savedVarDesc}, bnScale, bnBias,
                               expAvgFactor, resultRunningMean, resultRunningVariance, epsilon,
                               resultSaveMean, resultSaveInvVariance});
    });
}

miopenStatus_t miopenBatchNormalizationForwardInference(
    miopenHandle_t handle, miopenBatchNormMode_t bn_mode, void* alpha, void* beta,
    const miopenTensorDescriptor_t xDesc, const void* x, const miopenTensorDescriptor_t yDesc, void* y,
    const miopenTensorDescriptor_t bnScaleBiasMeanVarDesc, void* bnScale, void* bnBias,
    void* estimatedMean, void* estimatedVariance, double epsilon) {
    return mbn::api_call(__func__, [&](const char* fn) {
        MBN_LOG_CALL(fn, handle, bn_mode, alpha, beta, xDesc, x, yDesc, y, bnScaleBiasMeanVarDesc,
                     bnScale, bnBias, estimatedMean, estimatedVariance, epsilon);
        const auto d = bnScaleBiasMeanVarDesc;
        mbn::forward_inference(fn, handle,
                               {bn_mode, alpha, beta, xDesc, x, yDesc, y, {d, d, d, d}, bnScale, bnBias,
                                estimatedMean, estimatedVariance, epsilon});
    });
}

miopenStatus_t miopenBatchNormalizationForwardInference_V2(
    miopenHandle_t handle, miopenBatchNormMode_t bn_mode, void* alpha, void* beta,
    const miopenTensorDescriptor_t xDesc, const void* x, const miopenTensorDescriptor_t yDesc, void* y,
    const miopenTensorDescriptor_t scaleDesc, const miopenTensorDescriptor_t biasDesc,
    const miopenTensorDescriptor_t estMeanDesc, const miopenTensorDescriptor_t estVarianceDesc,
    void* bnScale, void* bnBias, void* estimatedMean, void* estimatedVariance, double epsilon) {
    return mbn::api_call(__func__, [&](const char* fn) {
        MBN_LOG_CALL(fn, handle, bn_mode, alpha, beta, xDesc, x, yDesc, y, scaleDesc, biasDesc,
                     estMeanDesc, estVarianceDesc, bnScale, bnBias, estimatedMean, estimatedVariance,
                     epsilon);
        mbn::forward_inference(fn, handle,
                               {bn_mode, alpha, beta, xDesc, x, yDesc, y,
                                {scaleDesc, biasDesc, estMeanDesc, estVarianceDesc}, bnScale, bnBias,
                                estimatedMean, estimatedVariance, epsilon});
    });
}

miopenStatus_t miopenBatchNormalizationBackward(
    miopenHandle_t handle, miopenBatchNormMode_t bn_mode, const void* alphaDataDiff,
    const void* betaDataDiff, const void* alphaParamDiff, const void* betaParamDiff,
    const miopenTensorDescriptor_t xDesc, const void* x, const miopenTensorDescriptor_t dyDesc,
    const void* dy, const miopenTensorDescriptor_t dxDesc, void* dx,
    const miopenTensorDescriptor_t bnScaleBiasDiffDesc, const void* bnScale, void* resultBnScaleDiff,
    void* resultBnBiasDiff, double epsilon, const void* savedMean, const void* savedInvVariance) {
    return mbn::api_call(__func__, [&](const char* fn) {
        MBN_LOG_CALL(fn, handle, bn_mode, alphaDataDiff, betaDataDiff, alphaParamDiff, betaParamDiff,
                     xDesc, x, dyDesc, dy, dxDesc, dx, bnScaleBiasDiffDesc, bnScale, resultBnScaleDiff,
                     resultBnBiasDiff, epsilon, savedMean, savedInvVariance);
        const auto d = bnScaleBiasDiffDesc;
        mbn::backward(fn, handle,
                      {bn_mode, alphaDataDiff, betaDataDiff, alphaParamDiff, betaParamDiff, xDesc, x, dyDesc,
                       dy, dxDesc, dx, {d, d, d, d}, bnScale, resultBnScaleDiff, resultBnBiasDiff, epsilon,
                       savedMean, savedInvVariance});
    });
}

miopenStatus_t miopenBatchNormalizationBackward_V2(
    miopenHandle_t handle, miopenBatchNormMode_t bn_mode, const void* alphaDataDiff,
    const void* betaDataDiff, const void* alphaParamDiff, const void* betaParamDiff,
    const miopenTensorDescriptor_t xDesc, const void* x, const miopenTensorDescriptor_t dyDesc,
    const void* dy, const miopenTensorDescriptor_t dxDesc, void* dx,
    const miopenTensorDescriptor_t scaleDesc, const miopenTensorDescriptor_t biasDesc,
    const miopenTensorDescriptor_t savedMeanDesc, const miopenTensorDescriptor_t savedVarDesc,
    const void* bnScale, void* resultBnScaleDiff, void* resultBnBiasDiff, double epsilon,
    const void* savedMean, const void* savedInvVariance) {
    return mbn::api_call(__func__, [&](const char* fn) {
        MBN_LOG_CALL(fn, handle, bn_mode, alphaDataDiff, betaDataDiff, alphaParamDiff, betaParamDiff,
                     xDesc, x, dyDesc, dy, dxDesc, dx, scaleDesc, biasDesc, savedMeanDesc, savedVarDesc,
                     bnScale, resultBnScaleDiff, resultBnBiasDiff, epsilon, savedMean, savedInvVariance);
        mbn::backward(fn, handle,
                      {bn_mode, alphaDataDiff, betaDataDiff, alphaParamDiff, betaParamDiff, xDesc, x, dyDesc,
                       dy, dxDesc, dx, {scaleDesc, biasDesc, savedMeanDesc, savedVarDesc}, bnScale,
                       resultBnScaleDiff, resultBnBiasDiff, epsilon, savedMean, savedInvVariance});
    });
}

miopenStatus_t miopenBatchNormalizationForwardTraining_V3(
    miopenHandle_t handle, miopenBatchNormMode_t bn_mode, void* alpha, void* beta,
    const miopenTensorDescriptor_t xDesc, const void* x, const miopenTensorDescriptor_t yDesc, void* y,
    const miopenTensorDescriptor_t scaleDesc, const miopenTensorDescriptor_t biasVarDesc,
    const miopenTensorDescriptor_t savedMeanDesc, const miopenTensorDescriptor_t savedVarDesc,
    void* bnScale, void* bnBias, double expAvgFactor, const void* prevResultRunningMean,
    const void* prevResultRunningVariance, void* nextResultRunningMean, void* nextResultRunningVariance,
    double epsilon, void* resultSaveMean, void* resultSaveInvVariance) {
    return mbn::api_call(__func__, [&](const char* fn) {
        MBN_LOG_CALL(fn, handle, bn_mode, alpha, beta, xDesc, x, yDesc, y, scaleDesc, biasVarDesc,
                     savedMeanDesc, savedVarDesc, bnScale, bnBias, expAvgFactor, prevResultRunningMean,
                     prevResultRunningVariance, nextResultRunningMean, nextResultRunningVariance, epsilon,
                     resultSaveMean, resultSaveInvVariance);
        mbn::forward_training(fn, handle,
                              {bn_mode, alpha, beta, xDesc, x, yDesc, y,
                               {scaleDesc, biasVarDesc, savedMeanDesc, savedVarDesc}, bnScale, bnBias,
                               expAvgFactor, nextResultRunningMean, nextResultRunningVariance, epsilon,
                               resultSaveMean, resultSaveInvVariance, true, prevResultRunningMean,
                               prevResultRunningVariance});
    });
}

miopenStatus_t miopenBatchNormalizationForwardInferenceInvVariance(
    miopenHandle_t handle, miopenBatchNormMode_t bn_mode, void* alpha, void* beta,
    const miopenTensorDescriptor_t xDesc, const void* x, const miopenTensorDescriptor_t yDesc, void* y,
    const miopenTensorDescriptor_t scaleDesc, const miopenTensorDescriptor_t biasDesc,
    const miopenTensorDescriptor_t estMeanDesc, const miopenTensorDescriptor_t estInvVarianceDesc,
    void* bnScale, void* bnBias, void* estimatedMean, void* estimatedInvVariance) {
    return mbn::api_call(__func__, [&](const char* fn) {
        MBN_LOG_CALL(fn, handle, bn_mode, alpha, beta, xDesc, x, yDesc, y, scaleDesc, biasDesc, estMeanDesc,
                     estInvVarianceDesc, bnScale, bnBias, estimatedMean, estimatedInvVariance);
        mbn::forward_inference(fn, handle,
                               {bn_mode, alpha, beta, xDesc, x, yDesc, y,
                                {scaleDesc, biasDesc, estMeanDesc, estInvVarianceDesc}, bnScale, bnBias,
                                estimatedMean, estimatedInvVariance, mbn::kInvVarianceFallbackEpsilon, true});
    });
}

miopenStatus_t miopenBatchNormForwardTrainingActivation(
    miopenHandle_t handle, miopenBatchNormMode_t bn_mode, void* alpha, void* beta,
    const miopenTensorDescriptor_t xDesc, const void* x, const miopenTensorDescriptor_t yDesc, void* y,
    const miopenTensorDescriptor_t scaleDesc, const miopenTensorDescriptor_t biasVarDesc,
    const miopenTensorDescriptor_t savedMeanDesc, const miopenTensorDescriptor_t savedVarDesc,
    void* bnScale, void* bnBias, double expAvgFactor, void* resultRunningMean, void* resultRunningVariance,
    double epsilon, void* resultSaveMean, void* resultSaveInvVariance,
    const miopenActivationDescriptor_t activDesc) {
    return mbn::api_call(__func__, [&](const char* fn) {
        MBN_LOG_CALL(fn, handle, bn_mode, alpha, beta, xDesc, x, yDesc, y, scaleDesc, biasVarDesc,
                     savedMeanDesc, savedVarDesc, bnScale, bnBias, expAvgFactor, resultRunningMean,
                     resultRunningVariance, epsilon, resultSaveMean, resultSaveInvVariance, activDesc);
        const mbn::ActivationSpec activation = mbn::activation_of(activDesc);
        mbn::forward_training(fn, handle,
                              {bn_mode, alpha, beta, xDesc, x, yDesc, y,
                               {scaleDesc, biasVarDesc, savedMeanDesc, savedVarDesc}, bnScale, bnBias,
                               expAvgFactor, resultRunningMean, resultRunningVariance, epsilon, resultSaveMean,
                               resultSaveInvVariance, false, nullptr, nullptr, activation});
    });
}

miopenStatus_t miopenBatchNormForwardTrainingActivation_V2(
    miopenHandle_t handle, miopenBatchNormMode_t bn_mode, void* alpha, void* beta,
    const miopenTensorDescriptor_t xDesc, const void* x, const miopenTensorDescriptor_t yDesc, void* y,
    const miopenTensorDescriptor_t scaleDesc, const miopenTensorDescriptor_t biasVarDesc,
    const miopenTensorDescriptor_t savedMeanDesc, const miopenTensorDescriptor_t savedVarDesc,
    void* bnScale, void* bnBias, double expAvgFactor, const void* prevResultRunningMean,
    const void* prevResultRunningVariance, void* nextResultRunningMean, void* nextResultRunningVariance,
    double epsilon, void* resultSaveMean, void* resultSaveInvVariance,
    const miopenActivationDescriptor_t activDesc) {
    return mbn::api_call(__func__, [&](const char* fn) {
        MBN_LOG_CALL(fn, handle, bn_mode, alpha, beta, xDesc, x, yDesc, y, scaleDesc, biasVarDesc,
                     savedMeanDesc, savedVarDesc, bnScale, bnBias, expAvgFactor, prevResultRunningMean,
                     prevResultRunningVariance, nextResultRunningMean, nextResultRunningVariance, epsilon,
                     resultSaveMean, resultSaveInvVariance, activDesc);
        const mbn::ActivationSpec activation = mbn::activation_of(activDesc);
        mbn::forward_training(fn, handle,
                              {bn_mode, alpha, beta, xDesc, x, yDesc, y,
                               {scaleDesc, biasVarDesc, savedMeanDesc, savedVarDesc}, bnScale, bnBias,
                               expAvgFactor, nextResultRunningMean, nextResultRunningVariance, epsilon,
                               resultSaveMean, resultSaveInvVariance, true, prevResultRunningMean,
                               prevResultRunningVariance, activation});
    });
}

miopenStatus_t miopenBatchNormForwardInferenceActivation(
    miopenHandle_t handle, miopenBatchNormMode_t bn_mode, void* alpha, void* beta,
    const miopenTensorDescriptor_t xDesc, const void* x, const miopenTensorDescriptor_t yDesc, void* y,
    const miopenTensorDescriptor_t scaleDesc, const miopenTensorDescriptor_t biasDesc,
    const miopenTensorDescriptor_t estMeanDesc, const miopenTensorDescriptor_t estVarianceDesc,
    void* bnScale, void* bnBias, void* estimatedMean, void* estimatedVariance, double epsilon,
    const miopenActivationDescriptor_t activDesc) {
    return mbn::api_call(__func__, [&](const char* fn) {
        MBN_LOG_CALL(fn, handle, bn_mode, alpha, beta, xDesc, x, yDesc, y, scaleDesc, biasDesc, estMeanDesc,
                     estVarianceDesc, bnScale, bnBias, estimatedMean, estimatedVariance, epsilon, activDesc);
        const mbn::ActivationSpec activation = mbn::activation_of(activDesc);
        mbn::forward_inference(fn, handle,
                               {bn_mode, alpha, beta, xDesc, x, yDesc, y,
                                {scaleDesc, biasDesc, estMeanDesc, estVarianceDesc}, bnScale, bnBias,
                                estimatedMean, estimatedVariance, epsilon, false, activation});
    });
}

miopenStatus_t miopenBatchNormForwardInferenceActivationInvVariance(
    miopenHandle_t handle, miopenBatchNormMode_t bn_mode, void* alpha, void* beta,
    const miopenTensorDescriptor_t xDesc, const void* x, const miopenTensorDescriptor_t yDesc, void* y,
    const miopenTensorDescriptor_t scaleDesc, const miopenTensorDescriptor_t biasDesc,
    const miopenTensorDescriptor_t estMeanDesc, const miopenTensorDescriptor_t estInvVarianceDesc,
    void* bnScale, void* bnBias, void* estimatedMean, void* estimatedInvVariance,
    const miopenActivationDescriptor_t activDesc) {
    return mbn::api_call(__func__, [&](const char* fn) {
        MBN_LOG_CALL(fn, handle, bn_mode, alpha, beta, xDesc, x, yDesc, y, scaleDesc, biasDesc, estMeanDesc,
                     estInvVarianceDesc, bnScale, bnBias, estimatedMean, estimatedInvVariance, activDesc);
        const mbn::ActivationSpec activation = mbn::activation_of(activDesc);
        mbn::forward_inference(fn, handle,
                               {bn_mode, alpha, beta, xDesc, x, yDesc, y,
                                {scaleDesc, biasDesc, estMeanDesc, estInvVarianceDesc}, bnScale, bnBias,
                                estimatedMean, estimatedInvVariance, mbn::kInvVarianceFallbackEpsilon, true,
                                activation});
    });
}

miopenStatus_t miopenBatchNormBackwardActivation(
    miopenHandle_t handle, miopenBatchNormMode_t bn_mode, const void* alphaDataDiff, const void* betaDataDiff,
    const void* alphaParamDiff, const void* betaParamDiff, const miopenTensorDescriptor_t xDesc, const void* x,
    const miopenTensorDescriptor_t dyDesc, const void* dy, const miopenTensorDescriptor_t dxDesc, void* dx,
    const miopenTensorDescriptor_t scaleDesc, const miopenTensorDescriptor_t biasDesc,
    const miopenTensorDescriptor_t savedMeanDesc, const miopenTensorDescriptor_t savedVarianceDesc,
    const void* bnScale, const void* bnBias, void* resultBnScaleDiff, void* resultBnBiasDiff, double epsilon,
    const void* savedMean, const void* savedInvVariance, const miopenActivationDescriptor_t activDesc) {
    return mbn::api_call(__func__, [&](const char* fn) {
        MBN_LOG_CALL(fn, handle, bn_mode, alphaDataDiff, betaDataDiff, alphaParamDiff, betaParamDiff, xDesc, x,
                     dyDesc, dy, dxDesc, dx, scaleDesc, biasDesc, savedMeanDesc, savedVarianceDesc, bnScale,
                     bnBias, resultBnScaleDiff, resultBnBiasDiff, epsilon, savedMean, savedInvVariance,
                     activDesc);
        const mbn::ActivationSpec activation = mbn::activation_of(activDesc);
        mbn::backward(fn, handle,
                      {bn_mode, alphaDataDiff, betaDataDiff, alphaParamDiff, betaParamDiff, xDesc, x, dyDesc, dy,
                       dxDesc, dx, {scaleDesc, biasDesc, savedMeanDesc, savedVarianceDesc}, bnScale,
                       resultBnScaleDiff, resultBnBiasDiff, epsilon, savedMean, savedInvVariance, bnBias,
                       activation});
    });
}

}  // extern "C"
