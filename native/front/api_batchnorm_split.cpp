// The split-phase (data-parallel) batch-norm entry points: each one logs its
// arguments, builds a validated problem (bn_split_problem_builder) and
// dispatches to the handle's backend, all inside api_call.
#include "api_guard.hpp"
#include "bn_split_problem_builder.hpp"
#include "handle.hpp"
#include "logging.hpp"

namespace mbn {
namespace {

// Builds the problem, then runs `op` with it on the handle's backend.
template <typename Build, typename Call, typename Op>
void run_split_op(miopenHandle* handle, Build&& build, const Call& call, Op&& op) {
    const auto h = use_handle(handle);
    const auto problem = build(h.backend(), call);
    dispatch(h, [&](Backend& b) { op(b, problem); });
}

}  // namespace
}  // namespace mbn

extern "C" {

miopenStatus_t miopenBNBatchNormLocalStatistics(miopenHandle_t handle, miopenBatchNormMode_t bn_mode,
                                                const miopenTensorDescriptor_t xDesc, const void* x,
                                                const miopenTensorDescriptor_t statsDesc, void* count, void* mean,
                                                void* m2) {
    return mbn::api_call(__func__, [&](const char* fn) {
        MBN_LOG_CALL(fn, handle, bn_mode, xDesc, x, statsDesc, count, mean, m2);
        mbn::run_split_op(handle, mbn::build_local_statistics,
                          mbn::BnLocalStatisticsCall{bn_mode, xDesc, x, statsDesc, count, mean, m2},
                          [](mbn::Backend& b, const mbn::BnLocalStatistics& p) { b.bn_local_statistics(p); });
    });
}

miopenStatus_t miopenBNBatchNormMergeStatistics(miopenHandle_t handle, const miopenTensorDescriptor_t partialDesc,
                                                const void* partialCount, const void* partialMean,
                                                const void* partialM2, double epsilon,
                                                const miopenTensorDescriptor_t savedDesc, void* savedMean,
                                                void* savedInvStd, double expAvgFactor,
                                                const miopenTensorDescriptor_t runningDesc, void* runningMean,
                                                void* runningVariance) {
    return mbn::api_call(__func__, [&](const char* fn) {
        MBN_LOG_CALL(fn, handle, partialDesc, partialCount, partialMean, partialM2, epsilon, savedDesc, savedMean,
                     savedInvStd, expAvgFactor, runningDesc, runningMean, runningVariance);
        mbn::run_split_op(handle, mbn::build_merge_statistics,
                          mbn::BnMergeStatisticsCall{partialDesc, partialCount, partialMean, partialM2, epsilon,
                                                     savedDesc, savedMean, savedInvStd, expAvgFactor, runningDesc,
                                                     runningMean, runningVariance},
                          [](mbn::Backend& b, const mbn::BnMergeStatistics& p) { b.bn_merge_statistics(p); });
    });
}

miopenStatus_t miopenBNBatchNormForwardNormalize(miopenHandle_t handle, miopenBatchNormMode_t bn_mode,
                                                 const void* alpha, const void* beta,
                                                 const miopenTensorDescriptor_t xDesc, const void* x,
                                                 const miopenTensorDescriptor_t yDesc, void* y,
                                                 const miopenTensorDescriptor_t paramDesc, const void* bnScale,
                                                 const void* bnBias, const void* mean, const void* invStd) {
    return mbn::api_call(__func__, [&](const char* fn) {
        MBN_LOG_CALL(fn, handle, bn_mode, alpha, beta, xDesc, x, yDesc, y, paramDesc, bnScale, bnBias, mean, invStd);
        mbn::run_split_op(handle, mbn::build_normalize,
                          mbn::BnNormalizeCall{bn_mode, alpha, beta, xDesc, x, yDesc, y, paramDesc, bnScale, bnBias,
                                               mean, invStd},
                          [](mbn::Backend& b, const mbn::BnNormalize& p) { b.bn_normalize(p); });
    });
}

miopenStatus_t miopenBNBatchNormBackwardReduce(miopenHandle_t handle, miopenBatchNormMode_t bn_mode,
                                               const void* alphaParamDiff, const void* betaParamDiff,
                                               const miopenTensorDescriptor_t xDesc, const void* x,
                                               const miopenTensorDescriptor_t dyDesc, const void* dy,
                                               const miopenTensorDescriptor_t paramDesc, const void* mean,
                                               const void* invStd, void* resultBnScaleDiff, void* resultBnBiasDiff,
                                               const miopenTensorDescriptor_t sumsDesc, void* sumDy, void* sumDyXmu) {
    return mbn::api_call(__func__, [&](const char* fn) {
        MBN_LOG_CALL(fn, handle, bn_mode, alphaParamDiff, betaParamDiff, xDesc, x, dyDesc, dy, paramDesc, mean, invStd,
                     resultBnScaleDiff, resultBnBiasDiff, sumsDesc, sumDy, sumDyXmu);
        mbn::run_split_op(handle, mbn::build_backward_reduce,
                          mbn::BnBackwardReduceCall{bn_mode, alphaParamDiff, betaParamDiff, xDesc, x, dyDesc, dy,
                                                    paramDesc, mean, invStd, resultBnScaleDiff, resultBnBiasDiff,
                                                    sumsDesc, sumDy, sumDyXmu},
                          [](mbn::Backend& b, const mbn::BnBackwardReduce& p) { b.bn_backward_reduce(p); });
    });
}

miopenStatus_t miopenBNBatchNormBackwardElementwise(
    miopenHandle_t handle, miopenBatchNormMode_t bn_mode, const void* alphaDataDiff, const void* betaDataDiff,
    const miopenTensorDescriptor_t xDesc, const void* x, const miopenTensorDescriptor_t dyDesc, const void* dy,
    const miopenTensorDescriptor_t dxDesc, void* dx, const miopenTensorDescriptor_t paramDesc, const void* bnScale,
    const void* mean, const void* invStd, const miopenTensorDescriptor_t sumsDesc, const void* sumDy,
    const void* sumDyXmu, const void* count) {
    return mbn::api_call(__func__, [&](const char* fn) {
        MBN_LOG_CALL(fn, handle, bn_mode, alphaDataDiff, betaDataDiff, xDesc, x, dyDesc, dy, dxDesc, dx, paramDesc,
                     bnScale, mean, invStd, sumsDesc, sumDy, sumDyXmu, count);
        mbn::run_split_op(handle, mbn::build_backward_elementwise,
                          mbn::BnBackwardElementwiseCall{bn_mode, alphaDataDiff, betaDataDiff, xDesc, x, dyDesc, dy,
                                                         dxDesc, dx, paramDesc, bnScale, mean, invStd, sumsDesc,
                                                         sumDy, sumDyXmu, count},
                          [](mbn::Backend& b, const mbn::BnBackwardElementwise& p) { b.bn_backward_elementwise(p); });
    });
}

}  // extern "C"
