"""The slices backward (native/gpu/gn_backward_walks.h: gn_backward_slices,
the finalize, gn_backward_apply) on the host emulator of
test_gpu_emulation.py (tests/gpu/emulation/gn_slices_backward_check.cpp):
dx, dweight and dbias of the real planner's launches against a float64
reference, float32/float16/bfloat16, with and without swish, NCHW and
NHWC, and bitwise-equal reruns.  No GPU is needed, only CUDA's fp16/bf16
headers; a few seconds.
"""
from __future__ import annotations

from test_gpu_emulation import EMULATION, PLANNER, run_wave_checks

SOURCES = [EMULATION / name for name in ("emulator.cpp", "gn_slices_backward_check.cpp")] + PLANNER


def test_emulated_gn_slices_backward(tmp_path):
    run_wave_checks(tmp_path, SOURCES, "gn_slices_backward_check")
