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
BnGeometry checked_geometry(const TensorDesc& x, miopenBatchNormMode_t mode) {
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
    TensorArg data_tensor(const TensorDesc& desc, const void* data, const char* what,
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
        return out;
    }

    // The parameter type comes from the scale descriptor: float, or x's type.
    void set_param_dtype(const miopenTensorDescriptor* scale_desc) {
        const auto& desc = require_descriptor(scale_desc, "the scale descriptor");
        const auto param = compute_dtype(desc.dtype);
        require(param.has_value() && (*param == DType::f32 || *param == x_dtype_),
                miopenStatusNotImplemented, "no batch-norm kernel for x of type ",
                miopen_dtype_name(x_desc_.dtype), " with parameters of type ",
                miopen_dtype_name(desc.dtype), " (parameters must be miopenFloat or x's type)");
        param_dtype_ = *param;
        param_abi_dtype_ = desc.dtype;
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
        require(desc.dtype == param_abi_dtype_, miopenStatusNotImplemented, what, " has type ",
                miopen_dtype_name(desc.dtype), " but the scale has ",
                miopen_dtype_name(param_abi_dtype_), " (all parameters must share one type)");
        TensorArg t = normalize(desc, data, param_dtype_);
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
    const TensorDesc x_desc_;  // a snapshot: see tensor_descriptor.hpp
    BnGeometry geom_;
    DType x_dtype_;
    DType param_dtype_ = DType::f32;
    miopenDataType_t param_abi_dtype_ = miopenFloat;
    TensorArg x_;
};

}  // namespace

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
