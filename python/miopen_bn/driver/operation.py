"""What every operation the driver runs provides (one library call, the
arrays it writes, the float64 reference's values for them, the bytes it must
move), and the data its directions share."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np

from .. import tolerances
from .sampling import ChannelSample
from .tensors import traffic_bytes


@dataclass(frozen=True)
class Expected:
    """The reference's value for one output; ``cut`` picks the sampled
    channels out of the library's full result."""

    name: str
    value: np.ndarray
    kind: str  # tolerances.ELEMENTWISE or tolerances.REDUCTION
    cut: Callable[[np.ndarray], np.ndarray]


class Operation:
    title = ""  # "Forward Training"
    key = ""  # the stats line's name: "bn_train"

    def call(self, handle) -> None:
        raise NotImplementedError

    def outputs(self) -> dict:
        """The arrays the call writes (device arrays on the GPU), by name."""
        raise NotImplementedError

    def expectations(self, sample: ChannelSample) -> list:
        """The reference's values on the sampled channels, as ``Expected``."""
        raise NotImplementedError

    def reads(self) -> list:
        """Host arrays of the inputs' sizes."""
        raise NotImplementedError

    def writes(self) -> list:
        """Host arrays of the outputs' sizes."""
        raise NotImplementedError

    def traffic_bytes(self) -> int:
        return traffic_bytes(self.reads(), self.writes())

    def verify(self, results: dict, sample: ChannelSample) -> list:
        """Compares host copies of ``outputs()`` with the reference; each
        output's own dtype picks its row of the tolerance table."""
        comparisons = []
        for expected in self.expectations(sample):
            got = expected.cut(results[expected.name])
            comparisons.append(tolerances.compare(got, expected.value, got.dtype, expected.kind, expected.name))
        return comparisons


class LayerData:
    """x and the run's settings, shared by every direction of one run: arrays
    are made on the host and copied to where the backend reads them."""

    def __init__(self, options, factory, memory):
        self.options = options
        self.factory = factory
        self.memory = memory
        self.x_dtype = options.subcommand.x_dtype
        self.param_dtype = options.subcommand.param_dtype
        self.x = factory.activations(self.x_dtype)
        self.x_device = memory.to_device(self.x)

    def on_device(self, array):
        return None if array is None else self.memory.to_device(array)
