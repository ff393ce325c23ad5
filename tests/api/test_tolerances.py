"""The one tolerance table and its check()."""

from __future__ import annotations

import re
import shutil
import subprocess

import numpy as np
import pytest
from support import REPO

from miopen_bn import dtypes, tolerances
from miopen_bn.cdef import enum_value
from miopen_bn.tolerances import check, compare, tolerance

GENERATOR = REPO / "cmake" / "tolerances.cmake"


def test_table_values():
    assert tolerance("float32", "elementwise").atol == 1e-5
    assert tolerance("float32", "reduction").rtol == 1e-4
    assert tolerance("float16", "elementwise").rtol == 2e-3
    assert tolerance("bfloat16", "reduction").atol == 1.6e-2
    assert tolerance(np.float64, "elementwise").atol == 1e-12
    with pytest.raises(ValueError):
        tolerance("float32", "other")
    with pytest.raises(TypeError):
        tolerance("int8", "elementwise")


def test_per_element_bound_is_atol_plus_rtol_times_ref():
    ref = np.array([0.0, 100.0])
    assert compare(ref + [0.9e-5, 100 * 1e-5], ref, "float32", "elementwise").passed
    result = compare(ref + [0.0, 100 * 1.2e-5], ref, "float32", "elementwise", "y")
    assert not result.passed and result.worst_index == (1,) and result.bad_count == 1


def test_failure_message_names_the_worst_index():
    ref = np.zeros((2, 3))
    out = ref.copy()
    out[1, 2] = 1.0
    out[0, 1] = 0.5
    with pytest.raises(AssertionError, match=r"y \(float32.*1 of 6|2 of 6.*index \(1, 2\)"):
        check(out, ref, "float32", "elementwise", "y")


def test_nan_where_reference_is_finite_fails():
    ref = np.ones(4)
    out = ref.copy()
    out[2] = np.nan
    result = compare(out, ref, "float32", "elementwise")
    assert not result.passed and result.worst_index == (2,)


def test_nan_must_stay_nan():
    ref = np.array([1.0, np.nan])
    assert compare(np.array([1.0, np.nan]), ref, "float32", "elementwise").passed
    assert not compare(np.array([1.0, 0.0]), ref, "float32", "elementwise").passed
    assert compare(np.array([np.inf]), np.array([np.inf]), "float32", "elementwise").passed
    assert not compare(np.array([-np.inf]), np.array([np.inf]), "float32", "elementwise").passed


def test_rms_bound_catches_a_systematic_error_under_the_element_bound(rng):
    ref = np.linspace(-1, 1, 1000)
    tol = tolerances.Tolerance(atol=1e-3, rtol=1e-3)  # per element: up to 1e-3 + 1e-3 |ref|
    scattered = rng.uniform(-1e-3, 1e-3, ref.shape)
    assert compare(ref + scattered, ref, "float32", "elementwise", tol=tol).passed
    near_bound = 0.9 * tol.allowed(ref)
    biased = compare(ref + near_bound, ref, "float32", "elementwise", tol=tol)
    assert biased.bad_count == 0 and not biased.passed
    few = compare(ref[:4] + near_bound[:4], ref[:4], "float32", "elementwise", tol=tol)
    assert few.passed  # too few elements to call it systematic


def test_shapes_differing_by_unit_axes_compare():
    assert compare(np.ones(3), np.ones((1, 3, 1, 1)), "float32", "reduction").passed
    with pytest.raises(ValueError, match="cannot be compared"):
        compare(np.ones(3), np.ones(4), "float32", "reduction")


def test_low_precision_outputs_are_widened(rng):
    ref = rng.standard_normal(100)
    assert compare(ref.astype(np.float16), ref, "float16", "elementwise").passed
    from miopen_bn.dtypes import bfloat16

    assert compare(ref.astype(bfloat16), ref, "bfloat16", "elementwise").passed
    assert not compare(ref.astype(bfloat16), ref, "float16", "elementwise").passed


def test_table_file_must_hold_each_row_once(tmp_path):
    text = tolerances.TABLE_PATH.read_text()
    assert tolerances.read_table(tolerances.TABLE_PATH) == tolerances.TOLERANCES
    missing = tmp_path / "missing.csv"
    missing.write_text(text.replace("float64,reduction,1e-12,1e-12\n", ""))
    with pytest.raises(ValueError, match="one row of each kind"):
        tolerances.read_table(missing)
    repeated = tmp_path / "repeated.csv"
    repeated.write_text(text + "float32,reduction,1,1\n")
    with pytest.raises(ValueError, match="repeated row float32,reduction"):
        tolerances.read_table(repeated)


@pytest.mark.skipif(shutil.which("cmake") is None or not GENERATOR.exists(), reason="needs cmake and the source tree")
def test_c_header_holds_the_same_table(tmp_path):
    """The header the C test programs include is generated from the same CSV
    (cmake/tolerances.cmake): its rows are the package's table."""
    header = tmp_path / "miopen_bn_tolerances.h"
    subprocess.run(
        ["cmake", f"-DCSV={tolerances.TABLE_PATH}", f"-DOUTPUT={header}", "-P", str(GENERATOR)],
        check=True, capture_output=True,
    )
    rows = re.findall(r"\{(miopen\w+), ([01]), ([-+.eE0-9]+), ([-+.eE0-9]+)\}", header.read_text())
    generated = {
        (dtypes.NAME_FOR_MIOPEN_CODE[enum_value(type_name)], tolerances.KINDS[int(kind)]): (float(a), float(r))
        for type_name, kind, a, r in rows
    }
    expected = {
        (dtype, kind): (tol.atol, tol.rtol) for dtype, kinds in tolerances.TOLERANCES.items() for kind, tol in kinds.items()
    }
    assert len(rows) == len(expected) and generated == expected
