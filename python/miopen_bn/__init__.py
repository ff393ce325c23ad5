"""miopen_bn: MIOpen's batch-normalization API (and group normalization) on
NumPy and device arrays.

    import numpy as np, miopen_bn
    y, mean, inv_std = miopen_bn.batchnorm_forward_training(x, scale, bias)
    y, mean, rstd = miopen_bn.groupnorm_forward(x, 32, weight, bias, activation="swish")

``miopen_bn.ffi`` and ``miopen_bn.lib`` give the raw C API (cffi, ABI mode);
the library is opened on first use, so ``miopen_bn.reference`` and
``miopen_bn.tolerances`` work without it.  For C code built against the
package's library: ``miopen_bn.get_include()``, ``miopen_bn.get_library()``
and ``python -m miopen_bn --cflags --libs``.
"""

from __future__ import annotations

from . import dtypes, reference, tolerances
from .activation import ActivationDescriptor
from .arrays import RawTensor
from .build_flags import get_cmake_dir, get_include, get_library, get_pkgconfig_dir
from .batchnorm import batchnorm_backward, batchnorm_forward_inference, batchnorm_forward_training
from .descriptor import TensorDescriptor
from .distributed import (
    batchnorm_backward_elementwise,
    batchnorm_backward_reduce,
    batchnorm_forward_normalize,
    batchnorm_local_statistics,
    batchnorm_merge_statistics,
)
from .errors import (
    ERROR_FOR_STATUS,
    MIOpenAllocFailedError,
    MIOpenBadParmError,
    MIOpenError,
    MIOpenGpuOperationsSkippedError,
    MIOpenInternalError,
    MIOpenInvalidValueError,
    MIOpenNotImplementedError,
    MIOpenNotInitializedError,
    MIOpenUnknownError,
    MIOpenUnsupportedOpError,
    MIOpenVersionMismatchError,
)
from .groupnorm import groupnorm_backward, groupnorm_forward
from .handle import Handle, default_handle
from .layer import BatchNorm
from .library import header_version, load

__version__ = header_version()

__all__ = [
    "ActivationDescriptor",
    "BatchNorm",
    "ERROR_FOR_STATUS",
    "Handle",
    "MIOpenAllocFailedError",
    "MIOpenBadParmError",
    "MIOpenError",
    "MIOpenGpuOperationsSkippedError",
    "MIOpenInternalError",
    "MIOpenInvalidValueError",
    "MIOpenNotImplementedError",
    "MIOpenNotInitializedError",
    "MIOpenUnknownError",
    "MIOpenUnsupportedOpError",
    "MIOpenVersionMismatchError",
    "RawTensor",
    "TensorDescriptor",
    "batchnorm_backward",
    "batchnorm_backward_elementwise",
    "batchnorm_backward_reduce",
    "batchnorm_forward_normalize",
    "batchnorm_forward_inference",
    "batchnorm_forward_training",
    "batchnorm_local_statistics",
    "batchnorm_merge_statistics",
    "check",
    "default_handle",
    "dtypes",
    "ffi",
    "get_cmake_dir",
    "get_include",
    "get_library",
    "get_pkgconfig_dir",
    "gpu_available",
    "groupnorm_backward",
    "groupnorm_forward",
    "lib",
    "load",
    "reference",
    "tolerances",
]


def check(status: int) -> None:
    """Raises the MIOpenError subclass for a failing ``miopenStatus_t``."""
    load().check(status)


def gpu_available() -> bool:
    """True when the library has a GPU backend and a GPU handle can be made."""
    if not load().lib.miopenBNHasGpuSupport():
        return False
    try:
        Handle("gpu").close()
    except MIOpenError:
        return False
    return True


def __getattr__(name: str):
    # ffi and lib open the library on first access (PEP 562).
    if name == "ffi":
        return load().ffi
    if name == "lib":
        return load().lib
    raise AttributeError(f"module 'miopen_bn' has no attribute {name!r}")
