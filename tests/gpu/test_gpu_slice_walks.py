"""The per-feature walks group norm's slices share with batch norm
(native/gpu/feature_phases.h: block_moments, normalize_share) run on the
host emulator of test_gpu_emulation.py over the row planner's layouts
(tests/gpu/emulation/slice_walk_check.cpp): the linear walk of the packed
layouts against a float64 reference and against the nest cursor, bit for
bit for the normalize, in place too, with chunks that end on partial
groups.  No GPU is needed, only CUDA's fp16/bf16 headers; about a second.
"""
from __future__ import annotations

from support import REPO
from test_gpu_emulation import EMULATION, run_wave_checks

SOURCES = [EMULATION / name for name in ("emulator.cpp", "slice_walk_check.cpp")] + [
    REPO / "native" / "gpu" / "feature_plan.cpp"]


def test_emulated_slice_walks(tmp_path):
    run_wave_checks(tmp_path, SOURCES, "slice_walk_check")
