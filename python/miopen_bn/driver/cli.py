"""``miopen-bn-driver``: MIOpenDriver's ``bnorm`` / ``groupnorm`` command line
on this library.  Prints the command, then for each direction its times, a
``stats:`` line and its verification against the float64 reference.

Exit status: 0 success; 1 a verification failed; 2 a bad command line; 3 the
run could not go ahead (the library refused the problem, no GPU, no memory).
"""

from __future__ import annotations

import shlex
import sys
from typing import Optional, Sequence

from ..errors import MIOpenError
from ..handle import Handle
from . import report, runner
from .arguments import BNORM, PROGRAM, UsageError, parse
from .batchnorm_ops import batchnorm_operations
from .groupnorm_ops import groupnorm_operations
from .memory import DriverError, memory_for
from .progress import Progress
from .sampling import DEFAULT_BUDGET, sample_channels
from .tensors import TensorFactory, seed_or_fresh

EXIT_OK, EXIT_VERIFY_FAILED, EXIT_USAGE, EXIT_RUN_FAILED = 0, 1, 2, 3


def _print(lines: list) -> None:
    for line in lines:
        print(line)
    sys.stdout.flush()


def _require_gpu() -> None:
    from .. import gpu_available, load

    if not load().lib.miopenBNHasGpuSupport():
        raise DriverError(
            "--backend gpu: this libmiopen_bn was built without a GPU backend "
            "(reinstall with -Ccmake.define.MIOPEN_BN_GPU=CUDA or HIP)"
        )
    if not gpu_available():
        raise DriverError("--backend gpu: the library has a GPU backend but no usable device")


def _run(options, progress: Progress) -> int:
    seed = seed_or_fresh(options.seed)
    if options.backend == "gpu":
        _require_gpu()
    memory = memory_for(options.backend)
    progress.phase("making random data")
    factory = TensorFactory(options.shape, options.channels_last, seed)
    bnorm = options.subcommand.operation == BNORM
    channels_per_group = 1 if bnorm else options.shape[1] // options.groups
    status = EXIT_OK
    with Handle(options.backend) as handle:
        if options.tuning_policy:
            handle.tuning_policy = options.tuning_policy
        make = batchnorm_operations if bnorm else groupnorm_operations
        for operation in make(options, factory, memory):
            result = runner.run(operation, handle, memory, options, progress)
            lines = report.times_lines(operation.title, result)
            if result.kernel or result.wall:
                lines += [report.STATS_HEADER, report.stats_line(operation, options, result)]
            _print(lines)
            if not options.verify:
                continue
            progress.phase(f"{operation.title}: verifying")
            budget = None if options.verify == 2 else DEFAULT_BUDGET
            sample = sample_channels(options.shape, budget, channels_per_group)
            lines, passed = report.verification_lines(
                operation.title, operation.verify(result.first_outputs, sample), sample
            )
            if not passed:
                lines.append(f"{operation.title}: the data came from --seed {seed}")
                status = EXIT_VERIFY_FAILED
            _print(lines)
    return status


def main(argv: Optional[Sequence[str]] = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        options = parse(argv)
    except SystemExit as exit_request:  # argparse: --help, or a message already printed
        return int(exit_request.code or 0)
    except UsageError as error:
        print(f"{PROGRAM}: error: {error}", file=sys.stderr)
        return EXIT_USAGE
    _print([f"{PROGRAM} {shlex.join(argv)}"])
    try:
        with Progress() as progress:
            return _run(options, progress)
    except (MIOpenError, DriverError, MemoryError) as error:
        print(f"{PROGRAM}: error: {error}", file=sys.stderr)
        return EXIT_RUN_FAILED
