"""What the driver prints for each operation: its times, the ``stats:`` line
(bytes moved and GB/s), and the verification of every output."""

from __future__ import annotations

from .arguments import SHORT_DTYPE

STATS_HEADER = "stats: name, n, c, d, h, w, layout, type, bytes, ms, GB/s"


def _padded_ncdhw(shape: tuple) -> tuple:
    """(N, C, D, H, W) with the dimensions a lower rank lacks as 1."""
    n, c, *spatial = shape
    return (n, c, *([1] * (3 - len(spatial))), *spatial)


def times_lines(title: str, result) -> list:
    lines = []
    for label, times in (("kernel time", result.kernel), ("wall time", result.wall)):
        if times is None:
            continue
        count = len(times.calls_ms)
        scope = f"average of calls 2 to {count}" if count > 1 else "1 call"
        lines.append(f"{title}: {label} min {times.minimum:.6g} ms, avg {times.average:.6g} ms ({scope})")
    return lines


def stats_line(operation, options, result) -> str:
    """Bytes moved at the least (every input read and every output written
    once) over the average kernel time, else the average wall time."""
    times = result.kernel or result.wall
    nbytes = operation.traffic_bytes()
    gbs = nbytes / (times.average * 1e-3) / 1e9 if times.average > 0 else float("inf")
    fields = [operation.key, *_padded_ncdhw(options.shape), options.layout, SHORT_DTYPE[options.subcommand.x_dtype],
              nbytes, f"{times.average:.6g}", f"{gbs:.2f}"]
    return "stats: " + ", ".join(str(field) for field in fields)


def verification_lines(title: str, comparisons: list, sample) -> tuple:
    """(lines, passed): one line per output, then the verdict."""
    passed = all(c.passed for c in comparisons)
    lines = [f"{title}: verification against the float64 reference on {sample.describe()}:"]
    lines += [f"  {c.message()}" for c in comparisons]
    lines.append(f"{title}: {'verified' if passed else 'FAILED verification'}")
    return lines, passed
