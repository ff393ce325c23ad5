#include "validation.hpp"

#include <array>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <ostream>
#include <string>
#include <utility>

namespace mbn {

void require_pointer(const void* data, const char* what) {
    require(data != nullptr, miopenStatusBadParm, what, " is NULL");
}

bool pair_present(const void* a, const void* b, const char* a_name, const char* b_name) {
    require((a == nullptr) == (b == nullptr), miopenStatusBadParm, "exactly one of ", a_name, " and ",
            b_name, " is NULL (give both or neither)");
    return a != nullptr;
}

void check_epsilon(double epsilon) {
    require(!std::isnan(epsilon) && epsilon >= 0.0, miopenStatusBadParm, "epsilon is ", epsilon,
            " (must be >= 0 and not NaN)");
}

Blend read_blend(const void* alpha, const void* beta, const char* alpha_name, const char* beta_name) {
    require_pointer(alpha, alpha_name);
    require_pointer(beta, beta_name);
    return Blend{*static_cast<const float*>(alpha), *static_cast<const float*>(beta)};
}

DType checked_io_dtype(const TensorDesc& desc, const char* what) {
    const auto dtype = compute_dtype(desc.dtype);
    require(dtype.has_value(), miopenStatusNotImplemented, what, " has type ", miopen_dtype_name(desc.dtype),
            " (miopenFloat, miopenHalf, miopenBFloat16 and miopenDouble are supported)");
    return *dtype;
}

void require_same_lengths(const TensorDesc& a, const TensorDesc& b,
                          const char* a_name, const char* b_name, const char* b_prefix) {
    bool same = a.rank == b.rank;
    for (int i = 0; same && i < a.rank; ++i) same = a.lens[i] == b.lens[i];
    require(same, miopenStatusBadParm, b_prefix, b_name, " (", b, ") and ", a_name, " (", a,
            ") must have the same lengths");
}

void require_distinct_elements(const TensorArg& output, const char* what) {
    if (!output.present()) return;
    std::array<int, kDims> dims{};
    int count = 0;
    for (int d = 0; d < kDims; ++d)
        if (output.len[d] > 1) dims[count++] = d;
    for (int i = 1; i < count; ++i)  // insertion sort by stride: at most 5 dimensions
        for (int j = i; j > 0 && output.stride[dims[j - 1]] > output.stride[dims[j]]; --j)
            std::swap(dims[j - 1], dims[j]);
    std::int64_t extent = 1;  // one past the largest offset of the dimensions seen so far
    for (int i = 0; i < count; ++i) {
        const int d = dims[i];
        require(output.stride[d] >= extent, miopenStatusBadParm, "the strides of ", what,
                " let two of its elements share memory (an output needs each element in its own place)");
        extent += (output.len[d] - 1) * output.stride[d];
    }
}

namespace {

struct ByteRange {
    std::uintptr_t begin, end;
};

ByteRange byte_range(const TensorArg& t) {
    std::uint64_t last = 0;  // fits: the front checked each descriptor's element space
    for (int d = 0; d < kDims; ++d) last += static_cast<std::uint64_t>(t.len[d] - 1) * t.stride[d];
    const auto begin = reinterpret_cast<std::uintptr_t>(t.data);
    return {begin, begin + (last + 1) * dtype_size(t.dtype)};
}

bool allowed_in_place(const char* a, const char* b, std::initializer_list<InPlacePair> in_place) {
    for (const auto& pair : in_place)
        if ((std::strcmp(pair.input, a) == 0 && std::strcmp(pair.output, b) == 0) ||
            (std::strcmp(pair.input, b) == 0 && std::strcmp(pair.output, a) == 0))
            return true;
    return false;
}

std::ostream& operator<<(std::ostream& out, const ByteRange& r) {
    return out << "bytes [0x" << std::hex << r.begin << ", 0x" << r.end << std::dec << ")";
}

}  // namespace

void require_no_aliasing(std::initializer_list<Operand> operands, std::initializer_list<InPlacePair> in_place) {
    // The present operands in their order, each with its byte range computed
    // once (not once per output it is compared with); the entry points pass a
    // dozen operands at most.
    constexpr std::size_t kMostOperands = 16;
    require(operands.size() <= kMostOperands, miopenStatusInternalError, "require_no_aliasing takes at most ",
            kMostOperands, " operands, not ", operands.size());
    std::array<const Operand*, kMostOperands> present{};
    std::array<ByteRange, kMostOperands> ranges{};
    std::size_t count = 0;
    for (const Operand& operand : operands) {
        if (!operand.tensor.present()) continue;
        present[count] = &operand;
        ranges[count++] = byte_range(operand.tensor);
    }
    for (std::size_t i = 0; i < count; ++i) {
        const Operand* out = present[i];
        if (!out->output) continue;
        const ByteRange written = ranges[i];
        for (std::size_t j = 0; j < count; ++j) {
            const Operand* other = present[j];
            if (j == i || (other->output && j < i)) continue;  // a pair of outputs is checked once
            const ByteRange range = ranges[j];
            if (written.end <= range.begin || range.end <= written.begin) continue;
            const TensorArg& a = out->tensor;
            const TensorArg& b = other->tensor;
            if (allowed_in_place(out->name, other->name, in_place) && a.data == b.data) {
                require(a.stride == b.stride, miopenStatusBadParm, out->name, " aliases ", other->name,
                        " with different strides (in-place needs identical layouts)");
                require(a.dtype == b.dtype, miopenStatusBadParm, out->name, " aliases ", other->name,
                        " but has a different type");
                continue;
            }
            fail(miopenStatusBadParm, out->name, " (", written, ") overlaps ", other->name, " (", range,
                 "): an output may share memory with another tensor only in place (",
                 in_place.size() == 0 ? "none allowed here" : "", [&] {
                     std::string pairs;
                     for (const auto& pair : in_place)
                         pairs += concat(pairs.empty() ? "" : ", ", pair.output, " over ", pair.input);
                     return pairs;
                 }(), ", at the same address with the same strides)");
        }
    }
}

TensorArg data_tensor(const Backend& backend, const TensorDesc& like,
                      const TensorDesc& desc, const void* data, const char* what, DType dtype) {
    require_same_lengths(like, desc, "xDesc", what, "the descriptor of ");
    require_pointer(data, what);
    backend.check_accessible(data, what);
    return normalize(desc, data, dtype);
}

}  // namespace mbn
