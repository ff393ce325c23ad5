"""gn_persistent's kernels (native/gpu/gn_persistent_forward.h and
gn_persistent_backward.h) on the host
emulator of test_gpu_emulation.py (tests/gpu/emulation/gn_persistent_check.cpp,
gn_persistent_backward_check.cpp):
the grid as one cluster, the walk of the real planner on a small device
model (slots in registers, shared memory and streamed), y, mean and rstd
(forward) and dx, dweight and dbias (backward) against float64, float32/float16/bfloat16, NCHW and NHWC, with and without
swish, with and without weights, NaN-poisoned outputs, in place bit for bit,
and the planner's refusals.  No GPU is needed, only CUDA's fp16/bf16
headers.
"""
from __future__ import annotations

from test_gpu_emulation import EMULATION, REPO, run_wave_checks

SOURCES = [EMULATION / name for name in ("emulator.cpp", "gn_persistent_check.cpp")] + [
    REPO / "native" / "gpu" / "gn_persistent_planner.cpp"]


def test_emulated_gn_persistent(tmp_path):
    run_wave_checks(tmp_path, SOURCES, "gn_persistent_check")


BACKWARD_SOURCES = [EMULATION / name for name in ("emulator.cpp", "gn_persistent_backward_check.cpp")] + [
    REPO / "native" / "gpu" / "gn_persistent_planner.cpp"]


def test_emulated_gn_persistent_backward(tmp_path):
    run_wave_checks(tmp_path, BACKWARD_SOURCES, "gn_persistent_backward_check")
