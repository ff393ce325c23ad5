#include "bn_problem_builder.hpp"

#include "validation.hpp"

#include <cmath>

namespace mbn {
namespace {

BnMode checked_mode(miopenBatchNormMode_t mode) {
    switch (mode) {
        case miopenBNPerActivation: return BnMode::per_activation;
        case miopenBNSpatial: return BnMode::spatial;
    }
    fail(miopenStatusBadParm, "bn_mode ", static_cast<int>(mode),
         " is neither miopenBNPerActivation (0) nor miopenBNSpatial (1)");
}

// x's descriptor fixes the geometry every other tensor is checked against.
BnGeometry checked_geometry(const miopenTensorDescriptor& x, miopenBatchNormMode_t mode) {
    require(x.rank >= 2 && x.rank <= 5, miopenStatusBadParm, "xDesc has rank ", x.rank,
            " (batch norm takes ranks 2 to 5)");
    BnGeometry geom;
    geom.mode = checked_mode(mode);
    geom.len = normalize(x, nullptr, DType::f32).len;
    return geom;
}

Lengths expected_param_lengths(const BnGeometry& geom) {
    if (geom.mode == BnMode::spatial) return {1, geom.len[kC], 1, 1, 1};
    return {1, geom.len[kC], geom.len[kD], geom.len[kH], geom.len[kW]};
}

// Everything shared by the three ops: x's type, the parameter type rule, and
// the tensors checked so far, so each op adds only what is its own.
class BnChecker {
public:
    BnChecker(const Backend& backend, miopenBatchNormMode_t mode, const miopenTensorDescriptor* x_desc,
              const void* x)
        : backend_(backend),
          x_desc_(require_descriptor(x_desc, "xDesc")),
          geom_(checked_geometry(x_desc_, mode)),
          x_dtype_(checked_io_dtype(x_desc_, "x")) {
        x_ = data_tensor(x_desc_, x, "x", x_dtype_);
    }

    const BnGeometry& geometry() const { return geom_; }
    const TensorArg& x() const { return x_; }
    DType x_dtype() const { return x_dtype_; }

    // A tensor with x's lengths (y, dy, dx) whose type is given.
    TensorArg data_tensor(const miopenTensorDescriptor& desc, const void* data, const char* what,
                          DType dtype) const {
        return mbn::data_tensor(backend_, x_desc_, desc, data, what, dtype);
    }

    // y: x's lengths and type; in place only with x's strides.
    TensorArg output_like_x(const miopenTensorDescriptor* y_desc, void* y) const {
        const auto& desc = require_descriptor(y_desc, "yDesc");
        require(desc.dtype == x_desc_.dtype, miopenStatusBadParm, "x (", miopen_dtype_name(x_desc_.dtype),
                ") and y (", miopen_dtype_name(desc.dtype), ") have different types");
        TensorArg out = data_tensor(desc, y, "y", x_dtype_);
        require_distinct_elements(out, "y");
        check_in_place(x_, out, "x", "y");
        return out;
    }

    // A parameter-shaped tensor; NULL data gives an absent TensorArg when
    // `optional`, BadParm otherwise.
    TensorArg param_tensor(const miopenTensorDescriptor* desc_ptr, const void* data, const char* what,
                           bool optional = false) const {
        if (data == nullptr) {
            require(optional, miopenStatusBadParm, what, " is NULL");
            return TensorArg{};
        }
        const auto& desc = require_descriptor(desc_ptr, what, "the descriptor of ");
        require(desc.rank == x_desc_.rank, miopenStatusBadParm, "the descriptor of ", what, " has rank ",
                desc.rank, " but x has rank ", x_desc_.rank);
        // Each parameter has its own type: float, or x's.
        const auto param = compute_dtype(desc.dtype);
        require(param.has_value() && (*param == DType::f32 || *param == x_dtype_), miopenStatusNotImplemented,
                "no batch-norm kernel for x of type ", miopen_dtype_name(x_desc_.dtype), " with ", what,
                " of type ", miopen_dtype_name(desc.dtype), " (parameters must be miopenFloat or x's type)");
        TensorArg t = normalize(desc, data, *param);
        require(t.len == expected_param_lengths(geom_), miopenStatusBadParm, "the descriptor of ", what,
                " (", desc, ") does not fit x (", x_desc_, ") in ",
                geom_.mode == BnMode::spatial ? "spatial" : "per-activation",
                " mode: expected lengths (1, C, 1, ...) spatially, (1, C, [D,] H, W) per activation");
        backend_.check_accessible(data, what);
        return t;
    }

