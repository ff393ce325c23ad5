// Argument checks shared by every op's problem builder (batch norm, group
// norm): each throws mbn::Error with the status SPEC.md assigns and a message
// naming the argument.
#pragma once

#include "common/backend.hpp"
#include "tensor_descriptor.hpp"

namespace mbn {

void require_pointer(const void* data, const char* what);

// Both or neither: exactly one NULL is BadParm.  Returns whether both are set.
bool pair_present(const void* a, const void* b, const char* a_name, const char* b_name);

// epsilon >= 0 and not NaN.
void check_epsilon(double epsilon);

// alpha/beta are read as float for every data type, as MIOpen does.
Blend read_blend(const void* alpha, const void* beta, const char* alpha_name, const char* beta_name);

// The compute type of a data tensor (f16, bf16, f32, f64), else NotImplemented.
DType checked_io_dtype(const TensorDesc& desc, const char* what);

// BadParm unless a and b have the same lengths; b is named `b_prefix b_name`.
void require_same_lengths(const TensorDesc& a, const TensorDesc& b,
                          const char* a_name, const char* b_name, const char* b_prefix = "");

// An output whose strides let two of its elements share memory would get
// one of two results there (a race on the GPU): BadParm.  Checked
// conservatively: ordered by stride, each dimension must step past the whole
// extent of the ones inside it, which every packed, padded or permuted
// layout does.  An absent tensor passes.
void require_distinct_elements(const TensorArg& output, const char* what);

// In place is supported only with identical addressing.
void check_in_place(const TensorArg& in, const TensorArg& out, const char* in_name, const char* out_name);

// A data tensor with `like`'s lengths: present, accessible to the backend,
// normalized.
TensorArg data_tensor(const Backend& backend, const TensorDesc& like,
                      const TensorDesc& desc, const void* data, const char* what, DType dtype);

}  // namespace mbn
