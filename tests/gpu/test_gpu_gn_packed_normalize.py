"""The forward slices' normalize on packed tensors
(native/gpu/gn_packed_normalize.h) on the host emulator of
test_gpu_emulation.py (tests/gpu/emulation/gn_packed_normalize_check.cpp):
y of the real planner's walk against a float64 reference from random
per-slice factors, float32/float16/bfloat16/float64, with and without
swish, NCHW and NHWC, NaN-poisoned outputs, in place bit for bit.  No GPU
is needed, only CUDA's fp16/bf16 headers; a few seconds.
"""
from __future__ import annotations

from test_gpu_emulation import EMULATION, PLANNER, run_wave_checks

SOURCES = [EMULATION / name for name in ("emulator.cpp", "gn_packed_normalize_check.cpp")] + PLANNER


def test_emulated_gn_packed_normalize(tmp_path):
    run_wave_checks(tmp_path, SOURCES, "gn_packed_normalize_check")
