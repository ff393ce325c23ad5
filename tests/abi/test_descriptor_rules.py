"""The descriptor rules (docs/conventions.md#tensor-descriptors), through the
raw C calls.

Each failing call must return the status the header gives, leave a
thread-local message that names the problem, and leave the descriptor as it
was before the call."""

from __future__ import annotations

import pytest

BAD_PARM, INVALID_VALUE, NOT_IMPLEMENTED = 3, 2, 6
INT_MAX = 2**31 - 1


def state(lib, ffi, desc):
    dtype, dims, strides = ffi.new("miopenDataType_t*"), ffi.new("int[5]"), ffi.new("int[5]")
    rank = ffi.new("int*")
    assert lib.miopenGetTensorDescriptorSize(desc, rank) == 0
    assert lib.miopenGetTensorDescriptor(desc, dtype, dims, strides) == 0
    return int(dtype[0]), tuple(dims[0 : rank[0]]), tuple(strides[0 : rank[0]])


def expect(lib, ffi, desc, status, expected, *keywords):
    """The call returned `expected`, said why, and did not touch the descriptor."""
    assert status == expected
    message = ffi.string(lib.miopenBNGetLastErrorMessage()).decode()
    assert message, "no thread-local message after a failing call"
    for keyword in keywords:
        assert keyword.lower() in message.lower(), f"{keyword!r} not in {message!r}"
    assert state(lib, ffi, desc) == (lib.miopenFloat, (2, 3, 4, 5), (60, 20, 5, 1))


def ints(ffi, values):
    return ffi.new("int[]", list(values))


# --- lengths and strides must be > 0 -> BadParm -------------------------------


@pytest.mark.parametrize("lens", [(0, 3, 4, 5), (2, -1, 4, 5), (2, 3, 4, 0)])
def test_set4d_nonpositive_length(lib, ffi, desc, lens):
    expect(lib, ffi, desc, lib.miopenSet4dTensorDescriptor(desc, lib.miopenFloat, *lens), BAD_PARM, "length")


@pytest.mark.parametrize(
    "lens, strides, word",
    [
        ((2, 0, 4, 5), (60, 20, 5, 1), "length"),
        ((2, 3, 4, 5), (60, 20, 0, 1), "stride"),
        ((2, 3, 4, 5), (60, -20, 5, 1), "stride"),
    ],
)
def test_set4d_ex_nonpositive(lib, ffi, desc, lens, strides, word):
    status = lib.miopenSet4dTensorDescriptorEx(desc, lib.miopenFloat, *lens, *strides)
    expect(lib, ffi, desc, status, BAD_PARM, word)


@pytest.mark.parametrize(
    "dims, strides, word",
    [
        ((2, 0, 4), None, "length"),
        ((-2, 3), None, "length"),
        ((2, 3, 4), (12, 0, 1), "stride"),
        ((2, 3), (-3, 1), "stride"),
    ],
)
def test_set_tensor_nonpositive(lib, ffi, desc, dims, strides, word):
    c_strides = ffi.NULL if strides is None else ints(ffi, strides)
    status = lib.miopenSetTensorDescriptor(desc, lib.miopenFloat, len(dims), ints(ffi, dims), c_strides)
    expect(lib, ffi, desc, status, BAD_PARM, word)


def test_set_with_layout_nonpositive_length(lib, ffi, desc):
    status = lib.miopenSetNdTensorDescriptorWithLayout(
        desc, lib.miopenFloat, lib.miopenTensorNHWC, ints(ffi, (2, 3, 0, 5)), 4
    )
    expect(lib, ffi, desc, status, BAD_PARM, "length")


# --- NULL lengths or count <= 0 -> InvalidValue --------------------------------


@pytest.mark.parametrize("count", [4, 0, -1])
def test_set_tensor_null_dims(lib, ffi, desc, count):
    status = lib.miopenSetTensorDescriptor(desc, lib.miopenFloat, count, ffi.NULL, ffi.NULL)
    expect(lib, ffi, desc, status, INVALID_VALUE)


