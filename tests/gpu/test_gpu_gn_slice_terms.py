"""The forward slices' group terms (native/gpu/gn_slice_terms.h) on the host
emulator of test_gpu_emulation.py (tests/gpu/emulation/
gn_slice_terms_check.cpp): each group's mean and rstd and each slice's
normalize factors from random partials, for the planner's blocks and for
one wave, three and the most threads, against a long double merge of the
same partials, and nothing written past them.  No GPU is needed, only
CUDA's fp16/bf16 headers; a few seconds.
"""
from __future__ import annotations

from support import REPO
from test_gpu_emulation import EMULATION, run_wave_checks

SOURCES = [EMULATION / name for name in ("emulator.cpp", "gn_slice_terms_check.cpp")] + [
    REPO / "native" / "gpu" / name for name in ("gn_planner.cpp", "gn_tile_planner.cpp", "feature_plan.cpp")]


def test_emulated_gn_slice_terms(tmp_path):
    run_wave_checks(tmp_path, SOURCES, "gn_slice_terms_check")