    // A parameter-shaped output (saved and running statistics, gradients).
    TensorArg param_output(const miopenTensorDescriptor* desc_ptr, void* data, const char* what,
                           bool optional = false) const {
        TensorArg t = param_tensor(desc_ptr, data, what, optional);
        require_distinct_elements(t, what);
        return t;
    }

private:
    const Backend& backend_;
    const miopenTensorDescriptor& x_desc_;
    BnGeometry geom_;
    DType x_dtype_;
    TensorArg x_;
};

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
    p.var = check.param_tensor(call.params.var, call.var,
                               call.var_is_inv_std ? "estimatedInvVariance" : "estimatedVariance");
    p.var_is_inv_std = call.var_is_inv_std;
    return p;
}

BnForwardTraining build_batch_statistics_inference(const Backend& backend, const BnInferenceCall& call) {
    BnForwardTraining p;
    check_inference_common(backend, call, p);
    return p;  // no running, no saved statistics: only y is written
}

BnBackward build_backward(const Backend& backend, const BnBackwardCall& call) {
    BnChecker check(backend, call.mode, call.x_desc, call.x);
    BnBackward p;
    p.geom = check.geometry();
    p.data = read_blend(call.alpha_data, call.beta_data, "alphaDataDiff", "betaDataDiff");
    p.param = read_blend(call.alpha_param, call.beta_param, "alphaParamDiff", "betaParamDiff");
    p.x = check.x();
    const auto& dy_desc = require_descriptor(call.dy_desc, "dyDesc");
    const auto& dx_desc = require_descriptor(call.dx_desc, "dxDesc");
    require(dy_desc.dtype == dx_desc.dtype, miopenStatusBadParm, "dy (", miopen_dtype_name(dy_desc.dtype),
            ") and dx (", miopen_dtype_name(dx_desc.dtype), ") have different types");
    const DType grad = checked_io_dtype(dy_desc, "dy");
    require(grad == check.x_dtype() || grad == DType::f32, miopenStatusNotImplemented,
            "no batch-norm backward kernel for x of type ", dtype_name(check.x_dtype()),
            " with dy/dx of type ", dtype_name(grad), " (dy/dx must be x's type or float32)");
    p.dy = check.data_tensor(dy_desc, call.dy, "dy", grad);
    p.dx = check.data_tensor(dx_desc, call.dx, "dx", grad);
    require_distinct_elements(p.dx, "dx");
    check_in_place(p.dy, p.dx, "dy", "dx");
    require(p.dx.data != p.x.data || grad == check.x_dtype(), miopenStatusBadParm,
            "dx aliases x but has a different type");
    check_in_place(p.x, p.dx, "x", "dx");
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
    return p;
}

void derive_bn_descriptor(miopenTensorDescriptor& derived, const miopenTensorDescriptor& x,
                          miopenBatchNormMode_t mode) {
    require(x.rank >= 4 && x.rank <= 5, miopenStatusBadParm, "xDesc has rank ", x.rank,
            " (miopenDeriveBNTensorDescriptor takes ranks 4 and 5)");
    const BnMode m = checked_mode(mode);
    std::int64_t lens[miopenTensorDescriptor::kMaxRank];
    lens[0] = 1;
    for (int i = 1; i < x.rank; ++i) lens[i] = (m == BnMode::spatial && i > 1) ? 1 : x.lens[i];
    set_descriptor(derived, miopenFloat, x.rank, lens, nullptr);
}

}  // namespace mbn