@pytest.mark.parametrize("count", [0, -3])
def test_set_tensor_nonpositive_count(lib, ffi, desc, count):
    status = lib.miopenSetTensorDescriptor(desc, lib.miopenFloat, count, ints(ffi, (2, 3)), ffi.NULL)
    expect(lib, ffi, desc, status, INVALID_VALUE, "dimensions")


def test_set_with_layout_null_lens(lib, ffi, desc):
    status = lib.miopenSetNdTensorDescriptorWithLayout(
        desc, lib.miopenFloat, lib.miopenTensorNCHW, ffi.NULL, 4
    )
    expect(lib, ffi, desc, status, INVALID_VALUE, "lens", "NULL")


@pytest.mark.parametrize("count", [0, -1])
def test_set_with_layout_nonpositive_count(lib, ffi, desc, count):
    status = lib.miopenSetNdTensorDescriptorWithLayout(
        desc, lib.miopenFloat, lib.miopenTensorNCHW, ints(ffi, (2, 3, 4, 5)), count
    )
    expect(lib, ffi, desc, status, INVALID_VALUE, "num_lens")


# --- layout / rank mismatch -> BadParm; unsupported layouts -> NotImplemented ---


@pytest.mark.parametrize(
    "layout, lens",
    [
        ("miopenTensorNCHW", (2, 3, 4, 5, 6)),
        ("miopenTensorNHWC", (2, 3, 4)),
        ("miopenTensorNCDHW", (2, 3, 4, 5)),
        ("miopenTensorNDHWC", (2, 3, 4, 5)),
    ],
)
def test_layout_rank_mismatch(lib, ffi, desc, layout, lens):
    status = lib.miopenSetNdTensorDescriptorWithLayout(
        desc, lib.miopenFloat, getattr(lib, layout), ints(ffi, lens), len(lens)
    )
    expect(lib, ffi, desc, status, BAD_PARM, "layout", "lengths")


@pytest.mark.parametrize("layout", ["miopenTensorCHWN", "miopenTensorNCHWc4", "miopenTensorCHWNc8"])
def test_unsupported_layouts(lib, ffi, desc, layout):
    status = lib.miopenSetNdTensorDescriptorWithLayout(
        desc, lib.miopenFloat, getattr(lib, layout), ints(ffi, (2, 3, 4, 5)), 4
    )
    expect(lib, ffi, desc, status, NOT_IMPLEMENTED, "layout")


def test_unknown_layout(lib, ffi, desc):
    status = lib.miopenSetNdTensorDescriptorWithLayout(desc, lib.miopenFloat, 99, ints(ffi, (2, 3, 4, 5)), 4)
    expect(lib, ffi, desc, status, BAD_PARM, "layout")


# --- unknown data type -> BadParm ----------------------------------------------


@pytest.mark.parametrize("dtype", [4, 10, 1000, 2**31 - 1])
def test_unknown_dtype_every_setter(lib, ffi, desc, dtype):
    dims = ints(ffi, (2, 3, 4, 5))
    calls = [
        lambda: lib.miopenSet4dTensorDescriptor(desc, dtype, 2, 3, 4, 5),
        lambda: lib.miopenSet4dTensorDescriptorEx(desc, dtype, 2, 3, 4, 5, 60, 20, 5, 1),
        lambda: lib.miopenSetTensorDescriptor(desc, dtype, 4, dims, ffi.NULL),
        lambda: lib.miopenSetNdTensorDescriptorWithLayout(desc, dtype, lib.miopenTensorNCHW, dims, 4),
    ]
    for call in calls:
        expect(lib, ffi, desc, call(), BAD_PARM, "data type")


def test_rank_above_five(lib, ffi, desc):
    status = lib.miopenSetTensorDescriptor(desc, lib.miopenFloat, 6, ints(ffi, [2] * 6), ffi.NULL)
    expect(lib, ffi, desc, status, BAD_PARM, "rank")


