#include "gn_problem_builder.hpp"

#include "validation.hpp"

#include <charconv>
#include <cmath>
#include <system_error>

namespace mbn {
namespace {

bool affine_mode(miopenNormMode_t mode) {
    const int m = static_cast<int>(mode);
    require(m >= MIOPEN_ELEMENTWISE_AFFINE && m <= MIOPEN_WEIGHT_BIAS_T5, miopenStatusBadParm, "mode ", m,
            " is not a miopenNormMode_t");
    return mode != MIOPEN_ELEMENTWISE_AFFINE;
}

// The ABI takes group norm's epsilon as a float, which holds 1e-5 only to
// 7 digits: a float64 group of two values 3e-3 apart (variance 2e-6) got an
// rstd 1e-8 off the float64 one for epsilon 1e-5.  The double used is the
// one the float's shortest decimal names (1e-5f: "1e-05", so 1e-5), the
// value the caller wrote, whatever type it was then rounded to.
double decimal_meant(float value) {
    if (!std::isfinite(value)) return value;
    char text[32];
    const auto written = std::to_chars(text, text + sizeof text, value);
    double widened = value;
    if (written.ec == std::errc() && std::from_chars(text, written.ptr, widened).ec == std::errc() &&
        static_cast<float>(widened) == value)
        return widened;
    return value;
}

Activation checked_activation(miopenBNActivation_t activation, float beta) {
    switch (activation) {
        case miopenBNActivationNone: return Activation::none;
        case miopenBNActivationSwish:
            require(std::isfinite(beta), miopenStatusBadParm, "activationBeta is ", beta, " (must be finite)");
            return Activation::swish;
    }
    fail(miopenStatusBadParm, "unknown activation ", static_cast<int>(activation));
}

// What forward and backward share: x, the group shape, the parameter and
// statistics type rules.
class GnChecker {
public:
    GnChecker(const Backend& backend, const miopenTensorDescriptor* x_desc, const void* x, std::uint64_t groups)
        : backend_(backend), x_desc_(require_descriptor(x_desc, "xDesc")) {
        require(x_desc_.rank >= 2 && x_desc_.rank <= 5, miopenStatusBadParm, "xDesc has rank ", x_desc_.rank,
                " (group norm takes ranks 2 to 5)");
        x_dtype_ = checked_io_dtype(x_desc_, "x");
        x_ = mbn::data_tensor(backend_, x_desc_, x_desc_, x, "x", x_dtype_);
        shape_.len = x_.len;
        const std::int64_t channels = shape_.len[kC];
        require(groups >= 1, miopenStatusBadParm, "num_groups is 0 (must be at least 1)");
        require(groups <= static_cast<std::uint64_t>(channels) && channels % static_cast<std::int64_t>(groups) == 0,
                miopenStatusBadParm, "num_groups ", groups, " does not divide the ", channels, " channels");
        shape_.groups = static_cast<std::int64_t>(groups);
        require(shape_.group_size() >= 2, miopenStatusBadParm, "each group holds ", shape_.group_size(),
                " value (", shape_.channels_per_group(), " channel(s) x ", shape_.spatial_size(),
                " position(s)); normalizing needs at least 2");
    }

    const GnShape& shape() const { return shape_; }
    const TensorArg& x() const { return x_; }

    // y, dy, dx: x's lengths and x's type.
    TensorArg data_like_x(const miopenTensorDescriptor* desc_ptr, const void* data, const char* what) const {
        const auto& desc = require_descriptor(desc_ptr, what, "the descriptor of ");
        require(desc.dtype == x_desc_.dtype, miopenStatusBadParm, what, " has type ", miopen_dtype_name(desc.dtype),
                " but x has ", miopen_dtype_name(x_desc_.dtype));
        return mbn::data_tensor(backend_, x_desc_, desc, data, what, x_dtype_);
    }

    // weight, bias and their gradients: (C) or (1, C, 1, ...); f32 or x's type,
    // the same for all of them (the first one seen fixes it).
    TensorArg param(const miopenTensorDescriptor* desc_ptr, const void* data, const char* what) {
        require_pointer(data, what);
        const auto& desc = require_descriptor(desc_ptr, what, "the descriptor of ");
        const auto dtype = compute_dtype(desc.dtype);
        require(dtype.has_value() && (*dtype == DType::f32 || *dtype == x_dtype_), miopenStatusNotImplemented,
                "no group-norm kernel for x of type ", miopen_dtype_name(x_desc_.dtype), " with ", what,
                " of type ", miopen_dtype_name(desc.dtype), " (miopenFloat or x's type)");
        if (param_dtype_) {
            require(*dtype == *param_dtype_, miopenStatusNotImplemented, what, " has type ",
                    miopen_dtype_name(desc.dtype), " unlike the other parameters (they must share one type)");
        }
        param_dtype_ = *dtype;
        TensorArg t = normalize(desc, data, *dtype);
        const bool one_dim = desc.rank == 1;
        require((one_dim || desc.rank == x_desc_.rank) && t.len == Lengths{1, shape_.len[kC], 1, 1, 1},
                miopenStatusBadParm, "the descriptor of ", what, " (", desc, ") must have lengths (",
                shape_.len[kC], ") or (1, ", shape_.len[kC], ", 1, ...)");
        backend_.check_accessible(data, what);
        return t;
    }

