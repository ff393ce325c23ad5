"""Runs one operation ``-i`` times and times it: kernel time from the handle's
profiling (``-t``: device time on the GPU, the computation's wall time on the
CPU) and the wall time of the whole call (``-w``: bindings and, on the GPU,
the wait for the device included).  The first call's results are copied to
the host for verification before later calls overwrite them."""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass, field
from typing import Optional


@dataclass(frozen=True)
class Times:
    """Milliseconds per call; the first call is left out of the average when
    there are more (it pays for thread start-up, first-touch page faults and
    scratch allocation)."""

    calls_ms: tuple

    @property
    def minimum(self) -> float:
        return min(self.calls_ms)

    @property
    def average(self) -> float:
        steady = self.calls_ms[1:] if len(self.calls_ms) > 1 else self.calls_ms
        return statistics.fmean(steady)


@dataclass
class RunResult:
    kernel: Optional[Times]
    wall: Optional[Times]
    first_outputs: dict = field(default_factory=dict)  # host copies, empty without verification


def run(operation, handle, memory, options, progress) -> RunResult:
    handle.enable_profiling(options.time)
    kernel, wall, first = [], [], {}
    for i in range(options.iterations):
        progress.phase(f"{operation.title}: call {i + 1} of {options.iterations}")
        start = time.perf_counter()
        operation.call(handle)
        memory.synchronize()
        wall.append((time.perf_counter() - start) * 1e3)
        if options.time:
            kernel.append(handle.kernel_time_ms())
        if i == 0 and options.verify:
            first = {name: memory.to_host(array) for name, array in operation.outputs().items()}
    return RunResult(
        kernel=Times(tuple(kernel)) if options.time else None,
        wall=Times(tuple(wall)) if options.wall else None,
        first_outputs=first,
    )
