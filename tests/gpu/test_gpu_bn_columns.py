"""Batch norm's NHWC columns (native/gpu/bn_nhwc_columns_kernel.h) on the host
emulator of test_gpu_emulation.py (tests/gpu/emulation/bn_columns_check.cpp),
for 32- and 64-lane waves: each grid as one cluster so that a column's blocks
hand their sums over through the counters as on the GPU; training and
backward (saved and recomputed statistics), float32, float16 and bfloat16,
every register-row instance, streamed rows, flat folds and trees of teams,
64- and 128-byte columns, blended outputs, in place, float squares that overflow,
against a float64 reference; outputs start as NaN, nothing is written past
them and the counters are back at zero.  Then the planner
(native/gpu/bn_nhwc_columns_plan.h) on an H200 model: the plans its rules give
channels-last shapes of the bench (column width, blocks, register rows,
folds), and none on a device that holds no instance.  No GPU is needed, only
CUDA's fp16/bf16 headers; a few seconds.
"""
from __future__ import annotations

from test_gpu_emulation import EMULATION, run_wave_checks

SOURCES = [EMULATION / name for name in ("emulator.cpp", "bn_columns_check.cpp")]


def test_emulated_nhwc_columns(tmp_path):
    run_wave_checks(tmp_path, SOURCES, "bn_columns_check")
