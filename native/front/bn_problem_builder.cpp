#include "bn_problem_builder.hpp"

#include "bn_checker.hpp"
#include "validation.hpp"

#include <cmath>

namespace mbn {
namespace {

// A fused activation's result cannot be blended with y's prior content:
// alpha * f(z) is written, beta must be 0.
void check_activation_blend(const ActivationSpec& activation, const Blend& out) {
    require(activation.identity() || !out.reads_prior(), miopenStatusNotImplemented,
            "beta is ", out.beta, ": blending y's prior content is not implemented with a fused activation");
}

}  // namespace

BnForwardTraining build_forward_training(const Backend& backend, const BnTrainingCall& call) {
    BnChecker check(backend, call.mode, call.x_desc, call.x);
    BnForwardTraining p;
    p.geom = check.geometry();
    p.out = read_blend(call.alpha, call.beta, "alpha", "beta");
    p.x = check.x();
    p.y = check.output_like_x(call.y_desc, call.y);
    p.scale = check.param_tensor(call.params.scale, call.scale, "bnScale");
    p.bias = check.param_tensor(call.params.bias, call.bias, "bnBias");
    p.activation = call.activation;
    check_activation_blend(p.activation, p.out);
    const char* next_mean = call.separate_previous ? "nextResultRunningMean" : "resultRunningMean";
    const char* next_var = call.separate_previous ? "nextResultRunningVariance" : "resultRunningVariance";
    const bool running = pair_present(call.running_mean, call.running_var, next_mean, next_var);
    pair_present(call.saved_mean, call.saved_inv_std, "resultSaveMean", "resultSaveInvVariance");
    p.running_mean = check.param_output(call.params.mean, call.running_mean, next_mean, true);
    p.running_var = check.param_output(call.params.var, call.running_var, next_var, true);
    if (call.separate_previous) {
        const bool previous = pair_present(call.prev_running_mean, call.prev_running_var, "prevResultRunningMean",
                                           "prevResultRunningVariance");
        require(previous == running, miopenStatusBadParm, "the previous running statistics are ",
                previous ? "given" : "NULL", " but the next ones are ", running ? "given" : "NULL",
                " (all four go together)");
        p.prev_running_mean = check.param_tensor(call.params.mean, call.prev_running_mean, "prevResultRunningMean", true);
        p.prev_running_var = check.param_tensor(call.params.var, call.prev_running_var, "prevResultRunningVariance", true);
    } else {
        p.prev_running_mean = p.running_mean;
        p.prev_running_var = p.running_var;
    }
    p.saved_mean = check.param_output(call.params.mean, call.saved_mean, "resultSaveMean", true);
    p.saved_inv_std = check.param_output(call.params.var, call.saved_inv_std, "resultSaveInvVariance", true);
    check_epsilon(call.epsilon);
    if (running)
        require(std::isfinite(call.exp_avg_factor), miopenStatusBadParm, "expAvgFactor is ",
                call.exp_avg_factor, " (must be finite)");
    p.epsilon = call.epsilon;
    p.exp_avg_factor = call.exp_avg_factor;
    // V3's previous statistics are inputs of their own (V1 and V2 read and
    // write one pair); the next ones may be written over them in place.
    const TensorArg prev_mean = call.separate_previous ? p.prev_running_mean : TensorArg{};
    const TensorArg prev_var = call.separate_previous ? p.prev_running_var : TensorArg{};
    require_no_aliasing({{p.x, "x", false},
                         {p.y, "y", true},
                         {p.scale, "bnScale", false},
                         {p.bias, "bnBias", false},
                         {prev_mean, "prevResultRunningMean", false},
                         {prev_var, "prevResultRunningVariance", false},
                         {p.running_mean, next_mean, true},
                         {p.running_var, next_var, true},
                         {p.saved_mean, "resultSaveMean", true},
                         {p.saved_inv_std, "resultSaveInvVariance", true}},
                        {{"x", "y"},
                         {"prevResultRunningMean", "nextResultRunningMean"},
                         {"prevResultRunningVariance", "nextResultRunningVariance"}});
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
    p.scale = check.param_tensor(call.params.scale, call.scale, "bnScale");
    p.bias = check.param_tensor(call.params.bias, call.bias, "bnBias");
    check_epsilon(call.epsilon);
    p.epsilon = call.epsilon;
    p.activation = call.activation;
    check_activation_blend(p.activation, p.out);
    return check;
}

}  // namespace

bool inference_uses_estimates(const BnInferenceCall& call) {
    return pair_present(call.mean, call.var, "estimatedMean",
                        call.var_is_inv_std ? "estimatedInvVariance" : "estimatedVariance");
}

BnForwardInference build_forward_inference(const Backend& backend, const BnInferenceCall& call) {
    BnForwardInference p;
    const BnChecker check = check_inference_common(backend, call, p);
    p.mean = check.param_tensor(call.params.mean, call.mean, "estimatedMean");
    const char* var_name = call.var_is_inv_std ? "estimatedInvVariance" : "estimatedVariance";
    p.var = check.param_tensor(call.params.var, call.var, var_name);
    p.var_is_inv_std = call.var_is_inv_std;
    require_no_aliasing({{p.x, "x", false},
                         {p.y, "y", true},
                         {p.scale, "bnScale", false},
                         {p.bias, "bnBias", false},
                         {p.mean, "estimatedMean", false},
                         {p.var, var_name, false}},
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
    p.scale = check.param_tensor(call.params.scale, call.scale, "bnScale");
    p.dscale = check.param_output(call.params.scale, call.dscale, "resultBnScaleDiff");
    p.dbias = check.param_output(call.params.bias, call.dbias, "resultBnBiasDiff");
    pair_present(call.saved_mean, call.saved_inv_std, "savedMean", "savedInvVariance");
    p.saved_mean = check.param_tensor(call.params.mean, call.saved_mean, "savedMean", true);
    p.saved_inv_std = check.param_tensor(call.params.var, call.saved_inv_std, "savedInvVariance", true);
    check_epsilon(call.epsilon);
    p.epsilon = call.epsilon;
    // z = scale * xhat + bias is the activation's input: bias is read only then.
    p.activation = call.activation;
    if (!p.activation.identity()) p.bias = check.param_tensor(call.params.bias, call.bias, "bnBias");
    require_no_aliasing({{p.x, "x", false},
                         {p.dy, "dy", false},
                         {p.dx, "dx", true},
                         {p.scale, "bnScale", false},
                         {p.bias, "bnBias", false},
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
