"""How close a result must be to the float64 reference: the one table, read
from ``tolerances.csv`` beside this file (docs/tolerances.md gives its
reasons), shared by the tests, the benchmarks, the driver and, through a
header CMake generates from the same file, the C GPU-versus-CPU program;
and ``check`` to apply it.

Two kinds of output:

* "elementwise": y and dx, one rounding chain per element;
* "reduction": statistics and parameter gradients (saved mean / inverse std,
  running statistics, dscale, dbias), sums over M values.

A result passes when every element is within ``atol + rtol * |ref|``, has
NaN/inf exactly where the reference has them, and the RMS error stays under
half the bound at max |ref| (see ``Comparison.rms_bound``).

The dtype is the output's.  atol == rtol everywhere; tighten in the CSV, the
one place, where the implementation allows.  For float16/bfloat16
outputs compare against the reference computed from the *rounded* inputs
(``reference.rounded_like``): the tolerance covers the kernel, not the
rounding of its inputs.
"""

from __future__ import annotations

import csv
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from . import dtypes

ELEMENTWISE, REDUCTION = "elementwise", "reduction"
KINDS = (ELEMENTWISE, REDUCTION)


@dataclass(frozen=True)
class Tolerance:
    atol: float
    rtol: float

    def allowed(self, ref: np.ndarray) -> np.ndarray:
        return self.atol + self.rtol * np.abs(ref)


TABLE_PATH = Path(__file__).with_name("tolerances.csv")


def read_table(path: Path = TABLE_PATH) -> dict:
    """{dtype: {kind: Tolerance}} from the CSV (``#`` lines are comments);
    every dtype and kind exactly once, or ValueError."""
    lines = [line for line in path.read_text().splitlines() if line.strip() and not line.startswith("#")]
    table = {}
    for row in csv.DictReader(lines):
        dtype, kind = row["dtype"], row["kind"]
        if dtype not in dtypes.MIOPEN_CODE or kind not in KINDS or kind in table.get(dtype, {}):
            raise ValueError(f"{path}: unknown or repeated row {dtype},{kind}")
        table.setdefault(dtype, {})[kind] = Tolerance(float(row["atol"]), float(row["rtol"]))
    if any(set(table.get(dtype, {})) != set(KINDS) for dtype in dtypes.MIOPEN_CODE):
        raise ValueError(f"{path}: every dtype needs one row of each kind {KINDS}")
    return table


TOLERANCES = read_table()


RMS_FRACTION = 0.5
RMS_MIN_SIZE = 16


def tolerance(dtype, kind: str) -> Tolerance:
    if kind not in KINDS:
        raise ValueError(f"kind must be one of {KINDS}, got {kind!r}")
    return TOLERANCES[dtypes.name_of(dtype)][kind]


@dataclass(frozen=True)
class Comparison:
    """The outcome of comparing one output with its reference."""

    name: str
    dtype: str
    kind: str
    tolerance: Tolerance
    bad_count: int  # elements outside the per-element bound or with wrong NaN/inf
    size: int
    worst_index: tuple  # where |err| exceeds the bound most (or the first bad non-finite)
    worst_got: float
    worst_expected: float
    max_abs_error: float
    rms_error: float  # over the elements where both are finite
    max_abs_ref: float

    @property
    def relative_rms(self) -> float:
        return self.rms_error / self.max_abs_ref if self.max_abs_ref > 0 else self.rms_error

    @property
    def rms_bound(self) -> float:
        """Half the per-element bound at the scale of max |ref|: rounding
        errors scatter well below the bound, errors sitting at it everywhere
        are systematic.  Outputs of few elements are judged per element only."""
        if self.size < RMS_MIN_SIZE:
            return float("inf")
        return RMS_FRACTION * (self.tolerance.atol + self.tolerance.rtol * self.max_abs_ref)

    @property
    def passed(self) -> bool:
        return self.bad_count == 0 and self.rms_error <= self.rms_bound

    def message(self) -> str:
        tol = self.tolerance
        verdict = "ok" if self.passed else "FAILED"
        return (
            f"{self.name} ({self.dtype}, {self.kind}, atol {tol.atol:g}, rtol {tol.rtol:g}): {verdict}: "
            f"{self.bad_count} of {self.size} elements off; worst at index {self.worst_index}: got "
            f"{self.worst_got!r}, expected {self.worst_expected!r}; max |err| {self.max_abs_error:.3g}; "
            f"RMS error {self.rms_error:.3g} (bound {self.rms_bound:.3g}), "
            f"{self.relative_rms:.3g} of max|ref|"
        )


def compare(out, ref, dtype, kind: str, name: str = "output", tol: Tolerance = None) -> Comparison:
    """Compares ``out`` with the float64 ``ref`` (same number of elements;
    shapes may differ only by length-1 axes, as (C,) versus (1, C, 1, 1))."""
    tol = tol or tolerance(dtype, kind)
    got = np.asarray(out).astype(np.float64)
    expected = np.asarray(ref, dtype=np.float64)
    if got.shape != expected.shape:
        if got.size != expected.size:
            raise ValueError(f"{name}: shape {got.shape} cannot be compared with {expected.shape}")
        expected = expected.reshape(got.shape)
    finite = np.isfinite(expected)
    with np.errstate(invalid="ignore"):
        error = np.where(finite, np.abs(got - expected), 0.0)
        excess = np.where(finite, error - tol.allowed(expected), 0.0)
    # Non-finite output where the reference is finite, or any mismatch where
    # it is not (NaN must stay NaN, inf the same inf).
    wrong_nonfinite = np.where(
        finite, ~np.isfinite(got), ~((np.isnan(got) & np.isnan(expected)) | (got == expected))
    )
    bad = wrong_nonfinite | (excess > 0)
    if wrong_nonfinite.any():
        flat = int(np.flatnonzero(wrong_nonfinite)[0])
    elif got.size:
        flat = int(np.argmax(excess))
    else:
        flat = 0
    index = tuple(int(i) for i in np.unravel_index(flat, got.shape)) if got.size else ()
    finite_error = error[finite & np.isfinite(got)]
    largest = float(np.max(np.abs(expected[finite]))) if finite.any() else 0.0
    rms = float(np.sqrt(np.mean(np.square(finite_error)))) if finite_error.size else 0.0
    return Comparison(
        name=name,
        dtype=dtypes.name_of(dtype),
        kind=kind,
        tolerance=tol,
        bad_count=int(bad.sum()),
        size=int(got.size),
        worst_index=index,
        worst_got=float(got[index]) if got.size else float("nan"),
        worst_expected=float(expected[index]) if got.size else float("nan"),
        max_abs_error=float(finite_error.max()) if finite_error.size else 0.0,
        rms_error=rms,
        max_abs_ref=largest,
    )


def check(out, ref, dtype, kind: str, name: str = "output", tol: Tolerance = None) -> Comparison:
    """``compare``, raising AssertionError with the worst element when it fails."""
    result = compare(out, ref, dtype, kind, name, tol)
    if not result.passed:
        raise AssertionError(result.message())
    return result
