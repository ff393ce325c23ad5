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

    // The split-phase statistics type (counts, means, M2, gradient sums):
    // float or double, whatever x's type.
    void set_stats_dtype(const miopenTensorDescriptor* stats_desc);

    // A parameter-shaped tensor of its own type, float or x's (parameters of
    // one call may differ); NULL data gives an absent TensorArg when
    // `optional`, BadParm otherwise.
    TensorArg param_tensor(const miopenTensorDescriptor* desc_ptr, const void* data, const char* what,
                           bool optional = false) const;
    // A parameter-shaped output (saved and running statistics, gradients).
    TensorArg param_output(const miopenTensorDescriptor* desc_ptr, void* data, const char* what,
                           bool optional = false) const;
    // Parameter-shaped tensors of the statistics type, which they share.
    TensorArg stats_tensor(const miopenTensorDescriptor* desc_ptr, const void* data, const char* what) const;
    TensorArg stats_output(const miopenTensorDescriptor* desc_ptr, void* data, const char* what) const;

private:
    DType gradient_dtype(const TensorDesc& dy_desc) const;
    // The descriptor of a parameter-shaped tensor, at x's rank.
    TensorDesc shaped_descriptor(const miopenTensorDescriptor* desc_ptr, const char* what) const;
    // The tensor, its lengths checked against x's.
    TensorArg shaped(const TensorDesc& desc, const void* data, const char* what, DType dtype) const;

    const Backend& backend_;
    const TensorDesc x_desc_;  // a snapshot: see tensor_descriptor.hpp
    BnGeometry geom_;
    DType x_dtype_;
    DType stats_dtype_ = DType::f32;
    miopenDataType_t stats_abi_dtype_ = miopenFloat;
    TensorArg x_;
};

}  // namespace mbn
