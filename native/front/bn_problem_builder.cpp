#include "bn_problem_builder.hpp"

#include "bn_checker.hpp"
#include "validation.hpp"

#include <cmath>

namespace mbn {

BnForwardTraining build_forward_training(const Backend& backend, const BnTrainingCall& call) {
    BnChecker check(backend, call.mode, call.x_desc, call.x);
    BnForwardTraining p;
    p.geom = check.geometry();
    p.out = read_blend(call.alpha, call.beta, "alpha", "beta");
    p.x = check.x();
    p.y = check.output_like_x(call.y_desc, call.y);
    check.set_param_dtype(call.params.scale);
    p.scale = check.param_tensor(call.params.scale, call.scale, "bnScale");
    p.bias = check.param_tensor(call.params.bias, call.bias, "bnBias");
    const bool running = pair_present(call.running_mean, call.running_var, "resultRunningMean",
                                      "resultRunningVariance");
    pair_present(call.saved_mean, call.saved_inv_std, "resultSaveMean", "resultSaveInvVariance");
    p.running_mean = check.param_output(call.params.mean, call.running_mean, "resultRunningMean", true);
    p.running_var = check.param_output(call.params.var, call.running_var, "resultRunningVariance", true);
    p.saved_mean = check.param_output(call.params.mean, call.saved_mean, "resultSaveMean", true);
    p.saved_inv_std = check.param_output(call.params.var, call.saved_inv_std, "resultSaveInvVariance", true);
    check_epsilon(call.epsilon);
    if (running)
        require(std::isfinite(call.exp_avg_factor), miopenStatusBadParm, "expAvgFactor is ",
                call.exp_avg_factor, " (must be finite)");
    p.epsilon = call.epsilon;
    p.exp_avg_factor = call.exp_avg_factor;
    require_no_aliasing({{p.x, "x", false},
                         {p.y, "y", true},
                         {p.scale, "bnScale", false},
                         {p.bias, "bnBias", false},
                         {p.running_mean, "resultRunningMean", true},
                         {p.running_var, "resultRunningVariance", true},
                         {p.saved_mean, "resultSaveMean", true},
                         {p.saved_inv_std, "resultSaveInvVariance", true}},
                        {{"x", "y"}});
    require(p.geom.reduction_size() > 1, miopenStatusBadParm, "training needs more than one value per ",
            p.geom.mode == BnMode::spatial ? "channel" : "activation", " (the reduction count is ",
            p.geom.reduction_size(), ")");
    return p;
}

namespace {

// What both inference variants check: x, y, scale and bias.
template <typename Problem>
BnChecker check_inference_common(const Backend& backend, const BnInferenceCall& call, Problem& p) {
    BnChecker check(backend, call.mode, call.x_desc, call.x);
    p.geom = check.geometry();
    p.out = read_blend(call.alpha, call.beta, "alpha", "beta");
    p.x = check.x();
    p.y = check.output_like_x(call.y_desc, call.y);
    check.set_param_dtype(call.params.scale);
    p.scale = check.param_tensor(call.params.scale, call.scale, "bnScale");
    p.bias = check.param_tensor(call.params.bias, call.bias, "bnBias");
    check_epsilon(call.epsilon);
    p.epsilon = call.epsilon;
    return check;
}

}  // namespace

bool inference_uses_estimates(const BnInferenceCall& call) {
    return pair_present(call.mean, call.var, "estimatedMean", "estimatedVariance");
}

BnForwardInference build_forward_inference(const Backend& backend, const BnInferenceCall& call) {
    BnForwardInference p;
    const BnChecker check = check_inference_common(backend, call, p);
    p.mean = check.param_tensor(call.params.mean, call.mean, "estimatedMean");
    p.var = check.param_tensor(call.params.var, call.var, "estimatedVariance");
    require_no_aliasing({{p.x, "x", false},
                         {p.y, "y", true},
                         {p.scale, "bnScale", false},
                         {p.bias, "bnBias", false},
                         {p.mean, "estimatedMean", false},
                         {p.var, "estimatedVariance", false}},
                        {{"x", "y"}});
    return p;
}

BnForwardTraining build_batch_statistics_inference(const Backend& backend, const BnInferenceCall& call) {
    BnForwardTraining p;
    check_inference_common(backend, call, p);
    require_no_aliasing({{p.x, "x", false}, {p.y, "y", true}, {p.scale, "bnScale", false}, {p.bias, "bnBias", false}},
                        {{"x", "y"}});
    return p;  // no running, no saved statistics: only y is written
}

BnBackward build_backward(const Backend& backend, const BnBackwardCall& call) {
    BnChecker check(backend, call.mode, call.x_desc, call.x);
    BnBackward p;
    p.geom = check.geometry();
    p.data = read_blend(call.alpha_data, call.beta_data, "alphaDataDiff", "betaDataDiff");
    p.param = read_blend(call.alpha_param, call.beta_param, "alphaParamDiff", "betaParamDiff");
    p.x = check.x();
    const BnChecker::Gradients g = check.gradients(call.dy_desc, call.dy, call.dx_desc, call.dx);
    p.dy = g.dy;
    p.dx = g.dx;
    check.set_param_dtype(call.params.scale);
    p.scale = check.param_tensor(call.params.scale, call.scale, "bnScale");
    p.dscale = check.param_output(call.params.scale, call.dscale, "resultBnScaleDiff");
    p.dbias = check.param_output(call.params.bias, call.dbias, "resultBnBiasDiff");
    pair_present(call.saved_mean, call.saved_inv_std, "savedMean", "savedInvVariance");
    p.saved_mean = check.param_tensor(call.params.mean, call.saved_mean, "savedMean", true);
    p.saved_inv_std = check.param_tensor(call.params.var, call.saved_inv_std, "savedInvVariance", true);
    check_epsilon(call.epsilon);
    p.epsilon = call.epsilon;
    require_no_aliasing({{p.x, "x", false},
                         {p.dy, "dy", false},
                         {p.dx, "dx", true},
                         {p.scale, "bnScale", false},
                         {p.dscale, "resultBnScaleDiff", true},
                         {p.dbias, "resultBnBiasDiff", true},
                         {p.saved_mean, "savedMean", false},
                         {p.saved_inv_std, "savedInvVariance", false}},
                        {{"dy", "dx"}, {"x", "dx"}});
    return p;
}

void derive_bn_descriptor(miopenTensorDescriptor* derived, const TensorDesc& x,
                          miopenBatchNormMode_t mode) {
    require(x.rank >= 4 && x.rank <= 5, miopenStatusBadParm, "xDesc has rank ", x.rank,
            " (miopenDeriveBNTensorDescriptor takes ranks 4 and 5)");
    const BnMode m = checked_mode(mode);
    std::int64_t lens[mbn::TensorDesc::kMaxRank];
    lens[0] = 1;
    for (int i = 1; i < x.rank; ++i) lens[i] = (m == BnMode::spatial && i > 1) ? 1 : x.lens[i];
    set_descriptor(derived, "derivedBnDesc", miopenFloat, x.rank, lens, nullptr);
}

}  // namespace mbn
