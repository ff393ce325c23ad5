"""One batch-norm call on either backend, NumPy in and NumPy out, so that a
test parametrized with the ``backend`` fixture (conftest.py) has one body.

On the GPU the inputs become torch CUDA tensors in the same layout (dense
ones keep their strides), the outputs come back to the host, and running
statistics updated on the device are copied back into the given arrays."""

from __future__ import annotations

from typing import Optional

import numpy as np

import miopen_bn
from miopen_bn import dtypes


class Side:
    """The host (CPU handle) or the device (GPU handle) side of a test."""

    def __init__(self, name: str):
        self.name = name
        self.handle = miopen_bn.Handle(name)
        if name == "gpu":
            import torch

            self._torch = torch

    def close(self) -> None:
        self.handle.close()

    # -- moving arrays -----------------------------------------------------------
    def put(self, array):
        if array is None or self.name == "cpu":
            return array
        torch = self._torch
        name = dtypes.name_of(array.dtype)
        # torch has no ml_dtypes bfloat16: cross as float32 (exact), narrow there.
        host = torch.from_numpy(array.astype(np.float32) if name == dtypes.BFLOAT16 else array)
        return host.to(device="cuda", dtype=getattr(torch, name))

    def get(self, value) -> Optional[np.ndarray]:
        if value is None or self.name == "cpu":
            return value
        self._torch.cuda.synchronize()
        if value.dtype == self._torch.bfloat16:
            return value.float().cpu().numpy().astype(dtypes.bfloat16)
        return value.cpu().numpy()

    def _copy_back(self, device_arrays: dict, host_arrays: dict) -> None:
        for key, host in host_arrays.items():
            if host is not None and self.name != "cpu":
                np.copyto(host, self.get(device_arrays[key]))

    def _options(self, options: dict) -> dict:
        """Given output arrays (y=, dx=, ...) go to the device too."""
        return {key: self.put(value) if isinstance(value, np.ndarray) else value for key, value in options.items()}

    # -- the three calls ----------------------------------------------------------
    def forward_training(self, x, scale, bias, running_mean=None, running_var=None, **options):
        """(y, saved_mean, saved_inv_std) as NumPy; running statistics (and
        V3's next ones) updated in place."""
        running = {"running_mean": running_mean, "running_var": running_var}
        for key in ("next_running_mean", "next_running_var"):  # V3's outputs, when given
            if options.get(key) is not None:
                running[key] = options.pop(key)
        on_device = {key: self.put(value) for key, value in running.items()}
        out = miopen_bn.batchnorm_forward_training(
            self.put(x), self.put(scale), self.put(bias), **on_device, handle=self.handle, **self._options(options)
        )
        self._copy_back(on_device, running)
        return tuple(self.get(value) for value in out)

    def forward_inference(self, x, scale, bias, mean=None, var=None, **options):
        out = miopen_bn.batchnorm_forward_inference(
            self.put(x), self.put(scale), self.put(bias), self.put(mean), self.put(var), handle=self.handle,
            **self._options(options),
        )
        return self.get(out)

    def backward(self, x, dy, scale, saved_mean=None, saved_inv_std=None, **options):
        """(dx, dscale, dbias) as NumPy."""
        out = miopen_bn.batchnorm_backward(
            self.put(x), self.put(dy), self.put(scale), saved_mean=self.put(saved_mean),
            saved_inv_std=self.put(saved_inv_std), handle=self.handle, **self._options(options),
        )
        return tuple(self.get(value) for value in out)
