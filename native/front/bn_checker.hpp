// The argument checks every batch-norm entry point shares (the one-call ops
// and the split-phase ops of data-parallel batch norm): x fixes the
// geometry, and each other tensor is checked against it as it is added.
#pragma once

#include "common/backend.hpp"
#include "tensor_descriptor.hpp"

namespace mbn {

BnMode checked_mode(miopenBatchNormMode_t mode);

// Lengths of a parameter-shaped tensor: (1,C,1,1,1) spatially, (1,C,D,H,W)
// per activation.
Lengths expected_param_lengths(const BnGeometry& geom);

// One type shared by a set of parameter-shaped tensors (the parameters; the
// statistics of the split-phase ops), fixed by the descriptor that names it.
struct TypeGroup {
    DType dtype = DType::f32;
    miopenDataType_t abi = miopenFloat;
    const char* name = "parameters";
    const char* fixed_by = "the scale";
};

class BnChecker {
public:
    BnChecker(const Backend& backend, miopenBatchNormMode_t mode, const miopenTensorDescriptor* x_desc,
              const void* x);

    const BnGeometry& geometry() const { return geom_; }
    const TensorArg& x() const { return x_; }
    DType x_dtype() const { return x_dtype_; }

    // A tensor with x's lengths (y, dy, dx) whose type is given.
    TensorArg data_tensor(const TensorDesc& desc, const void* data, const char* what, DType dtype) const;

    // y: x's lengths and type (whether it may alias x is the op's
    // require_no_aliasing call's to say).
    TensorArg output_like_x(const miopenTensorDescriptor* y_desc, void* y) const;

    // dy and dx: x's lengths, one type that is x's or float32; dx an output
    // whose elements are distinct (aliasing: the op's require_no_aliasing).
    struct Gradients {
        TensorArg dy, dx;
    };
    Gradients gradients(const miopenTensorDescriptor* dy_desc, const void* dy, const miopenTensorDescriptor* dx_desc,
                        void* dx) const;
    // dy alone, for an op that writes no dx.
    TensorArg gradient_input(const miopenTensorDescriptor* dy_desc, const void* dy) const;

    // The parameter type comes from the scale descriptor: float, or x's type.
    void set_param_dtype(const miopenTensorDescriptor* scale_desc);
    // The split-phase statistics type (counts, means, M2, gradient sums):
    // float or double, whatever x's type.
    void set_stats_dtype(const miopenTensorDescriptor* stats_desc);

    // A parameter-shaped tensor of the parameter type; NULL data gives an
    // absent TensorArg when `optional`, BadParm otherwise.
    TensorArg param_tensor(const miopenTensorDescriptor* desc_ptr, const void* data, const char* what,
                           bool optional = false) const {
        return shaped(params_, desc_ptr, data, what, optional);
    }
    // A parameter-shaped output (saved and running statistics, gradients).
    TensorArg param_output(const miopenTensorDescriptor* desc_ptr, void* data, const char* what,
                           bool optional = false) const;
    // Parameter-shaped tensors of the statistics type.
    TensorArg stats_tensor(const miopenTensorDescriptor* desc_ptr, const void* data, const char* what) const {
        return shaped(stats_, desc_ptr, data, what, false);
    }
    TensorArg stats_output(const miopenTensorDescriptor* desc_ptr, void* data, const char* what) const;

private:
    DType gradient_dtype(const TensorDesc& dy_desc) const;
    TensorArg shaped(const TypeGroup& group, const miopenTensorDescriptor* desc_ptr, const void* data,
                     const char* what, bool optional) const;

    const Backend& backend_;
    const TensorDesc x_desc_;  // a snapshot: see tensor_descriptor.hpp
    BnGeometry geom_;
    DType x_dtype_;
    TypeGroup params_;
    TypeGroup stats_{DType::f32, miopenFloat, "statistics", "the statistics descriptor"};
    TensorArg x_;
};

}  // namespace mbn
