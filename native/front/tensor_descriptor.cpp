#include "tensor_descriptor.hpp"

#include <utility>
#include <vector>

#include "common/error.hpp"
#include "live_objects.hpp"

#include <sstream>

namespace mbn {
namespace {

bool known_dtype(miopenDataType_t dtype) {
    const int v = static_cast<int>(dtype);
    return v >= 0 && v <= 9 && v != 4;
}

// Positions of logical dims N, C, D, H, W inside a descriptor of `rank`
// (-1: absent).  Ranks 2 and 3 are our extension: (N,C) and (N,C,W).
std::array<int, kDims> logical_positions(int rank) {
    switch (rank) {
        case 1: return {-1, 0, -1, -1, -1};
        case 2: return {0, 1, -1, -1, -1};
        case 3: return {0, 1, -1, -1, 2};
        case 4: return {0, 1, -1, 2, 3};
        default: return {0, 1, 2, 3, 4};
    }
}

// True when `stride` is the packed stride sequence for visiting dims in
// `inner_to_outer` order, ignoring length-1 dims.
bool packed_in_order(const Lengths& len, const Strides& stride, std::array<int, kDims> inner_to_outer) {
    std::int64_t expected = 1;
    for (int dim : inner_to_outer) {
        if (len[dim] == 1) continue;
        if (stride[dim] != expected) return false;
        expected *= len[dim];
    }
    return true;
}

}  // namespace

std::size_t dtype_bytes(miopenDataType_t dtype) {
    switch (dtype) {
        case miopenHalf: case miopenBFloat16: return 2;
        case miopenFloat: case miopenInt32: return 4;
        case miopenInt8: case miopenFloat8: case miopenBFloat8: return 1;
        case miopenDouble: case miopenInt64: return 8;
    }
    return 0;
}

const char* miopen_dtype_name(miopenDataType_t dtype) {
    switch (dtype) {
        case miopenHalf: return "miopenHalf";
        case miopenFloat: return "miopenFloat";
        case miopenInt32: return "miopenInt32";
        case miopenInt8: return "miopenInt8";
        case miopenBFloat16: return "miopenBFloat16";
        case miopenDouble: return "miopenDouble";
        case miopenFloat8: return "miopenFloat8";
        case miopenBFloat8: return "miopenBFloat8";
        case miopenInt64: return "miopenInt64";
    }
    return "unknown data type";
}

std::optional<DType> compute_dtype(miopenDataType_t dtype) {
    switch (dtype) {
        case miopenHalf: return DType::f16;
        case miopenBFloat16: return DType::bf16;
        case miopenFloat: return DType::f32;
        case miopenDouble: return DType::f64;
        default: return std::nullopt;
    }
}

namespace {

// The snapshots the current call of this thread has taken (see
// begin_call_snapshots); a call reads a handful of descriptors.
thread_local std::vector<std::pair<const miopenTensorDescriptor*, TensorDesc>> t_call_snapshots;
thread_local int t_call_depth = 0;

}  // namespace

void begin_call_snapshots() { ++t_call_depth; }

void end_call_snapshots() {
    if (--t_call_depth == 0) t_call_snapshots.clear();
}

void set_descriptor(miopenTensorDescriptor* desc, const char* what, miopenDataType_t dtype, int rank,
                    const std::int64_t* lens, const std::int64_t* strides) {
    require(known_dtype(dtype), miopenStatusBadParm, "unknown data type ", static_cast<int>(dtype));
    // The count first: with none, an empty lengths array is no separate fault.
    require(rank > 0, miopenStatusInvalidValue, "the number of dimensions is ", rank,
            " (must be 1 to ", mbn::TensorDesc::kMaxRank, ")");
    require(lens != nullptr, miopenStatusInvalidValue, "the lengths array is NULL");
    require(rank <= mbn::TensorDesc::kMaxRank, miopenStatusBadParm, "rank ", rank,
            " is above the supported maximum of ", mbn::TensorDesc::kMaxRank);

    TensorDesc next;
    next.dtype = dtype;
    next.rank = rank;
    for (int i = 0; i < rank; ++i)
        require(lens[i] > 0, miopenStatusBadParm, "length ", i, " is ", lens[i], " (must be > 0)");
    // The element count must fit in 64 bits whatever the strides: with
    // overlapping strides a small element space can hold a count that the
    // kernels' int64 arithmetic could not.
    std::int64_t packed = 1;
    for (int i = rank - 1; i >= 0; --i) {
        next.lens[i] = lens[i];
        next.strides[i] = strides ? strides[i] : packed;
        require(next.strides[i] > 0, miopenStatusBadParm, "stride ", i, " is ", next.strides[i],
                " (must be > 0)");
        require(!__builtin_mul_overflow(packed, lens[i], &packed), miopenStatusBadParm,
                "the element count overflows 64 bits");
    }
    // The largest byte offset, and the byte span, must fit in 64 bits.
    std::int64_t last = 0;
    for (int i = 0; i < rank; ++i) {
        std::int64_t step = 0;
        require(!__builtin_mul_overflow(next.lens[i] - 1, next.strides[i], &step) &&
                    !__builtin_add_overflow(last, step, &last),
                miopenStatusBadParm, "the element space overflows 64 bits");
    }
    std::int64_t bytes = 0;
    require(!__builtin_mul_overflow(last + 1, static_cast<std::int64_t>(dtype_bytes(dtype)), &bytes),
            miopenStatusBadParm, "the element space in bytes overflows 64 bits");
    const auto live = lock_if_live(ObjectKind::descriptor, desc);
    require(live.owns_lock(), miopenStatusBadParm, what, " (", static_cast<const void*>(desc),
            ") is not a live tensor descriptor (destroyed, or not made by miopenCreateTensorDescriptor)");
    std::lock_guard<std::mutex> lock(desc->mutex);
    desc->value = next;
    // A descriptor this call sets is read afresh afterwards.
    for (auto& taken : t_call_snapshots)
        if (taken.first == desc) taken.first = nullptr;
}

void require_live_descriptor(const miopenTensorDescriptor* desc, const char* what, const char* prefix) {
    snapshot_descriptor(desc, what, prefix);
}

TensorDesc snapshot_descriptor(const miopenTensorDescriptor* desc, const char* what, const char* prefix) {
    require(desc != nullptr, miopenStatusBadParm, prefix, what, " is NULL");
    auto copy = try_snapshot_descriptor(desc);
    require(copy.has_value(), miopenStatusBadParm, prefix, what, " (", static_cast<const void*>(desc),
            ") is not a live tensor descriptor (destroyed, or not made by miopenCreateTensorDescriptor)");
    return *copy;
}

TensorDesc require_descriptor(const miopenTensorDescriptor* desc, const char* what, const char* prefix) {
    TensorDesc copy = snapshot_descriptor(desc, what, prefix);
    require(copy.is_set(), miopenStatusBadParm, prefix, what, " has no lengths set");
    return copy;
}

std::optional<TensorDesc> try_snapshot_descriptor(const miopenTensorDescriptor* desc) {
    for (const auto& taken : t_call_snapshots)
        if (taken.first == desc) return taken.second;
    const auto live = lock_if_live(ObjectKind::descriptor, desc);
    if (!live.owns_lock()) return std::nullopt;
    TensorDesc copy;
    {
        std::lock_guard<std::mutex> lock(desc->mutex);
        copy = desc->value;
    }
    if (t_call_depth > 0) t_call_snapshots.emplace_back(desc, copy);
    return copy;
}

TensorArg normalize(const TensorDesc& desc, const void* data, DType dtype) {
    TensorArg t;
    t.data = const_cast<void*>(data);
    t.dtype = dtype;
    const auto where = logical_positions(desc.rank);
    for (int dim = 0; dim < kDims; ++dim) {
        const int i = where[dim];
        t.len[dim] = i < 0 ? 1 : desc.lens[i];
        t.stride[dim] = (i < 0 || t.len[dim] == 1) ? 0 : desc.strides[i];
    }
    if (packed_in_order(t.len, t.stride, {kW, kH, kD, kC, kN}))
        t.order = MemoryOrder::packed_nchw;
    else if (packed_in_order(t.len, t.stride, {kC, kW, kH, kD, kN}))
        t.order = MemoryOrder::packed_nhwc;
    else
        t.order = MemoryOrder::strided;
    return t;
}

std::uint64_t TensorDesc::element_space_bytes() const {
    std::uint64_t last = 0;
    for (int i = 0; i < rank; ++i) last += static_cast<std::uint64_t>(lens[i] - 1) * strides[i];
    return (last + 1) * dtype_bytes(dtype);
}

std::ostream& operator<<(std::ostream& out, const TensorDesc& desc) {
    if (!desc.is_set()) return out << "(unset)";
    out << miopen_dtype_name(desc.dtype) << " [";
    for (int i = 0; i < desc.rank; ++i) out << (i ? ", " : "") << desc.lens[i];
    out << "] strides [";
    for (int i = 0; i < desc.rank; ++i) out << (i ? ", " : "") << desc.strides[i];
    return out << "]";
}

}  // namespace mbn
