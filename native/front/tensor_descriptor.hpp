// The object behind miopenTensorDescriptor_t: a data type with up to five
// lengths and strides in logical order, validated when set.
#pragma once

#include "common/problem.hpp"

#include <miopen_bn.h>

#include <array>
#include <cstdint>
#include <iosfwd>
#include <optional>
#include <string>

struct miopenTensorDescriptor {
    static constexpr int kMaxRank = 5;

    miopenDataType_t dtype = miopenFloat;
    int rank = 0;  // 0 until a setter succeeds
    std::array<std::int64_t, kMaxRank> lens{};
    std::array<std::int64_t, kMaxRank> strides{};

    bool is_set() const { return rank > 0; }
    std::int64_t length(int i) const { return lens[i]; }
    // Bytes from the first to one past the last element.
    std::uint64_t element_space_bytes() const;
};

// "miopenFloat [2, 3, 4, 5] strides [60, 20, 5, 1]", or "(unset)".  A stream
// operator, not a string: messages pass the descriptor itself, so it is
// formatted only when a check fails, never on a call's success path.
std::ostream& operator<<(std::ostream& out, const miopenTensorDescriptor& desc);

namespace mbn {

// Validates and stores; leaves `desc` untouched on failure.  lens/strides have
// `rank` entries; strides == nullptr means packed row-major.
void set_descriptor(miopenTensorDescriptor& desc, miopenDataType_t dtype, int rank,
                    const std::int64_t* lens, const std::int64_t* strides);

// The descriptor behind an argument, set or not, or BadParm naming
// `prefix what` (e.g. "the descriptor of " "bias") when it is NULL or not a
// live descriptor (destroyed, or never created).
miopenTensorDescriptor& require_live_descriptor(miopenTensorDescriptor* desc, const char* what,
                                                const char* prefix = "");
// The same, and BadParm when it was never set.
const miopenTensorDescriptor& require_descriptor(const miopenTensorDescriptor* desc,
                                                 const char* what, const char* prefix = "");

std::size_t dtype_bytes(miopenDataType_t dtype);
const char* miopen_dtype_name(miopenDataType_t dtype);
// The compute type for an ABI type, or nothing for types batch norm does not
// compute on (int8, fp8, ...).
std::optional<DType> compute_dtype(miopenDataType_t dtype);

// Pads to N, C, D, H, W (see problem.hpp), zeroes strides of length-1
// dimensions and classifies the memory order.
TensorArg normalize(const miopenTensorDescriptor& desc, const void* data, DType dtype);

}  // namespace mbn
