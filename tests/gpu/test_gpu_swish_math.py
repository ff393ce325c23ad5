"""The forward swish's reciprocal on the FMA pipe (native/gpu/gn_activation.h)
on the host (tests/gpu/emulation/swish_check.cpp): its relative error over
every float32 mantissa, its clamp past an overflowed exponential, and the
swish of odd and even lanes against float64.  No GPU is needed, only CUDA's
fp16/bf16 headers; seconds.
"""
from __future__ import annotations

from test_gpu_emulation import EMULATION, build, run_check


def test_swish_reciprocal_on_fma_pipe(tmp_path):
    run_check(build(tmp_path, 32, [EMULATION / "swish_check.cpp"], "swish_check"))
