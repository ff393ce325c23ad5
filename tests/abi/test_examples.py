"""The hipDNN-style samples in examples/: built from the public header as a
user would, run on the CPU backend, every case (fp32/fp16/bf16 I/O, NCHW and
NHWC) validated against the example's own CPU reference."""

import re

import pytest
from support.native_programs import REPO, build_c_program, run_program

from miopen_bn.tolerances import ELEMENTWISE, REDUCTION, Tolerance, tolerance

EXAMPLES = ("bn_inference", "bn_training", "bn_backward")
LINES_PER_CASE = {"bn_inference": ["check  y "],
                  "bn_training": ["check  y ", "check  saved mean", "check  saved inv std", "check  running mean",
                                  "check  running var"],
                  "bn_backward": ["check  dx ", "check  dscale", "check  dbias"]}


@pytest.fixture(scope="module", params=EXAMPLES)
def example(request, tmp_path_factory):
    name = request.param
    return name, build_c_program(REPO / "examples" / f"{name}.c", tmp_path_factory.mktemp("examples") / name)


def test_every_case_validates(example):
    name, binary = example
    result = run_program(binary)
    assert result.returncode == 0, result.stdout + result.stderr
    lines = result.stdout.splitlines()
    assert sum(line.endswith(": PASSED") for line in lines) == 6, result.stdout
    assert lines[-1] == f"{name}: 6 of 6 cases passed"
    assert "[info]" not in result.stdout  # detail only when asked for


def test_info_level_prints_each_step(example):
    name, binary = example
    result = run_program(binary, HIPDNN_LOG_LEVEL="info")
    assert result.returncode == 0, result.stdout + result.stderr
    out = result.stdout
    assert "x      fp16 lengths [3, 5, 6, 7] strides [210, 1, 35, 5]" in out  # NHWC
    assert "x      bf16 lengths [3, 5, 6, 7] strides [210, 42, 7, 1]" in out  # NCHW
    assert "param  fp32 lengths [1, 5, 1, 1]" in out
    for check in LINES_PER_CASE[name]:
        assert out.count(check) == 6, check
    assert "within tolerance 0.016" in out and "within tolerance 0.002" in out


def test_tolerances_are_the_package_table():
    """The samples build from the public header alone, so they restate the
    tolerance table (one value as atol and rtol): it must be the package's,
    python/miopen_bn/tolerances.csv."""
    number = r"([0-9.]+e-[0-9]+)"
    pattern = (rf"type == miopenHalf \? {number} : type == miopenBFloat16 \? {number} : "
               rf"reduction \? {number} : {number};")
    found = re.search(pattern, (REPO / "examples" / "common.h").read_text())
    assert found, "examples/common.h: the tolerance expression of comparison_start() was not found"
    half, bf16, float_reduction, float_elementwise = map(float, found.groups())
    for dtype, kind, value in (("float16", ELEMENTWISE, half), ("float16", REDUCTION, half),
                               ("bfloat16", ELEMENTWISE, bf16), ("bfloat16", REDUCTION, bf16),
                               ("float32", ELEMENTWISE, float_elementwise), ("float32", REDUCTION, float_reduction)):
        assert tolerance(dtype, kind) == Tolerance(value, value), (dtype, kind)