    // mean, rstd: (N, G); f32, or f64 when x is f64.
    TensorArg statistic(const miopenTensorDescriptor* desc_ptr, const void* data, const char* what) const {
        require_pointer(data, what);
        const auto& desc = require_descriptor(desc_ptr, what, "the descriptor of ");
        const auto dtype = compute_dtype(desc.dtype);
        require(dtype.has_value() && (*dtype == DType::f32 || (*dtype == DType::f64 && x_dtype_ == DType::f64)),
                miopenStatusNotImplemented, what, " has type ", miopen_dtype_name(desc.dtype),
                " (group-norm statistics are miopenFloat, or miopenDouble for miopenDouble x)");
        TensorArg t = normalize(desc, data, *dtype);
        require(desc.rank == 2 && t.len == Lengths{shape_.len[kN], shape_.groups, 1, 1, 1}, miopenStatusBadParm,
                "the descriptor of ", what, " (", desc, ") must have lengths (", shape_.len[kN], ", ",
                shape_.groups, ")");
        backend_.check_accessible(data, what);
        return t;
    }

private:
    const Backend& backend_;
    const TensorDesc x_desc_;  // a snapshot: see tensor_descriptor.hpp
    DType x_dtype_ = DType::f32;
    std::optional<DType> param_dtype_;
    GnShape shape_;
    TensorArg x_;
};

}  // namespace

GnForward build_gn_forward(const Backend& backend, const GnForwardCall& call) {
    GnForward p;
    p.affine = affine_mode(call.mode);
    GnChecker check(backend, call.x_desc, call.x, call.num_groups);
    p.shape = check.shape();
    p.x = check.x();
    p.y = check.data_like_x(call.y_desc, call.y, "y");
    require_distinct_elements(p.y, "y");
    if (p.affine) {
        p.weight = check.param(call.weight_desc, call.weight, "weight");
        p.bias = check.param(call.bias_desc, call.bias, "bias");
    }
    if (call.mean) p.mean = check.statistic(call.mean_desc, call.mean, "mean");
    if (call.rstd) p.rstd = check.statistic(call.rstd_desc, call.rstd, "rstd");
    require_distinct_elements(p.mean, "mean");
    require_distinct_elements(p.rstd, "rstd");
    check_epsilon(call.epsilon);
    p.epsilon = decimal_meant(call.epsilon);
    p.activation = checked_activation(call.activation, call.activation_beta);
    p.swish_beta = call.activation_beta;
    require_no_aliasing({{p.x, "x", false},
                         {p.y, "y", true},
                         {p.weight, "weight", false},
                         {p.bias, "bias", false},
                         {p.mean, "mean", true},
                         {p.rstd, "rstd", true}},
                        {{"x", "y"}});
    return p;
}

GnBackward build_gn_backward(const Backend& backend, const GnBackwardCall& call) {
    GnBackward p;
    p.affine = affine_mode(call.mode);
    GnChecker check(backend, call.x_desc, call.x, call.num_groups);
    p.shape = check.shape();
    p.x = check.x();
    p.dy = check.data_like_x(call.dy_desc, call.dy, "dy");
    p.dx = check.data_like_x(call.dx_desc, call.dx, "dx");
    require_distinct_elements(p.dx, "dx");
    p.activation = checked_activation(call.activation, call.activation_beta);
    p.swish_beta = call.activation_beta;
    if (p.affine) {
        p.weight = check.param(call.weight_desc, call.weight, "weight");
        if (p.activation != Activation::none) p.bias = check.param(call.bias_desc, call.bias, "bias");
        p.dweight = check.param(call.dweight_desc, call.dweight, "dweight");
        p.dbias = check.param(call.dbias_desc, call.dbias, "dbias");
        require_distinct_elements(p.dweight, "dweight");
        require_distinct_elements(p.dbias, "dbias");
    }
    p.mean = check.statistic(call.mean_desc, call.mean, "mean");
    p.rstd = check.statistic(call.rstd_desc, call.rstd, "rstd");
    require_no_aliasing({{p.x, "x", false},
                         {p.dy, "dy", false},
                         {p.dx, "dx", true},
                         {p.weight, "weight", false},
                         {p.bias, "bias", false},
                         {p.mean, "mean", false},
                         {p.rstd, "rstd", false},
                         {p.dweight, "dweight", true},
                         {p.dbias, "dbias", true}},
                        {{"dy", "dx"}, {"x", "dx"}});
    return p;
}

}  // namespace mbn
