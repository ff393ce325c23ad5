// The object behind miopenTensorDescriptor_t: a data type with up to five
// lengths and strides in logical order, validated when set.
#pragma once

#include "common/problem.hpp"

#include <miopen_bn.h>

#include <array>
#include <cstdint>
#include <iosfwd>
#include <mutex>
#include <optional>
#include <string>

namespace mbn {

// A descriptor's contents: a data type with up to five lengths and strides in
// logical order.  Calls work on a copy taken once at their start
// (snapshot_descriptor), so a concurrent re-set cannot change what they
// validated.
struct TensorDesc {
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
std::ostream& operator<<(std::ostream& out, const TensorDesc& desc);

}  // namespace mbn

struct miopenTensorDescriptor {
    // Read and written only under `mutex` (and while the descriptor is
    // live: see live_objects.hpp).
    mutable std::mutex mutex;
    mbn::TensorDesc value;
};

namespace mbn {

// Validates and stores; leaves `desc` untouched on failure (BadParm naming
// `what` when it is not live).  lens/strides have `rank` entries; strides ==
// nullptr means packed row-major.
void set_descriptor(miopenTensorDescriptor* desc, const char* what, miopenDataType_t dtype, int rank,
                    const std::int64_t* lens, const std::int64_t* strides);

// BadParm naming `prefix what` (e.g. "the descriptor of " "bias") unless
// `desc` is a live descriptor (not NULL, destroyed, or never created).
void require_live_descriptor(const miopenTensorDescriptor* desc, const char* what, const char* prefix = "");
// A copy of the descriptor's contents, set or not, taken under its lock; the
// same BadParm as require_live_descriptor.
TensorDesc snapshot_descriptor(const miopenTensorDescriptor* desc, const char* what, const char* prefix = "");
// The same, and BadParm when it was never set.
TensorDesc require_descriptor(const miopenTensorDescriptor* desc, const char* what, const char* prefix = "");
// A copy for the log: nothing when `desc` is not live.
std::optional<TensorDesc> try_snapshot_descriptor(const miopenTensorDescriptor* desc);

std::size_t dtype_bytes(miopenDataType_t dtype);
const char* miopen_dtype_name(miopenDataType_t dtype);
// The compute type for an ABI type, or nothing for types batch norm does not
// compute on (int8, fp8, ...).
std::optional<DType> compute_dtype(miopenDataType_t dtype);

// Pads to N, C, D, H, W (see problem.hpp), zeroes strides of length-1
// dimensions and classifies the memory order.
TensorArg normalize(const TensorDesc& desc, const void* data, DType dtype);

}  // namespace mbn
