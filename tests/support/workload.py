"""A fixed set of calls, one or more of every tensor entry point, big enough
that the CPU backend spreads each over its thread pool, and a digest of what
they return and write.

Run as a script, it prints that digest: test_concurrency.py compares the
digests of processes that differ only in MIOPEN_BN_NUM_THREADS.
"""

from __future__ import annotations

import hashlib
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # tests/, when run as a script

from support.entry_points import BACKWARD, BATCH_NORM, GROUP_NORM  # noqa: E402
from support.fuzz_bases import batch_norm_base, group_norm_base  # noqa: E402
from support.fuzz_cases import Case  # noqa: E402
from support.strategies import CHANNELS_LAST, PACKED, Layout  # noqa: E402

from miopen_bn import dtypes  # noqa: E402

# 62208 values per tensor: above the size below which a call stays on its
# calling thread (walk_passes.hpp's kSerialValues, 32768).
BN_SHAPE = (8, 24, 18, 18)
GN_SHAPE, GN_GROUPS = (4, 16, 24, 24), 4
# NCHW backward whose features (100352 values over x, dy and dx: 1.2 MB)
# outgrow an L2-sized unit: its fused units are sized from each thread's
# share of the last-level cache, so the plan differs with the thread count
# (fused in 2-feature units at 1-3 threads, unfused at 8) while the results
# must not.
LARGE_BACKWARD_SHAPE = (2, 32, 224, 224)
DATA = ("xDesc", "yDesc", "dyDesc", "dxDesc")
# The float32 in-place variants write outputs over inputs in runs (324-value
# planes, 24-value rows) whose cache lines start at varied offsets: the
# streamed stores' whole-line windows (span_kernels.cpp; in packed NCHW one
# window spans a task's planes joined), when the cache is shrunk, begin and
# end mid-run.
VARIANTS = (  # mode, x type, data layout, alpha/beta, in place
    ("spatial", dtypes.FLOAT32, PACKED, (1.0, 0.0), False),
    ("spatial", dtypes.FLOAT16, CHANNELS_LAST, (1.0, 0.0), False),
    ("per_activation", dtypes.FLOAT32, Layout("padded", padding=3), (0.5, 0.25), False),
    ("spatial", dtypes.FLOAT32, PACKED, (0.75, 0.5), True),
    ("spatial", dtypes.FLOAT32, CHANNELS_LAST, (0.75, 0.5), True),
)


def jobs() -> list:
    """(base problem, data seed) pairs, always the same."""
    result = []
    for function in BATCH_NORM:
        for mode, x_dtype, layout, (alpha, beta), in_place in VARIANTS:
            scalars = {name: value for name, value in (("alpha", alpha), ("beta", beta), ("alphaDataDiff", alpha),
                                                       ("betaDataDiff", beta))}
            over = ("dy" if function in BACKWARD else "x") if in_place else None
            base = batch_norm_base(function, mode, BN_SHAPE, x_dtype, layouts_by_desc=dict.fromkeys(DATA, layout),
                                   in_place=over, scalars=scalars)
            result.append((base, len(result)))
    large = batch_norm_base("miopenBatchNormalizationBackward", "spatial", LARGE_BACKWARD_SHAPE, dtypes.FLOAT32,
                            layouts_by_desc=dict.fromkeys(DATA, PACKED))
    result.append((large, len(result)))
    for function in GROUP_NORM:
        result.append((group_norm_base(function, GN_SHAPE, GN_GROUPS, dtypes.FLOAT32), len(result)))
    return result


def run(lib, ffi, base, seed: int, handle=None) -> tuple:
    """(status, {output: bytes}) of one job, on `handle` or a handle of its own."""
    case = Case(lib, ffi, base, [], seed, handle)
    try:
        return case.call(), case.output_bytes()
    finally:
        case.close()


def digest(lib, ffi) -> str:
    sha = hashlib.sha256()
    for base, seed in jobs():
        status, outputs = run(lib, ffi, base, seed)
        sha.update(f"{base.function} {status}".encode())
        for name in sorted(outputs):
            sha.update(name.encode() + outputs[name])
    return sha.hexdigest()


if __name__ == "__main__":
    import miopen_bn

    print(digest(miopen_bn.lib, miopen_bn.ffi))
