// Argument checks shared by every op's problem builder (batch norm, group
// norm): each throws mbn::Error with the status miopen_bn.h documents and a message
// naming the argument.
#pragma once

#include "common/backend.hpp"
#include "tensor_descriptor.hpp"

#include <initializer_list>

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

// One tensor of a call, for the aliasing rule; an absent tensor is skipped.
struct Operand {
    const TensorArg& tensor;
    const char* name;
    bool output;
};

// The one way an output may share memory with another operand: in place
// over `input`, at the same address with the same strides and type.
struct InPlacePair {
    const char* input;
    const char* output;
};

// BadParm, naming both, when an output's byte range (its first to one past
// its last byte) overlaps the byte range of any other operand, unless the
// two are one of `in_place`'s pairs exactly.  Partial overlaps (y one
// element past x, two statistics at one address, an output over a
// parameter) would give wrong results, or results that depend on the order
// of the work.
void require_no_aliasing(std::initializer_list<Operand> operands, std::initializer_list<InPlacePair> in_place);

// A data tensor with `like`'s lengths: present, accessible to the backend,
// normalized.
TensorArg data_tensor(const Backend& backend, const TensorDesc& like,
                      const TensorDesc& desc, const void* data, const char* what, DType dtype);

}  // namespace mbn
