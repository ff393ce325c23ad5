"""Where the driver's tensors live: NumPy arrays for the CPU backend, PyTorch
or CuPy device arrays for the GPU backend (imported only when asked for).

Every run builds its data on the host; ``to_device`` copies an array over
with the same memory layout (NHWC stays NHWC) and ``to_host`` copies results
back for verification."""

from __future__ import annotations

import numpy as np

from .. import dtypes
from ..arrays import view_of


class DriverError(RuntimeError):
    """The run cannot go ahead (exit status 3)."""


def _packed(array: np.ndarray) -> tuple:
    """(the array's memory as a packed buffer, the permutation back to logical order)."""
    order = view_of(array, "array").layout_order()
    return np.ascontiguousarray(array.transpose(order)), [int(axis) for axis in np.argsort(order)]


class HostMemory:
    name = "NumPy"

    def to_device(self, array: np.ndarray) -> np.ndarray:
        return array

    def to_host(self, array) -> np.ndarray:
        return np.array(array, copy=True)

    def synchronize(self) -> None:
        pass


class TorchMemory:
    name = "PyTorch"

    def __init__(self, torch):
        self.torch = torch

    def to_device(self, array: np.ndarray):
        packed, back = _packed(array)
        if packed.dtype == dtypes.NUMPY_DTYPE[dtypes.BFLOAT16]:  # torch.from_numpy has no bfloat16
            tensor = self.torch.from_numpy(packed.view(np.int16)).view(self.torch.bfloat16)
        else:
            tensor = self.torch.from_numpy(packed)
        return tensor.to("cuda").permute(*back)

    def to_host(self, tensor) -> np.ndarray:
        if tensor.dtype == self.torch.bfloat16:
            return tensor.view(self.torch.int16).cpu().numpy().view(dtypes.NUMPY_DTYPE[dtypes.BFLOAT16])
        return tensor.cpu().numpy()

    def synchronize(self) -> None:
        self.torch.cuda.synchronize()


class CupyMemory:
    name = "CuPy"

    def __init__(self, cupy):
        self.cupy = cupy

    def to_device(self, array: np.ndarray):
        if array.dtype == dtypes.NUMPY_DTYPE[dtypes.BFLOAT16]:
            raise DriverError("CuPy has no bfloat16 arrays: install PyTorch to run bfp16 on the GPU")
        packed, back = _packed(array)
        return self.cupy.asarray(packed).transpose(back)

    def to_host(self, array) -> np.ndarray:
        return self.cupy.asnumpy(array)

    def synchronize(self) -> None:
        self.cupy.cuda.Device().synchronize()


def memory_for(backend: str):
    """The array library for ``backend`` ("cpu" or "gpu")."""
    if backend == "cpu":
        return HostMemory()
    reasons = []
    try:
        import torch

        if torch.cuda.is_available():
            return TorchMemory(torch)
        reasons.append("PyTorch has no CUDA/ROCm device")
    except ImportError:
        reasons.append("PyTorch is not installed")
    try:
        import cupy

        if cupy.cuda.runtime.getDeviceCount() > 0:
            return CupyMemory(cupy)
        reasons.append("CuPy sees no device")
    except ImportError:
        reasons.append("CuPy is not installed")
    except Exception as error:  # CuPy raises its own runtime error without a driver
        reasons.append(f"CuPy cannot reach a device ({error})")
    raise DriverError(f"--backend gpu needs PyTorch or CuPy device arrays: {'; '.join(reasons)}")
