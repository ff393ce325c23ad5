"""The slices backward's finalize (native/gpu/gn_backward_finalize.h) on the
host emulator of test_gpu_emulation.py (tests/gpu/emulation/
gn_finalize_check.cpp): each group's two means and each channel's dbias and
dweight from random split sums, for teams of one thread to several waves,
against a long double reference, and nothing written past them.  No GPU is
needed, only CUDA's fp16/bf16 headers; a few seconds.
"""
from __future__ import annotations

from test_gpu_emulation import EMULATION, run_wave_checks

SOURCES = [EMULATION / name for name in ("emulator.cpp", "gn_finalize_check.cpp")]


def test_emulated_gn_finalize(tmp_path):
    run_wave_checks(tmp_path, SOURCES, "gn_finalize_check")
