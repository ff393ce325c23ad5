#include "bn_checker.hpp"

#include "validation.hpp"

namespace mbn {
namespace {

// x's descriptor fixes the geometry every other tensor is checked against.
BnGeometry checked_geometry(const TensorDesc& x, miopenBatchNormMode_t mode) {
    require(x.rank >= 2 && x.rank <= 5, miopenStatusBadParm, "xDesc has rank ", x.rank,
            " (batch norm takes ranks 2 to 5)");
    BnGeometry geom;
    geom.mode = checked_mode(mode);
    geom.len = normalize(x, nullptr, DType::f32).len;
    return geom;
}

}  // namespace

BnMode checked_mode(miopenBatchNormMode_t mode) {
    switch (mode) {
        case miopenBNPerActivation: return BnMode::per_activation;
        case miopenBNSpatial: return BnMode::spatial;
    }
    fail(miopenStatusBadParm, "bn_mode ", static_cast<int>(mode),
         " is neither miopenBNPerActivation (0) nor miopenBNSpatial (1)");
}

Lengths expected_param_lengths(const BnGeometry& geom) {
    if (geom.mode == BnMode::spatial) return {1, geom.len[kC], 1, 1, 1};
    return {1, geom.len[kC], geom.len[kD], geom.len[kH], geom.len[kW]};
}

BnChecker::BnChecker(const Backend& backend, miopenBatchNormMode_t mode, const miopenTensorDescriptor* x_desc,
                     const void* x)
    : backend_(backend),
      x_desc_(require_descriptor(x_desc, "xDesc")),
      geom_(checked_geometry(x_desc_, mode)),
      x_dtype_(checked_io_dtype(x_desc_, "x")) {
    x_ = data_tensor(x_desc_, x, "x", x_dtype_);
}

TensorArg BnChecker::data_tensor(const TensorDesc& desc, const void* data, const char* what,
                                 DType dtype) const {
    return mbn::data_tensor(backend_, x_desc_, desc, data, what, dtype);
}

TensorArg BnChecker::output_like_x(const miopenTensorDescriptor* y_desc, void* y) const {
    const TensorDesc desc = require_descriptor(y_desc, "yDesc");
    require(desc.dtype == x_desc_.dtype, miopenStatusBadParm, "x (", miopen_dtype_name(x_desc_.dtype), ") and y (",
            miopen_dtype_name(desc.dtype), ") have different types");
    TensorArg out = data_tensor(desc, y, "y", x_dtype_);
    require_distinct_elements(out, "y");
    return out;
}

DType BnChecker::gradient_dtype(const TensorDesc& dy_desc) const {
    const DType grad = checked_io_dtype(dy_desc, "dy");
    require(grad == x_dtype_ || grad == DType::f32, miopenStatusNotImplemented,
            "no batch-norm backward kernel for x of type ", dtype_name(x_dtype_), " with dy/dx of type ",
            dtype_name(grad), " (dy/dx must be x's type or float32)");
    return grad;
}

TensorArg BnChecker::gradient_input(const miopenTensorDescriptor* dy_desc_ptr, const void* dy) const {
    const TensorDesc dy_desc = require_descriptor(dy_desc_ptr, "dyDesc");
    return data_tensor(dy_desc, dy, "dy", gradient_dtype(dy_desc));
}

BnChecker::Gradients BnChecker::gradients(const miopenTensorDescriptor* dy_desc_ptr, const void* dy,
                                          const miopenTensorDescriptor* dx_desc_ptr, void* dx) const {
    const TensorDesc dy_desc = require_descriptor(dy_desc_ptr, "dyDesc");
    const TensorDesc dx_desc = require_descriptor(dx_desc_ptr, "dxDesc");
    require(dy_desc.dtype == dx_desc.dtype, miopenStatusBadParm, "dy (", miopen_dtype_name(dy_desc.dtype),
            ") and dx (", miopen_dtype_name(dx_desc.dtype), ") have different types");
    const DType grad = gradient_dtype(dy_desc);
    Gradients g;
    g.dy = data_tensor(dy_desc, dy, "dy", grad);
    g.dx = data_tensor(dx_desc, dx, "dx", grad);
    require_distinct_elements(g.dx, "dx");
    return g;
}

void BnChecker::set_stats_dtype(const miopenTensorDescriptor* stats_desc) {
    const TensorDesc desc = require_descriptor(stats_desc, "the statistics descriptor");
    require(desc.dtype == miopenFloat || desc.dtype == miopenDouble, miopenStatusNotImplemented,
            "statistics of type ", miopen_dtype_name(desc.dtype), " (they must be miopenFloat or miopenDouble)");
    stats_dtype_ = desc.dtype == miopenFloat ? DType::f32 : DType::f64;
    stats_abi_dtype_ = desc.dtype;
}

TensorArg BnChecker::param_output(const miopenTensorDescriptor* desc_ptr, void* data, const char* what,
                                  bool optional) const {
    TensorArg t = param_tensor(desc_ptr, data, what, optional);
    require_distinct_elements(t, what);
    return t;
}

TensorArg BnChecker::stats_output(const miopenTensorDescriptor* desc_ptr, void* data, const char* what) const {
    TensorArg t = stats_tensor(desc_ptr, data, what);
    require_distinct_elements(t, what);
    return t;
}

TensorArg BnChecker::param_tensor(const miopenTensorDescriptor* desc_ptr, const void* data, const char* what,
                                  bool optional) const {
    if (data == nullptr) {
        require(optional, miopenStatusBadParm, what, " is NULL");
        return TensorArg{};
    }
    const TensorDesc desc = shaped_descriptor(desc_ptr, what);
    const auto param = compute_dtype(desc.dtype);
    require(param.has_value() && (*param == DType::f32 || *param == x_dtype_), miopenStatusNotImplemented,
            "no batch-norm kernel for x of type ", miopen_dtype_name(x_desc_.dtype), " with ", what, " of type ",
            miopen_dtype_name(desc.dtype), " (parameters must be miopenFloat or x's type)");
    return shaped(desc, data, what, *param);
}

TensorArg BnChecker::stats_tensor(const miopenTensorDescriptor* desc_ptr, const void* data, const char* what) const {
    require_pointer(data, what);
    const TensorDesc desc = shaped_descriptor(desc_ptr, what);
    require(desc.dtype == stats_abi_dtype_, miopenStatusNotImplemented, what, " has type ",
            miopen_dtype_name(desc.dtype), " but the statistics descriptor has ", miopen_dtype_name(stats_abi_dtype_),
            " (all statistics must share one type)");
    return shaped(desc, data, what, stats_dtype_);
}

TensorDesc BnChecker::shaped_descriptor(const miopenTensorDescriptor* desc_ptr, const char* what) const {
    const TensorDesc desc = require_descriptor(desc_ptr, what, "the descriptor of ");
    require(desc.rank == x_desc_.rank, miopenStatusBadParm, "the descriptor of ", what, " has rank ", desc.rank,
            " but x has rank ", x_desc_.rank);
    return desc;
}

TensorArg BnChecker::shaped(const TensorDesc& desc, const void* data, const char* what, DType dtype) const {
    TensorArg t = normalize(desc, data, dtype);
    require(t.len == expected_param_lengths(geom_), miopenStatusBadParm, "the descriptor of ", what, " (", desc,
            ") does not fit x (", x_desc_, ") in ", geom_.mode == BnMode::spatial ? "spatial" : "per-activation",
            " mode: expected lengths (1, C, 1, ...) spatially, (1, C, [D,] H, W) per activation");
    backend_.check_accessible(data, what);
    return t;
}

}  // namespace mbn
