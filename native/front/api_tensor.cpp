// Tensor descriptor entry points.
#include "api_guard.hpp"
#include "live_objects.hpp"
#include "logging.hpp"
#include "tensor_descriptor.hpp"

#include <limits>
#include <memory>
#include <vector>

namespace {

using mbn::require;

// The descriptor a setter changes: checked for liveness before its
// arguments are (set_descriptor checks again as it stores).
miopenTensorDescriptor* settable(miopenTensorDescriptor_t desc) {
    mbn::require_live_descriptor(desc, "tensorDesc");
    return desc;
}

// The first `count` values, at most kMaxRank of them: a count beyond the
// maximum rank is refused without reading past the entries a descriptor can
// use (the caller's array may be shorter than a bogus count).
std::vector<std::int64_t> widen(const int* values, int count) {
    if (values == nullptr || count <= 0) return {};
    const int used = count < mbn::TensorDesc::kMaxRank ? count : mbn::TensorDesc::kMaxRank;
    return std::vector<std::int64_t>(values, values + used);
}

// The same for size_t values (miopenSetTensorDescriptorV2): one beyond
// INT64_MAX is BadParm rather than a negative length.
std::vector<std::int64_t> widen(const std::size_t* values, int count, const char* what) {
    if (values == nullptr || count <= 0) return {};
    const int used = count < mbn::TensorDesc::kMaxRank ? count : mbn::TensorDesc::kMaxRank;
    std::vector<std::int64_t> out(used);
    for (int i = 0; i < used; ++i) {
        require(values[i] <= static_cast<std::size_t>(std::numeric_limits<std::int64_t>::max()),
                miopenStatusBadParm, what, "[", i, "] = ", values[i], " exceeds INT64_MAX");
        out[i] = static_cast<std::int64_t>(values[i]);
    }
    return out;
}

// Packed strides for lengths given in logical N, C, (D), H, W order, laid out
// channels-last (NHWC / NDHWC).  The products are checked: with lengths near
// INT_MAX they overflow 64 bits before set_descriptor could say so.
std::vector<std::int64_t> channels_last_strides(const std::vector<std::int64_t>& lens) {
    const int rank = static_cast<int>(lens.size());
    std::vector<std::int64_t> strides(rank);
    std::int64_t step = 1;
    const auto next = [&step](std::int64_t length) {
        require(!__builtin_mul_overflow(step, length, &step), miopenStatusBadParm,
                "the element count overflows 64 bits");
    };
    strides[1] = step;
    next(lens[1]);
    for (int i = rank - 1; i >= 2; --i) {
        strides[i] = step;
        next(lens[i]);
    }
    strides[0] = step;
    return strides;
}

// The getters return int strides: a packed stride beyond INT_MAX (a tensor
// of more than 2^31 elements) is refused rather than truncated.
void require_int_strides(const mbn::TensorDesc& desc) {
    for (int i = 0; i < desc.rank; ++i)
        require(desc.strides[i] <= std::numeric_limits<int>::max(), miopenStatusBadParm, "stride ", i, " of ",
                desc, " does not fit in an int");
}

// Likewise for lengths, which miopenSetTensorDescriptorV2 can set beyond INT_MAX.
void require_int_lengths(const mbn::TensorDesc& desc) {
    for (int i = 0; i < desc.rank; ++i)
        require(desc.lens[i] <= std::numeric_limits<int>::max(), miopenStatusBadParm, "length ", i, " of ",
                desc, " does not fit in an int");
}

}  // namespace

