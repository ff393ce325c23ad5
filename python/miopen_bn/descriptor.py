"""``TensorDescriptor``: data type, lengths and strides of one tensor."""

from __future__ import annotations

from typing import Optional, Sequence

from . import dtypes
from .cdef import enum_value
from .library import load
from .native_object import NativeObject

LAYOUT_CODES = {name: enum_value(f"miopenTensor{name}") for name in ("NCHW", "NHWC", "NCDHW", "NDHWC")}
MODE_CODES = {"per_activation": enum_value("miopenBNPerActivation"), "spatial": enum_value("miopenBNSpatial")}


def mode_code(mode: str) -> int:
    if mode not in MODE_CODES:
        raise ValueError(f"mode must be 'spatial' or 'per_activation', got {mode!r}")
    return MODE_CODES[mode]


def _c_ints(ffi, values: Sequence[int], what: str):
    try:
        return ffi.new("int[]", [int(v) for v in values])
    except OverflowError:
        raise ValueError(f"{what} {tuple(values)} do not fit in C int") from None


class TensorDescriptor(NativeObject):
    """A ``miopenTensorDescriptor_t``.

    ``TensorDescriptor(dtype, shape, strides=None)`` sets it at once (strides
    in elements, None for packed row-major); ``layout="NHWC"`` etc. instead
    derives packed strides for that layout from lengths given as N, C, (D,) H, W.
    Context manager with an idempotent ``close()``; a finalizer is the backstop.
    """

    _what = "tensor descriptor"

    def __init__(
        self,
        dtype=None,
        shape: Optional[Sequence[int]] = None,
        strides: Optional[Sequence[int]] = None,
        *,
        layout: Optional[str] = None,
    ):
        library = load()
        created = library.ffi.new("miopenTensorDescriptor_t*")
        library.check(library.lib.miopenCreateTensorDescriptor(created))
        self._library = library
        self._own(created[0], library.lib.miopenDestroyTensorDescriptor)
        if shape is not None or dtype is not None:
            if shape is None or dtype is None:
                self.close()
                raise TypeError("TensorDescriptor needs both dtype and shape, or neither")
            try:
                if layout is None:
                    self.set(dtype, shape, strides)
                else:
                    if strides is not None:
                        raise TypeError("give strides or a layout, not both")
                    self.set_layout(dtype, layout, shape)
            except BaseException:
                self.close()
                raise

    def set(self, dtype, shape: Sequence[int], strides: Optional[Sequence[int]] = None) -> None:
        """miopenSetTensorDescriptor: lengths in logical order, element strides."""
        self._set_code(dtypes.MIOPEN_CODE[dtypes.name_of(dtype)], shape, strides)

    def _set_code(self, code: int, shape: Sequence[int], strides: Optional[Sequence[int]]) -> None:
        """set() with the miopenDataType_t code, whatever it is: the library judges it."""
        ffi = self._library.ffi
        dims = _c_ints(ffi, shape, "lengths")
        if strides is not None and len(strides) != len(shape):
            raise ValueError(f"{len(shape)} lengths but {len(strides)} strides")
        c_strides = ffi.NULL if strides is None else _c_ints(ffi, strides, "strides")
        self._library.check(
            self._library.lib.miopenSetTensorDescriptor(self.ptr, code, len(shape), dims, c_strides)
        )

    def set_layout(self, dtype, layout: str, lengths: Sequence[int]) -> None:
        """miopenSetNdTensorDescriptorWithLayout: NCHW, NHWC, NCDHW or NDHWC."""
        if layout not in LAYOUT_CODES:
            raise ValueError(f"layout must be one of {', '.join(LAYOUT_CODES)}, got {layout!r}")
        code = dtypes.MIOPEN_CODE[dtypes.name_of(dtype)]
        lens = _c_ints(self._library.ffi, lengths, "lengths")
        self._library.check(
            self._library.lib.miopenSetNdTensorDescriptorWithLayout(
                self.ptr, code, LAYOUT_CODES[layout], lens, len(lengths)
            )
        )

    @classmethod
    def derive_bn(cls, x_desc: "TensorDescriptor", mode: str = "spatial") -> "TensorDescriptor":
        """miopenDeriveBNTensorDescriptor: the parameter descriptor for x."""
        derived = cls()
        try:
            derived._library.check(
                derived._library.lib.miopenDeriveBNTensorDescriptor(derived.ptr, x_desc.ptr, mode_code(mode))
            )
        except BaseException:
            derived.close()
            raise
        return derived

    @property
    def rank(self) -> int:
        size = self._library.ffi.new("int*")
        self._library.check(self._library.lib.miopenGetTensorDescriptorSize(self.ptr, size))
        return int(size[0])

    def _read(self):
        ffi = self._library.ffi
        rank = self.rank
        dtype = ffi.new("miopenDataType_t*")
        dims, strides = ffi.new("int[]", max(rank, 1)), ffi.new("int[]", max(rank, 1))
        self._library.check(self._library.lib.miopenGetTensorDescriptor(self.ptr, dtype, dims, strides))
        return int(dtype[0]), tuple(dims[0:rank]), tuple(strides[0:rank])

    @property
    def dtype(self) -> str:
        return dtypes.name_of(self._read()[0])

    @property
    def shape(self) -> tuple:
        return self._read()[1]

    @property
    def strides(self) -> tuple:
        return self._read()[2]

    @property
    def num_bytes(self) -> int:
        value = self._library.ffi.new("size_t*")
        self._library.check(self._library.lib.miopenGetTensorNumBytes(self.ptr, value))
        return int(value[0])

    def __repr__(self) -> str:
        if self.closed:
            return "<miopen_bn.TensorDescriptor closed>"
        code, shape, strides = self._read()
        name = dtypes.NAME_FOR_MIOPEN_CODE.get(code, f"miopenDataType_t {code}")
        return f"<miopen_bn.TensorDescriptor {name} shape={shape} strides={strides}>"


# Descriptors made for calls, one per (type, lengths, strides), shared by every
# thread: creating, setting and destroying the six or so a call needs costs
# more than a small tensor's whole batch norm.  They are never changed once
# set, and the library only reads them (each call copies the ones it is
# given).  Whoever uses one holds it (a plan, a call in flight): emptying the
# cache when it is full destroys only those nobody holds.
_CACHE_LIMIT = 4096
_cache: dict = {}


def described(code: int, shape: tuple, strides: tuple) -> TensorDescriptor:
    """The shared descriptor of miopenDataType_t ``code``, ``shape`` and
    element ``strides`` (tuples of ints); made and set on first use, where
    the library's refusal of a length, a stride or the type is raised."""
    key = (code, shape, strides)
    found = _cache.get(key)
    if found is None:
        descriptor = TensorDescriptor()
        try:
            descriptor._set_code(code, shape, strides)
        except BaseException:
            descriptor.close()
            raise
        if len(_cache) >= _CACHE_LIMIT:
            _cache.clear()
        found = _cache.setdefault(key, descriptor)  # a thread that made it first wins
    return found
