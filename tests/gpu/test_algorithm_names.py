"""MIOPEN_BN_GPU_ALGORITHM's names and rules, on the host: no GPU needed.

tests/gpu/algorithm_names_check.cpp includes native/gpu/algorithm_names.hpp
(the table the GPU backend chooses by) and checks that every name parses to
its algorithm for the ops it implements and to nothing for the others, that
unset and empty force nothing, that a changed value is read again, and that
any other value is BadParm naming the variable, the value and every
algorithm.  The GPU side (each algorithm served and refused on real calls)
is tests/gpu/test_gpu_algorithms.py.
"""
from __future__ import annotations

import re
import shutil
import subprocess

import pytest
from support import REPO

OLD_SWITCHES = ("MIOPEN_BN_GPU_RESIDENT", "MIOPEN_BN_GPU_CHANNEL_TILES", "MIOPEN_BN_GPU_WAVE_TILES",
                "MIOPEN_BN_GPU_NHWC_SLABS", "MIOPEN_BN_GPU_SINGLE_LAUNCH", "MIOPEN_BN_GPU_DENSE_INFERENCE",
                "MIOPEN_BN_GN_ONCHIP", "MIOPEN_BN_GPU_THREAD_ELEMENTS", "MIOPEN_BN_GPU_BLOCKS_PER_SM",
                "MIOPEN_BN_GPU_REVERSE_SECOND_PASS")


@pytest.fixture(scope="module")
def check_output(tmp_path_factory):
    compiler = shutil.which("g++") or shutil.which("clang++") or pytest.skip("no C++ compiler")
    binary = tmp_path_factory.mktemp("algorithm_names") / "algorithm_names_check"
    subprocess.run([compiler, "-std=c++17", "-Wall", "-Wextra", "-Werror", f"-I{REPO / 'include'}",
                    f"-I{REPO / 'native'}", str(REPO / "tests" / "gpu" / "algorithm_names_check.cpp"),
                    "-o", str(binary)], check=True, capture_output=True, text=True)
    result = subprocess.run([str(binary)], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stdout + result.stderr
    return result.stdout


def names(output):
    return [line.split()[1] for line in output.splitlines() if line.startswith("algorithm ")]


def test_names_and_rules(check_output):
    assert check_output.strip().endswith("0 failure(s)")
    assert len(names(check_output)) >= 11


def test_readme_documents_every_algorithm(check_output):
    readme = (REPO / "README.md").read_text()
    for name in names(check_output):
        assert f"`{name}`" in readme, f"README.md does not document the GPU algorithm {name}"


def test_the_per_path_switches_are_gone():
    """Nothing reads or documents the variables MIOPEN_BN_GPU_ALGORITHM replaced
    (bench/RESULTS.md keeps the history of the runs that used them)."""
    pattern = re.compile("|".join(OLD_SWITCHES))
    places = [REPO / "README.md", *sorted((REPO / "native").rglob("*.*")), *sorted((REPO / "tests").rglob("*.*")),
              *sorted((REPO / "bench").glob("*.sh")), *sorted((REPO / "bench").glob("*.py"))]
    stale = [str(path.relative_to(REPO)) for path in places
             if path.is_file() and path.suffix in {".md", ".hpp", ".h", ".hip", ".cpp", ".c", ".py", ".sh"}
             and path.name != "test_algorithm_names.py" and pattern.search(path.read_text(errors="replace"))]
    assert not stale, f"still naming a removed variable: {stale}"


def test_cpu_handles_ignore_the_variable(monkeypatch):
    """The variable belongs to the GPU backend: a CPU handle neither reads nor
    refuses it, even when it names nothing."""
    import numpy as np

    import miopen_bn as mbn

    x = np.random.default_rng(5).standard_normal((2, 3, 4, 5)).astype(np.float32)
    scale, bias = np.ones(3, np.float32), np.zeros(3, np.float32)
    with mbn.Handle(backend="cpu") as handle:
        expected = mbn.batchnorm_forward_training(x, scale, bias, handle=handle)[0]
        for value in ("resident", "no_such_algorithm"):
            monkeypatch.setenv("MIOPEN_BN_GPU_ALGORITHM", value)
            np.testing.assert_array_equal(mbn.batchnorm_forward_training(x, scale, bias, handle=handle)[0], expected)
            y = mbn.groupnorm_forward(x, 3, None, None, handle=handle)[0]
            assert np.isfinite(y).all()
