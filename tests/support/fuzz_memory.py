"""Memory behind the fuzzer's tensor arguments, sized from the descriptor the
library will actually see, and views of it in logical (N, C, ...) order.

A buffer always covers its descriptor's whole element space, so whatever
the library accepts it may touch.  Small element spaces are NumPy arrays;
one too big for that but with few elements (huge strides) is an anonymous
mapping reserved without memory, of which only the addressed elements are
ever touched; anything larger gets no buffer (a NULL pointer).  Memory
starts as 0xFF bytes, a NaN in every floating-point type.
"""

from __future__ import annotations

import mmap
from dataclasses import dataclass
from typing import Optional

import numpy as np

from miopen_bn import dtypes

DENSE_BYTES = 1 << 22  # larger element spaces are mapped sparsely
SPARSE_BYTES = 1 << 36  # larger ones are not backed at all
SPARSE_ELEMENTS = 4096  # elements a sparse buffer may have (pages touched)
DENSE_ELEMENTS = 1 << 16

# miopenDataType_t code -> NumPy type of the same size (unsupported types
# still need correctly sized memory).
NUMPY_FOR_CODE = {
    0: np.dtype(np.float16),
    1: np.dtype(np.float32),
    2: np.dtype(np.int32),
    3: np.dtype(np.int8),
    5: dtypes.bfloat16,
    6: np.dtype(np.float64),
    7: np.dtype(np.uint8),
    8: np.dtype(np.uint8),
    9: np.dtype(np.int64),
}


@dataclass(frozen=True)
class DescriptorState:
    """What a live, set descriptor holds, read back through the getters."""

    dtype_code: int
    lens: tuple
    strides: tuple

    @property
    def numpy_dtype(self) -> np.dtype:
        return NUMPY_FOR_CODE[self.dtype_code]

    @property
    def is_float(self) -> bool:
        return self.dtype_code in dtypes.NAME_FOR_MIOPEN_CODE

    @property
    def element_count(self) -> int:
        return int(np.prod(self.lens, dtype=object))

    @property
    def span_bytes(self) -> int:
        last = sum((n - 1) * s for n, s in zip(self.lens, self.strides))
        return (last + 1) * self.numpy_dtype.itemsize


def read_state(lib, ffi, desc) -> Optional[DescriptorState]:
    """The descriptor's type, lengths and strides; None unless it is live,
    set and representable through the int getters."""
    if desc == ffi.NULL:
        return None
    rank = ffi.new("int*")
    if lib.miopenGetTensorDescriptorSize(desc, rank) != 0 or not 1 <= rank[0] <= 5:
        return None
    code, dims, strides = ffi.new("miopenDataType_t*"), ffi.new("int[5]"), ffi.new("int[5]")
    if lib.miopenGetTensorDescriptor(desc, code, dims, strides) != 0:
        return None
    return DescriptorState(int(code[0]), tuple(dims[0 : rank[0]]), tuple(strides[0 : rank[0]]))


def element_space(lib, ffi, desc) -> Optional[int]:
    """Bytes the library may touch through `desc`, None when it refuses it."""
    if desc == ffi.NULL:
        return None
    size = ffi.new("size_t*")
    return int(size[0]) if lib.miopenGetTensorNumBytes(desc, size) == 0 else None


def strided_view(memory: np.ndarray, state: DescriptorState) -> np.ndarray:
    """The logical tensor `state` describes in `memory` (bytes)."""
    itemsize = state.numpy_dtype.itemsize
    typed = memory[: (memory.size // itemsize) * itemsize].view(state.numpy_dtype)
    return np.lib.stride_tricks.as_strided(
        typed, shape=state.lens, strides=[s * itemsize for s in state.strides], writeable=True
    )


class Buffer:
    """Memory covering `nbytes`, dense or sparse (see the module docstring)."""

    def __init__(self, nbytes: int, sparse: bool):
        self.sparse = sparse
        self._mapping = None
        if sparse:
            flags = mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS | getattr(mmap, "MAP_NORESERVE", 0)
            self._mapping = mmap.mmap(-1, nbytes, flags=flags)
            self.root = np.frombuffer(self._mapping, dtype=np.uint8)
        else:
            self.root = np.full(max(nbytes, 1), 0xFF, dtype=np.uint8)
        self.ptr = self.root.ctypes.data

    @classmethod
    def covering(cls, nbytes: Optional[int], state: Optional[DescriptorState]) -> Optional["Buffer"]:
        """A buffer for a descriptor's element space, or None (pass NULL)."""
        if nbytes is None:
            return cls(64, sparse=False)  # refused descriptor: the library must not touch it
        if state is None:
            return None  # accepted but unreadable through the getters: too big to back
        if nbytes <= DENSE_BYTES and state.element_count <= DENSE_ELEMENTS:
            return cls(nbytes, sparse=False)
        if nbytes <= SPARSE_BYTES and state.element_count <= SPARSE_ELEMENTS:
            try:
                return cls(nbytes, sparse=True)
            except (OSError, ValueError, OverflowError):  # no overcommit here
                return None
        return None

    def view(self, state: DescriptorState) -> np.ndarray:
        """The logical tensor `state` describes in this memory (writable)."""
        return strided_view(self.root, state)

    def addressed_bytes(self, state: DescriptorState) -> np.ndarray:
        """A mask of the bytes of a dense buffer that `state`'s elements cover."""
        offsets = np.zeros((), dtype=np.int64)
        for n, s in zip(state.lens, state.strides):
            offsets = np.add.outer(offsets, np.arange(n, dtype=np.int64) * s)
        itemsize = state.numpy_dtype.itemsize
        mask = np.zeros(self.root.size, dtype=bool)
        starts = offsets.ravel() * itemsize
        for byte in range(itemsize):
            mask[starts + byte] = True
        return mask

    def release(self) -> None:
        self.root = None
        if self._mapping is not None:
            try:
                self._mapping.close()
            except BufferError:  # a view is still alive: unmapped when it goes
                pass
            self._mapping = None
