"""The element types batch norm computes on, and their names in each world:
``miopenDataType_t`` codes, NumPy dtypes (bfloat16 from ``ml_dtypes``),
DLPack type codes and ``__cuda_array_interface__`` type strings."""

from __future__ import annotations

import ml_dtypes
import numpy as np

from .cdef import enum_value

bfloat16 = np.dtype(ml_dtypes.bfloat16)

# Canonical names used throughout the package.
FLOAT16, BFLOAT16, FLOAT32, FLOAT64 = "float16", "bfloat16", "float32", "float64"

MIOPEN_CODE = {  # miopenDataType_t
    FLOAT16: enum_value("miopenHalf"),
    FLOAT32: enum_value("miopenFloat"),
    BFLOAT16: enum_value("miopenBFloat16"),
    FLOAT64: enum_value("miopenDouble"),
}
NAME_FOR_MIOPEN_CODE = {code: name for name, code in MIOPEN_CODE.items()}

NUMPY_DTYPE = {
    FLOAT16: np.dtype(np.float16),
    BFLOAT16: bfloat16,
    FLOAT32: np.dtype(np.float32),
    FLOAT64: np.dtype(np.float64),
}

ITEMSIZE = {name: dtype.itemsize for name, dtype in NUMPY_DTYPE.items()}

# DLPack: (type code, bits) with codes kDLFloat = 2, kDLBfloat = 4.
DLPACK_TYPE = {(2, 16): FLOAT16, (2, 32): FLOAT32, (2, 64): FLOAT64, (4, 16): BFLOAT16}

SUPPORTED = tuple(NUMPY_DTYPE)
_NAME_FOR_NUMPY_DTYPE = {dtype: name for name, dtype in NUMPY_DTYPE.items()}
_NUMPY_DTYPE_CLASSES = frozenset(type(dtype) for dtype in NUMPY_DTYPE.values())


def name_of(dtype) -> str:
    """The canonical name for a NumPy dtype, a dtype-like, a name or a miopen code.

    Raises TypeError for anything batch norm does not compute on."""
    if type(dtype) in _NUMPY_DTYPE_CLASSES:  # the common case, an array's own dtype: one lookup
        name = _NAME_FOR_NUMPY_DTYPE.get(dtype)
        if name is not None:
            return name
    if isinstance(dtype, str) and dtype in NUMPY_DTYPE:
        return dtype
    if isinstance(dtype, (int, np.integer)) and not isinstance(dtype, bool):
        if int(dtype) in NAME_FOR_MIOPEN_CODE:
            return NAME_FOR_MIOPEN_CODE[int(dtype)]
        raise TypeError(f"miopenDataType_t {int(dtype)} is not supported (use {', '.join(SUPPORTED)})")
    torch_name = _torch_dtype_name(dtype)
    if torch_name is not None:
        return torch_name
    try:
        np_dtype = np.dtype(dtype)
    except TypeError:
        raise TypeError(f"{dtype!r} is not a data type") from None
    for name, candidate in NUMPY_DTYPE.items():
        if np_dtype == candidate:
            return name
    raise TypeError(f"data type {np_dtype} is not supported (use {', '.join(SUPPORTED)})")


def from_cuda_typestr(typestr: str) -> str:
    """The name for a ``__cuda_array_interface__`` typestr such as '<f4'."""
    kind_size = typestr.lstrip("<>|=")
    table = {"f2": FLOAT16, "f4": FLOAT32, "f8": FLOAT64}
    if typestr[:1] == ">" or kind_size not in table:
        raise TypeError(f"array type {typestr!r} is not supported (use {', '.join(SUPPORTED)})")
    return table[kind_size]


def _torch_dtype_name(dtype) -> str | None:
    # torch.dtype objects are recognised without importing torch.
    if type(dtype).__module__ != "torch" or type(dtype).__name__ != "dtype":
        return None
    name = str(dtype).replace("torch.", "")
    if name in NUMPY_DTYPE:
        return name
    raise TypeError(f"data type {dtype} is not supported (use {', '.join(SUPPORTED)})")