# --- element-space overflow of 64 bits -> BadParm ------------------------------


def test_packed_element_count_overflow(lib, ffi, desc):
    status = lib.miopenSetTensorDescriptor(desc, lib.miopenFloat, 5, ints(ffi, [INT_MAX] * 5), ffi.NULL)
    expect(lib, ffi, desc, status, BAD_PARM, "overflow")


def test_strided_element_space_overflow(lib, ffi, desc):
    status = lib.miopenSetTensorDescriptor(
        desc, lib.miopenDouble, 5, ints(ffi, [INT_MAX] * 5), ints(ffi, [INT_MAX] * 5)
    )
    expect(lib, ffi, desc, status, BAD_PARM, "overflow")


def test_large_but_representable_is_accepted(lib, ffi, desc):
    # Over 2^31 elements is fine: only 64-bit overflow is an error.
    assert lib.miopenSetTensorDescriptor(desc, lib.miopenHalf, 2, ints(ffi, (65536, 65536)), ffi.NULL) == 0
    size = ffi.new("size_t*")
    assert lib.miopenGetTensorNumBytes(desc, size) == 0 and size[0] == 2 * 65536 * 65536


# --- NULL descriptor and NULL outputs of the getters -> BadParm ----------------


def test_null_descriptor_everywhere(lib, ffi):
    dims = ints(ffi, (2, 3, 4, 5))
    statuses = [
        lib.miopenCreateTensorDescriptor(ffi.NULL),
        lib.miopenSet4dTensorDescriptor(ffi.NULL, lib.miopenFloat, 1, 2, 3, 4),
        lib.miopenSet4dTensorDescriptorEx(ffi.NULL, lib.miopenFloat, 1, 2, 3, 4, 24, 12, 4, 1),
        lib.miopenSetTensorDescriptor(ffi.NULL, lib.miopenFloat, 4, dims, ffi.NULL),
        lib.miopenSetNdTensorDescriptorWithLayout(ffi.NULL, lib.miopenFloat, lib.miopenTensorNCHW, dims, 4),
        lib.miopenGetTensorDescriptor(ffi.NULL, ffi.NULL, ffi.NULL, ffi.NULL),
        lib.miopenGetTensorDescriptorSize(ffi.NULL, ffi.new("int*")),
        lib.miopenGetTensorNumBytes(ffi.NULL, ffi.new("size_t*")),
    ]
    assert statuses == [BAD_PARM] * len(statuses)
    assert lib.miopenDestroyTensorDescriptor(ffi.NULL) == 0


def test_getter_null_outputs(lib, ffi, desc):
    outs = [ffi.new("int*") for _ in range(8)]
    status = lib.miopenGet4dTensorDescriptor(desc, ffi.NULL, *outs)
    expect(lib, ffi, desc, status, BAD_PARM, "NULL")
    outs[3] = ffi.NULL
    status = lib.miopenGet4dTensorDescriptor(desc, ffi.new("miopenDataType_t*"), *outs)
    expect(lib, ffi, desc, status, BAD_PARM, "NULL")
    expect(lib, ffi, desc, lib.miopenGetTensorDescriptorSize(desc, ffi.NULL), BAD_PARM, "NULL")
    expect(lib, ffi, desc, lib.miopenGetTensorNumBytes(desc, ffi.NULL), BAD_PARM, "NULL")
    # miopenGetTensorDescriptor skips NULL outputs instead.
    assert lib.miopenGetTensorDescriptor(desc, ffi.NULL, ffi.NULL, ffi.NULL) == 0


def test_get4d_needs_rank_four(lib, ffi, desc):
    assert lib.miopenSetTensorDescriptor(desc, lib.miopenFloat, 3, ints(ffi, (2, 3, 4)), ffi.NULL) == 0
    outs = [ffi.new("int*") for _ in range(8)]
    assert lib.miopenGet4dTensorDescriptor(desc, ffi.new("miopenDataType_t*"), *outs) == BAD_PARM
    assert "rank" in ffi.string(lib.miopenBNGetLastErrorMessage()).decode()


