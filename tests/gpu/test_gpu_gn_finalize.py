"""The slices backward's finalize (native/gpu/gn_backward_finalize.h) on the
host emulator of test_gpu_emulation.py (tests/gpu/emulation/
gn_finalize_check.cpp): each group's two means and each channel's dbias and
dweight from random split sums, for teams of one thread to several waves,
against a long double reference, and nothing written past them.  No GPU is
needed, only CUDA's fp16/bf16 headers; a few seconds.
"""
from __future__ import annotations

import pytest
from test_gpu_emulation import EMULATION, build, run_check

SOURCES = [EMULATION / name for name in ("emulator.cpp", "gn_finalize_check.cpp")]


@pytest.mark.parametrize("wave", (32, 64))
def test_emulated_gn_finalize(tmp_path, wave):
    run_check(build(tmp_path, wave, SOURCES, "gn_finalize_check"))
