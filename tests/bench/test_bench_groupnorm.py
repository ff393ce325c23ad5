"""The bench's group-norm pieces that run without torch: the op list and its
command line, the bytes each op must move, the cases it plans, and the
sampled verification that runs before anything is timed."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

import miopen_bn
from miopen_bn import reference, tolerances

from support import REPO  # noqa: E402

BENCH = REPO / "bench"
sys.path.insert(0, str(BENCH))

import bench  # noqa: E402
import bench_shapes  # noqa: E402
import bench_verify  # noqa: E402


def test_help_lists_the_group_norm_ops():
    result = subprocess.run([sys.executable, str(BENCH / "bench.py"), "--help"], capture_output=True, text=True,
                            timeout=60, check=True)
    assert "gn_fwd,gn_fwd_swish,gn_bwd" in result.stdout


def test_ops_are_selectable_and_checked():
    assert bench._split("gn_fwd,gn_bwd", bench.OPS, "op") == ["gn_fwd", "gn_bwd"]
    with pytest.raises(SystemExit, match="unknown op 'gn_backward'"):
        bench._split("gn_backward", bench.OPS, "op")


def test_bytes_min_is_two_tensors_forward_three_backward():
    numel, size = 2 * 320 * 64 * 64, 2
    assert bench.bytes_min("gn_fwd", numel, 320, size) == 2 * numel * size
    assert bench.bytes_min("gn_fwd_swish", numel, 320, size) == 2 * numel * size
    assert bench.bytes_min("gn_bwd", numel, 320, size) == 3 * numel * size


def test_group_norm_cases_use_their_own_shapes():
    cases = bench.plan_cases("gpu", False, ["bn_bwd", "gn_fwd", "gn_bwd"], ["fp32"], ["nchw", "nhwc"])
    gn = [(shape, ops) for shape, _, _, ops in cases if ops == ["gn_fwd", "gn_bwd"]]
    bn = [(shape, ops) for shape, _, _, ops in cases if ops == ["bn_bwd"]]
    assert len(gn) + len(bn) == len(cases) and bn and cases[0][3] == ["gn_fwd", "gn_bwd"]  # group norm first
    sd_vae = {(2, 320, 64, 64), (2, 640, 32, 32), (2, 1280, 16, 16), (8, 320, 64, 64),
              (1, 512, 64, 64), (1, 256, 256, 256), (1, 128, 512, 512)}
    unet = {(n, c, hw, hw) for n in (1, 2) for c in (320, 640, 1280) for hw in (64, 32, 16, 8)}
    expected = sd_vae | unet
    assert {shape for shape, _ in gn} == expected and len(expected) == 7 + 24 - 3  # three shapes in both
    assert len(gn) == 2 * len(expected)  # NCHW and NHWC each, no shape twice
    assert all(shape[1] % bench_shapes.GN_GROUPS == 0 for shape in expected)
    only_gn = bench.plan_cases("gpu", True, ["gn_fwd_swish"], ["fp16"], ["nchw"])
    assert [c[0] for c in only_gn] == bench_shapes.group_norm_shapes(quick=True)


def test_group_norm_shape_groups_are_selectable():
    assert bench._parse_gn_shapes("unet") == bench_shapes.UNET_GN_SHAPES
    assert len(bench_shapes.UNET_GN_SHAPES) == 24
    assert bench._parse_gn_shapes("vae,sd") == bench_shapes.VAE_GN_SHAPES + bench_shapes.SD_GN_SHAPES
    assert bench._parse_gn_shapes("2x64x8x8,1x32x4x4") == [(2, 64, 8, 8), (1, 32, 4, 4)]
    assert bench._parse_gn_shapes(None) is None  # the backend's default
    with pytest.raises(SystemExit, match="C must be a multiple of 32"):
        bench._parse_gn_shapes("2x48x8x8")
    cpu = {c[0] for c in bench.plan_cases("cpu", False, ["gn_fwd"], ["fp32"], ["nchw"])}
    assert cpu == set(bench_shapes.SD_GN_SHAPES + bench_shapes.VAE_GN_SHAPES)  # the 2-core run stays short
    cases = bench.plan_cases("gpu", False, ["gn_bwd", "bn_infer"], ["fp16"], ["nhwc"],
                             shapes=[(8, 64, 4, 4)], gn_shapes=bench._parse_gn_shapes("vae"))
    assert [(c[0], c[3]) for c in cases] == [(s, ["gn_bwd"]) for s in bench_shapes.VAE_GN_SHAPES] + [
        ((8, 64, 4, 4), ["bn_infer"])]


def test_sampled_groups_are_whole_and_include_the_last():
    shape, groups = (2, 64, 6, 6), 32
    assert bench_verify.sample_groups(shape, groups, budget=10) == [31]
    picked = bench_verify.sample_groups(shape, groups, budget=4 * 144)
    assert len(picked) == 4 and picked[0] == 0 and picked[-1] == 31
    assert bench_verify.sample_groups(shape, groups, budget=1 << 30) == list(range(32))
    assert bench_verify.group_channels([0, 5], 2) == [0, 1, 10, 11]


def sampled(shape, groups, budget, rng, activation):
    """Our forward and backward on a small problem, cut to the groups the
    bench would check: (inputs, forward outputs, backward outputs)."""
    x = rng.normal(1, 2, shape).astype(np.float32)
    dy = rng.standard_normal(shape).astype(np.float32)
    weight, bias = rng.uniform(0.5, 2, shape[1]).astype(np.float32), rng.uniform(-1, 1, shape[1]).astype(np.float32)
    y, mean, rstd = miopen_bn.groupnorm_forward(x, groups, weight, bias, epsilon=1e-5, activation=activation)
    dx, dweight, dbias = miopen_bn.groupnorm_backward(x, dy, groups, weight, mean, rstd)
    picked = bench_verify.sample_groups(shape, groups, budget)
    ch = bench_verify.group_channels(picked, shape[1] // groups)
    f64 = np.float64
    inputs = dict(x=x[:, ch].astype(f64), dy=dy[:, ch].astype(f64), weight=weight[ch].astype(f64),
                  bias=bias[ch].astype(f64), mean=mean[:, picked].astype(f64), rstd=rstd[:, picked].astype(f64))
    return inputs, y[:, ch].astype(f64), (dx[:, ch].astype(f64), dweight[ch].astype(f64), dbias[ch].astype(f64))


@pytest.mark.parametrize("activation", [None, "swish"])
def test_verification_passes_ours_and_catches_a_wrong_element(rng, activation):
    shape, groups = (2, 64, 6, 6), 32
    i, y, (dx, dweight, dbias) = sampled(shape, groups, 6 * 144, rng, activation)
    assert i["x"].shape[1] == 12  # six whole groups of two channels

    def forward(y_checked):
        return bench_verify.groupnorm_forward_failures(reference, tolerances, i["x"], i["weight"], i["bias"],
                                                       activation, y_checked, i["mean"], i["rstd"], "float32")

    def backward(dx_checked):
        return bench_verify.groupnorm_backward_failures(reference, tolerances, i["x"], i["dy"], i["weight"],
                                                        i["mean"], i["rstd"], dx_checked, dweight, dbias,
                                                        "float32")

    assert forward(y) == [] and backward(dx) == []
    wrong_y, wrong_dx = y.copy(), dx.copy()
    wrong_y[1, -1, 2, 3] += 1e-3
    wrong_dx[0, 0, 0, 0] = np.nan
    assert len(forward(wrong_y)) == 1 and forward(wrong_y)[0].startswith("y (float32")
    assert len(backward(wrong_dx)) == 1 and backward(wrong_dx)[0].startswith("dx (float32")
