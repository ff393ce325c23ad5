#!/usr/bin/env python3
"""Our time on each case under each GPU algorithm, side by side: the data a
planner rule is made from.

    python bench/algorithm_sweep.py default,gn_on_chip,gn_persistent \\
        gn_bwd:2x1280x64x64:fp16:nhwc bn_train:8x64x56x56:fp16:nhwc ...

A case is op:NxCxHxW:dtype:layout as in bench/kernel_times.py; `default`
is the call's own choice.  MIOPEN_BN_GPU_ALGORITHM is read at each call, so
one process sets it per algorithm.  Each entry is event time / kernel time
in microseconds (the bench's timer, then CUPTI with the L2 flushed), or
`refused` where the algorithm cannot serve the case.
"""
from __future__ import annotations

import os
import statistics
import sys

VARIABLE = "MIOPEN_BN_GPU_ALGORITHM"


def sweep(call, algorithms, measure, refused):
    """{algorithm: measure(call) or None where `refused(error)`} with the
    variable set for each, and as it was afterwards."""
    before = os.environ.get(VARIABLE)
    results = {}
    try:
        for algorithm in algorithms:
            if algorithm == "default":
                os.environ.pop(VARIABLE, None)
            else:
                os.environ[VARIABLE] = algorithm
            try:
                results[algorithm] = measure(call)
            except Exception as error:  # noqa: BLE001: only a refusal is a result
                if not refused(error):
                    raise
                results[algorithm] = None
    finally:
        if before is None:
            os.environ.pop(VARIABLE, None)
        else:
            os.environ[VARIABLE] = before
    return results


def line(case, results):
    shown = (f"{name}={'refused' if r is None else f'{r[0]:.2f}/{r[1]:.2f}'}" for name, r in results.items())
    return f"{case:36s} " + "  ".join(shown)


def main(argv):
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import torch

    import kernel_times
    import miopen_bn as mbn
    from bench_timing import GpuTimer

    algorithms, cases = argv[0].split(","), argv[1:]
    flush = torch.empty(256 << 20, dtype=torch.uint8, device="cuda")
    timer = GpuTimer(torch, torch.cuda.get_device_properties(0).L2_cache_size)

    def measure(call):
        call()
        torch.cuda.synchronize()
        event_us = timer.device_us([call])
        kernels = kernel_times.kernel_times(call, flush)
        kernel_us = sum(statistics.median(t) * len(t) / kernel_times.REPS for t in kernels.values())
        return event_us, kernel_us

    def refused(error):
        return isinstance(error, mbn.MIOpenNotImplementedError) and "cannot serve" in str(error)

    with mbn.Handle(backend="gpu", stream=torch.cuda.current_stream()) as handle:
        for case in cases:
            print(line(case, sweep(kernel_times.calls(case, handle)["ours"], algorithms, measure, refused)),
                  flush=True)


if __name__ == "__main__":
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    main(sys.argv[1:])
