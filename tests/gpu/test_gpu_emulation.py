"""The on-chip group-norm kernels (native/gpu/gn_tile_*.hip) and batch
norm's wave and channel tiles (native/gpu/bn_wave_tile.hip, bn_wave_tile_nhwc.hip,
bn_channel_tile.hip) run on the host:
tests/gpu/emulation builds them with the host compiler over a fiber emulator
of the GPU (threads, barriers, warp shuffles, thread-block clusters with
their shared memory) and checks every output of the real planner's launches
against a float64 reference, for 32-lane waves with clusters (H100) and
64-lane waves without (AMD CDNA); the group-norm streamed tiles (forward
and backward) on a small GPU's model too.  No GPU is needed, only CUDA's fp16/bf16
headers.  The emulated kernels are stress cases (about two minutes on two
cores for group norm, under one for batch norm): set MIOPEN_BN_STRESS=1.
The tiles' planner check (host only, seconds) runs in every suite.
"""
from __future__ import annotations

import concurrent.futures
import pathlib
import shutil
import subprocess

import pytest
from support import REPO

EMULATION = REPO / "tests" / "gpu" / "emulation"
CUDA_INCLUDES = [pathlib.Path("/usr/local/cuda/include"), pathlib.Path("/usr/include")]
SOURCES = [EMULATION / name for name in ("emulator.cpp", "emu_tile_forward.cpp", "emu_tile_backward.cpp",
                                         "gn_tile_check.cpp")]
PLANNER = [REPO / "native" / "gpu" / name for name in ("gn_planner.cpp", "gn_tile_planner.cpp", "feature_plan.cpp")]
# Batch norm's wave and channel tiles: their planners live in the .hip beside the kernels.
BN_SOURCES = [EMULATION / name for name in ("emulator.cpp", "emu_bn_channel_tile.cpp", "emu_bn_wave_tile.cpp",
                                            "emu_bn_wave_tile_nhwc.cpp",
                                            "bn_tile_check.cpp")]


def cuda_include():
    for path in CUDA_INCLUDES:
        if (path / "cuda_fp16.h").exists() and (path / "cuda_bf16.h").exists():
            return path
    pytest.skip("no CUDA fp16/bf16 headers to build the emulated kernels with")


def tolerance_header(out: pathlib.Path) -> pathlib.Path:
    """miopen_bn_tolerances.h, generated from the one table (tolerances.csv)
    as the C GPU-versus-CPU program's is; returns its folder."""
    cmake = shutil.which("cmake") or pytest.skip("no cmake to generate the tolerance header")
    subprocess.run([cmake, f"-DCSV={REPO / 'python' / 'miopen_bn' / 'tolerances.csv'}",
                    f"-DOUTPUT={out / 'miopen_bn_tolerances.h'}", "-P", str(REPO / "cmake" / "tolerances.cmake")],
                   check=True, capture_output=True, text=True)
    return out


def build(out: pathlib.Path, wave: int, sources=SOURCES + PLANNER, name: str = "gn_tile_check") -> pathlib.Path:
    compiler = shutil.which("g++") or shutil.which("clang++") or pytest.skip("no C++ compiler")
    include = cuda_include()
    generated = tolerance_header(out)
    objects = []
    for source in sources:
        obj = out / f"{source.stem}.o"
        emulated = source.parent == EMULATION
        flags = [f"-I{EMULATION}", f"-I{generated}"] if emulated else []
        subprocess.run([compiler, "-std=c++17", "-O1", f"-DEMU_WAVE_SIZE={wave}", *flags, f"-I{REPO / 'include'}",
                        f"-I{REPO / 'native'}", f"-I{include}", "-c", str(source), "-o", str(obj)],
                       check=True, capture_output=True, text=True)
        objects.append(str(obj))
    binary = out / name
    subprocess.run([compiler, *objects, "-o", str(binary)], check=True, capture_output=True, text=True)
    return binary


def assert_passed(code: int, stdout: str, stderr: str, label: str = "") -> None:
    """A check program passes with exit status 0 and no failures."""
    assert code == 0, label + stdout[-4000:] + stderr[-2000:]
    assert "0 failure(s)" in stdout, label + stdout[-4000:]


def run_check(binary: pathlib.Path, *args: str, timeout: int = 600) -> None:
    """Runs a check program (assert_passed)."""
    result = subprocess.run([str(binary), *args], capture_output=True, text=True, timeout=timeout)
    assert_passed(result.returncode, result.stdout, result.stderr)


WAVES = (32, 64)


def run_wave_checks(tmp_path: pathlib.Path, sources, name: str, *args: str, timeout: int = 600) -> None:
    """Builds a check program for both wave sizes (WAVES) and runs the two,
    side by side (the emulator and the compiler each use one core; the
    suite's machines have two).  Each must pass (assert_passed)."""
    def build_for(wave):
        out = tmp_path / f"wave{wave}"
        out.mkdir()
        return build(out, wave, sources, name)

    with concurrent.futures.ThreadPoolExecutor(len(WAVES)) as pool:
        binaries = list(pool.map(build_for, WAVES))
    runs = [subprocess.Popen([str(b), *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            for b in binaries]
    try:
        results = [(wave, *run.communicate(timeout=timeout), run.returncode) for wave, run in zip(WAVES, runs)]
    finally:
        for run in runs:
            if run.poll() is None:
                run.kill()
    for wave, stdout, stderr, code in results:
        assert_passed(code, stdout, stderr, f"wave {wave}: ")


@pytest.mark.stress
def test_emulated_on_chip_kernels(tmp_path):
    run_wave_checks(tmp_path, SOURCES + PLANNER, "gn_tile_check", "quick", timeout=1200)


def test_tile_plans(tmp_path):
    """The tiles' planner on an H200 model, forward and backward: where the
    register-only clusters take more than one round, the streamed form in
    one; every one-round plan as it was (gn_tile_plans.cpp prints both); the
    backward plans that run long (channels inner, three rounds) and only
    those."""
    sources = [EMULATION / "gn_tile_plans.cpp", REPO / "native" / "gpu" / "gn_tile_planner.cpp",
               REPO / "native" / "gpu" / "feature_plan.cpp"]
    run_check(build(tmp_path, 32, sources, "gn_tile_plans"))


@pytest.mark.stress
def test_emulated_channel_tiles(tmp_path):
    run_wave_checks(tmp_path, BN_SOURCES, "bn_tile_check")