extern "C" {

miopenStatus_t miopenCreateTensorDescriptor(miopenTensorDescriptor_t* tensorDesc) {
    return mbn::api_call(__func__, [&](const char* fn) {
        MBN_LOG_CALL(fn, tensorDesc);
        require(tensorDesc != nullptr, miopenStatusBadParm, "tensorDesc is NULL");
        auto created = std::make_unique<miopenTensorDescriptor>();
        mbn::add_live(mbn::ObjectKind::descriptor, created.get());
        *tensorDesc = created.release();
    });
}

miopenStatus_t miopenDestroyTensorDescriptor(miopenTensorDescriptor_t tensorDesc) {
    return mbn::api_call(__func__, [&](const char* fn) {
        MBN_LOG_CALL(fn, tensorDesc);
        if (tensorDesc == nullptr) return;
        require(mbn::remove_live(mbn::ObjectKind::descriptor, tensorDesc), miopenStatusBadParm, "tensorDesc (",
                static_cast<const void*>(tensorDesc), ") is not a live tensor descriptor (destroyed already?)");
        delete tensorDesc;
    });
}

miopenStatus_t miopenSet4dTensorDescriptor(miopenTensorDescriptor_t tensorDesc,
                                           miopenDataType_t dataType, int n, int c, int h, int w) {
    return mbn::api_call(__func__, [&](const char* fn) {
        MBN_LOG_CALL(fn, tensorDesc, dataType, n, c, h, w);
        const std::int64_t lens[] = {n, c, h, w};
        mbn::set_descriptor(settable(tensorDesc), "tensorDesc", dataType, 4, lens, nullptr);
    });
}

miopenStatus_t miopenSet4dTensorDescriptorEx(miopenTensorDescriptor_t tensorDesc,
                                             miopenDataType_t dataType, int n, int c, int h, int w,
                                             int nStride, int cStride, int hStride, int wStride) {
    return mbn::api_call(__func__, [&](const char* fn) {
        MBN_LOG_CALL(fn, tensorDesc, dataType, n, c, h, w, nStride, cStride, hStride, wStride);
        const std::int64_t lens[] = {n, c, h, w};
        const std::int64_t strides[] = {nStride, cStride, hStride, wStride};
        mbn::set_descriptor(settable(tensorDesc), "tensorDesc", dataType, 4, lens, strides);
    });
}

miopenStatus_t miopenSetTensorDescriptor(miopenTensorDescriptor_t tensorDesc,
                                         miopenDataType_t dataType, int nbDims, const int* dimsA,
                                         const int* stridesA) {
    return mbn::api_call(__func__, [&](const char* fn) {
        MBN_LOG_CALL(fn, tensorDesc, dataType, nbDims, dimsA, stridesA);
        const auto desc = settable(tensorDesc);
        const auto lens = widen(dimsA, nbDims);
        const auto strides = widen(stridesA, nbDims);
        mbn::set_descriptor(desc, "tensorDesc", dataType, nbDims, dimsA ? lens.data() : nullptr,
                            stridesA ? strides.data() : nullptr);
    });
}

miopenStatus_t miopenSetTensorDescriptorV2(miopenTensorDescriptor_t tensorDesc, miopenDataType_t dataType,
                                           int nbDims, const size_t* dimsA, const size_t* stridesA) {
    return mbn::api_call(__func__, [&](const char* fn) {
        MBN_LOG_CALL(fn, tensorDesc, dataType, nbDims, dimsA, stridesA);
        const auto desc = settable(tensorDesc);
        const auto lens = widen(dimsA, nbDims, "dimsA");
        const auto strides = widen(stridesA, nbDims, "stridesA");
        mbn::set_descriptor(desc, "tensorDesc", dataType, nbDims, dimsA ? lens.data() : nullptr,
                            stridesA ? strides.data() : nullptr);
    });
}

miopenStatus_t miopenSetNdTensorDescriptorWithLayout(miopenTensorDescriptor_t tensorDesc,
                                                     miopenDataType_t dataType,
                                                     miopenTensorLayout_t tensorLayout,
                                                     const int* lens, int num_lens) {
    return mbn::api_call(__func__, [&](const char* fn) {
        MBN_LOG_CALL(fn, tensorDesc, dataType, tensorLayout, lens, num_lens);
        const auto desc = settable(tensorDesc);
        require(lens != nullptr, miopenStatusInvalidValue, "lens is NULL");
        require(num_lens > 0, miopenStatusInvalidValue, "num_lens is ", num_lens);
        // The layout fixes the rank; lens is read only once num_lens matches it.
        const auto checked_lengths = [&](int rank, const char* name) {
            require(num_lens == rank, miopenStatusBadParm, "layout ", name, " needs ", rank, " lengths, got ",
                    num_lens);
            const auto wide = widen(lens, num_lens);
            for (int i = 0; i < num_lens; ++i)
                require(wide[i] > 0, miopenStatusBadParm, "length ", i, " is ", wide[i], " (must be > 0)");
            return wide;
        };
        switch (tensorLayout) {
            case miopenTensorNCHW:
            case miopenTensorNCDHW: {
                const bool four = tensorLayout == miopenTensorNCHW;
                const auto wide = checked_lengths(four ? 4 : 5, four ? "NCHW" : "NCDHW");
                mbn::set_descriptor(desc, "tensorDesc", dataType, num_lens, wide.data(), nullptr);
                break;
            }
            case miopenTensorNHWC:
            case miopenTensorNDHWC: {
                const bool four = tensorLayout == miopenTensorNHWC;
                const auto wide = checked_lengths(four ? 4 : 5, four ? "NHWC" : "NDHWC");
                const auto strides = channels_last_strides(wide);
                mbn::set_descriptor(desc, "tensorDesc", dataType, num_lens, wide.data(), strides.data());
                break;
            }
            case miopenTensorCHWN: case miopenTensorNCHWc4: case miopenTensorNCHWc8:
            case miopenTensorCHWNc4: case miopenTensorCHWNc8:
                mbn::fail(miopenStatusNotImplemented, "layout ", static_cast<int>(tensorLayout),
                          " is not supported (NCHW, NHWC, NCDHW and NDHWC are)");
            default:
                mbn::fail(miopenStatusBadParm, "unknown layout ", static_cast<int>(tensorLayout));
        }
    });
}

miopenStatus_t miopenGet4dTensorDescriptor(miopenTensorDescriptor_t tensorDesc,
                                           miopenDataType_t* dataType, int* n, int* c, int* h,
                                           int* w, int* nStride, int* cStride, int* hStride,
                                           int* wStride) {
    return mbn::api_call(__func__, [&](const char* fn) {
        MBN_LOG_CALL(fn, tensorDesc);
        const auto desc = mbn::require_descriptor(tensorDesc, "tensorDesc");
        require(desc.rank == 4, miopenStatusBadParm, "tensorDesc has rank ", desc.rank, ", not 4");
        int* outputs[] = {n, c, h, w, nStride, cStride, hStride, wStride};
        require(dataType != nullptr, miopenStatusBadParm, "dataType is NULL");
        for (int* out : outputs) require(out != nullptr, miopenStatusBadParm, "an output pointer is NULL");
        require_int_strides(desc);
        require_int_lengths(desc);
        *dataType = desc.dtype;
        for (int i = 0; i < 4; ++i) {
            *outputs[i] = static_cast<int>(desc.lens[i]);
            *outputs[4 + i] = static_cast<int>(desc.strides[i]);
        }
    });
}

miopenStatus_t miopenGetTensorDescriptor(miopenTensorDescriptor_t tensorDesc,
                                         miopenDataType_t* dataType, int* dimsA, int* stridesA) {
    return mbn::api_call(__func__, [&](const char* fn) {
        MBN_LOG_CALL(fn, tensorDesc, dataType, dimsA, stridesA);
        const auto desc = mbn::require_descriptor(tensorDesc, "tensorDesc");
        if (stridesA) require_int_strides(desc);
        if (dimsA) require_int_lengths(desc);
        if (dataType) *dataType = desc.dtype;
        for (int i = 0; i < desc.rank; ++i) {
            if (dimsA) dimsA[i] = static_cast<int>(desc.lens[i]);
            if (stridesA) stridesA[i] = static_cast<int>(desc.strides[i]);
        }
    });
}

miopenStatus_t miopenGetTensorDescriptorSize(miopenTensorDescriptor_t tensorDesc, int* size) {
    return mbn::api_call(__func__, [&](const char* fn) {
        MBN_LOG_CALL(fn, tensorDesc, size);
        const auto desc = mbn::snapshot_descriptor(tensorDesc, "tensorDesc");
        require(size != nullptr, miopenStatusBadParm, "size is NULL");
        *size = desc.rank;
    });
}

miopenStatus_t miopenGetTensorNumBytes(miopenTensorDescriptor_t tensorDesc, size_t* numBytes) {
    return mbn::api_call(__func__, [&](const char* fn) {
        MBN_LOG_CALL(fn, tensorDesc, numBytes);
        const auto desc = mbn::require_descriptor(tensorDesc, "tensorDesc");
        require(numBytes != nullptr, miopenStatusBadParm, "numBytes is NULL");
        *numBytes = static_cast<size_t>(desc.element_space_bytes());
    });
}

}  // extern "C"