def test_size_is_the_rank(lib, ffi, desc):
    rank = ffi.new("int*")
    assert lib.miopenSetTensorDescriptor(desc, lib.miopenFloat, 5, ints(ffi, (2, 3, 4, 5, 6)), ffi.NULL) == 0
    assert lib.miopenGetTensorDescriptorSize(desc, rank) == 0 and rank[0] == 5


# --- counts are checked before the arrays are read ------------------------------


def test_huge_rank_reads_no_more_than_five_lengths(lib, ffi, desc):
    # The array holds 5 entries; a bogus count must not make the library read on.
    five = ints(ffi, (2, 3, 4, 5, 6))
    status = lib.miopenSetTensorDescriptor(desc, lib.miopenFloat, 2**30, five, five)
    expect(lib, ffi, desc, status, BAD_PARM, "rank")


def test_layout_count_adapted_before_lengths_are_read(lib, ffi, desc):
    status = lib.miopenSetNdTensorDescriptorWithLayout(
        desc, lib.miopenFloat, lib.miopenTensorNHWC, ints(ffi, (2, 3, 4, 5)), 2**30
    )
    expect(lib, ffi, desc, status, BAD_PARM, "layout", "lengths")


def test_element_count_overflow_with_overlapping_strides(lib, ffi, desc):
    # Unit strides keep the element space tiny, but 5 lengths of INT_MAX
    # count 2^155 elements, beyond the kernels' 64-bit arithmetic.
    status = lib.miopenSetTensorDescriptor(desc, lib.miopenFloat, 5, ints(ffi, [INT_MAX] * 5), ints(ffi, [1] * 5))
    expect(lib, ffi, desc, status, BAD_PARM, "element count", "overflow")


def test_getters_refuse_strides_beyond_int(lib, ffi):
    created = ffi.new("miopenTensorDescriptor_t*")
    assert lib.miopenCreateTensorDescriptor(created) == 0
    big = created[0]
    try:
        # Packed (2, 65536, 65536, 1): the N stride is 2^32, beyond int.
        assert lib.miopenSet4dTensorDescriptor(big, lib.miopenHalf, 2, 65536, 65536, 1) == 0
        outs = [ffi.new("int*", -7) for _ in range(8)]
        dtype = ffi.new("miopenDataType_t*", 99)
        assert lib.miopenGet4dTensorDescriptor(big, dtype, *outs) == BAD_PARM
        assert "does not fit in an int" in ffi.string(lib.miopenBNGetLastErrorMessage()).decode()
        assert [out[0] for out in outs] == [-7] * 8 and dtype[0] == 99  # nothing written
        dims, strides = ffi.new("int[4]", [-7] * 4), ffi.new("int[4]", [-7] * 4)
        assert lib.miopenGetTensorDescriptor(big, ffi.NULL, dims, strides) == BAD_PARM
        assert list(dims) == [-7] * 4 and list(strides) == [-7] * 4
        # Without strides the lengths are representable and returned.
        assert lib.miopenGetTensorDescriptor(big, ffi.NULL, dims, ffi.NULL) == 0
        assert list(dims) == [2, 65536, 65536, 1]
    finally:
        assert lib.miopenDestroyTensorDescriptor(big) == 0


@pytest.mark.parametrize("layout, rank", [("miopenTensorNHWC", 4), ("miopenTensorNDHWC", 5)])
def test_channels_last_element_count_overflow(lib, ffi, desc, layout, rank):
    # The channels-last strides themselves overflow 64 bits: refused before
    # they are computed past it (the sanitizer run would report the overflow).
    status = lib.miopenSetNdTensorDescriptorWithLayout(
        desc, lib.miopenFloat, getattr(lib, layout), ints(ffi, [INT_MAX] * rank), rank
    )
    expect(lib, ffi, desc, status, BAD_PARM, "overflow")
