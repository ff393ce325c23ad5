"""Host arrays for one driver run, in the layout the command line asks for:
random data shaped like a real layer's (every channel with its own mean and
spread, so a swapped channel or a wrong statistic shows), parameters, and
NaN-poisoned outputs.  Arrays are NumPy views in logical order (N, C, ...)
whatever their memory order: NHWC is a transposed view of an NHWC buffer."""

from __future__ import annotations

import functools
from typing import Optional

import numpy as np

from .. import dtypes
from ..arrays import in_memory_order


def memory_order(shape: tuple, channels_last: bool) -> list:
    """Axes from outermost to innermost in memory: NCHW (0, 1, 2, 3) or NHWC (0, 2, 3, 1)."""
    rank = len(shape)
    return [0, *range(2, rank), 1] if channels_last and rank > 2 else list(range(rank))


class TensorFactory:
    def __init__(self, shape: tuple, channels_last: bool, seed: int):
        self.shape = tuple(shape)
        self.order = memory_order(self.shape, channels_last)
        self.rng = np.random.default_rng(seed)
        channels = self.shape[1]
        self.channel_mean = self.rng.uniform(-2.0, 2.0, channels)
        self.channel_std = self.rng.uniform(0.5, 2.0, channels)

    def channel_view(self, values: np.ndarray) -> np.ndarray:
        """A (C,) vector broadcastable along axis 1 of the data."""
        return values.reshape((1, -1) + (1,) * (len(self.shape) - 2))

    def _laid_out(self, dtype: str, fill=None) -> np.ndarray:
        numpy_dtype = dtypes.NUMPY_DTYPE[dtype]
        if fill is None:
            return in_memory_order(functools.partial(np.empty, dtype=numpy_dtype), self.shape, self.order)
        return in_memory_order(functools.partial(np.full, fill_value=fill, dtype=numpy_dtype), self.shape,
                               self.order)

    def poisoned(self, dtype: str) -> np.ndarray:
        """An output full of NaN: anything the call fails to write shows."""
        return self._laid_out(dtype, np.nan)

    def _normal(self, dtype: str) -> np.ndarray:
        # Drawn in float32 (twice as fast) unless float64 data needs the digits.
        draw = np.float64 if dtype == dtypes.FLOAT64 else np.float32
        return in_memory_order(functools.partial(self.rng.standard_normal, dtype=draw), self.shape, self.order)

    def _cast_into_layout(self, values: np.ndarray, dtype: str) -> np.ndarray:
        out = self._laid_out(dtype)
        np.copyto(out, values, casting="unsafe")
        return out

    def activations(self, dtype: str) -> np.ndarray:
        """x: normal values with each channel's own mean and standard deviation."""
        values = self._normal(dtype)
        values *= self.channel_view(self.channel_std).astype(values.dtype)
        values += self.channel_view(self.channel_mean).astype(values.dtype)
        return values if values.dtype == dtypes.NUMPY_DTYPE[dtype] else self._cast_into_layout(values, dtype)

    def gradient(self, dtype: str) -> np.ndarray:
        """dy, or the prior content of an output that is blended into: standard normal."""
        values = self._normal(dtype)
        return values if values.dtype == dtypes.NUMPY_DTYPE[dtype] else self._cast_into_layout(values, dtype)

    def uniform(self, shape: tuple, low: float, high: float, dtype: str) -> np.ndarray:
        return self.rng.uniform(low, high, shape).astype(dtypes.NUMPY_DTYPE[dtype])

    def near_channel_statistics(self, shape: tuple, dtype: str) -> tuple:
        """Estimated mean and variance close to the data's true ones (what a
        trained network's running statistics look like), in ``shape``, which
        holds the C axis at position 1 of a broadcastable parameter shape."""
        mean = self.channel_mean.reshape((1, -1) + (1,) * (len(shape) - 2))
        var = np.square(self.channel_std).reshape(mean.shape)
        est_mean = mean + self.rng.uniform(-0.1, 0.1, shape)
        est_var = var * self.rng.uniform(0.8, 1.2, shape)
        numpy_dtype = dtypes.NUMPY_DTYPE[dtype]
        return est_mean.astype(numpy_dtype), est_var.astype(numpy_dtype)

    def output(self, dtype: str, prior: bool) -> tuple:
        """(array the call writes, copy of its prior content or None): random
        prior content when the result is blended into it (beta != 0), NaN
        otherwise."""
        if not prior:
            return self.poisoned(dtype), None
        values = self.gradient(dtype)
        return values, values.copy()


def traffic_bytes(reads: list, writes: list) -> int:
    """Bytes a call must move at the least: every input read once, every output written once."""
    return sum(int(array.nbytes) for array in list(reads) + list(writes) if array is not None)


def seed_or_fresh(seed: Optional[int]) -> int:
    return int(np.random.SeedSequence().entropy % (1 << 63)) if seed is None else int(seed)
