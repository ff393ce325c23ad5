"""Issue 25's batch-norm features through the Python API on every backend
(the CPU in CI, the GPU in device runs), against the float64 reference with
NaN-poisoned outputs: every combination of parameter types (scale/bias and
statistics each float32 or x's type), every fused activation forward and
backward, V3's separate running-statistics buffers and inference from the
inverse std."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from strategies import CHANNELS_LAST, filled, nan_filled
from test_api_coverage import ACTIVATIONS

from miopen_bn import reference
from miopen_bn.tolerances import check

SHAPE = (3, 5, 4, 6)
IO_DTYPES = ("float32", "float16", "bfloat16", "float64")


def _combinations():
    for x_dtype in IO_DTYPES:
        for scale_dtype, stats_dtype in itertools.product(sorted({"float32", x_dtype}), repeat=2):
            yield x_dtype, scale_dtype, stats_dtype


@pytest.mark.parametrize("x_dtype,scale_dtype,stats_dtype", list(_combinations()))
def test_every_parameter_type_combination(backend, rng, x_dtype, scale_dtype, stats_dtype):
    """Scale/bias and statistics each in float32 or x's type (V2, NHWC x)."""
    c = SHAPE[1]
    x = filled(rng.normal(0.5, 1.5, SHAPE), x_dtype, CHANNELS_LAST)
    scale, bias = filled(rng.uniform(0.5, 2, c), scale_dtype), filled(rng.uniform(-1, 1, c), scale_dtype)
    run_mean, run_var = filled(rng.uniform(-1, 1, c), stats_dtype), filled(rng.uniform(0.5, 2, c), stats_dtype)
    before = (run_mean.copy(), run_var.copy())
    saved = (nan_filled((c,), stats_dtype), nan_filled((c,), stats_dtype))
    y, saved_mean, saved_inv = backend.forward_training(
        x, scale, bias, running_mean=run_mean, running_var=run_var, saved_mean=saved[0], saved_inv_var=saved[1]
    )
    expected = reference.batchnorm_forward_training(x, scale, bias, running_mean=before[0], running_var=before[1])
    check(y, expected["y"], x_dtype, "elementwise", "y")
    check(saved_mean, expected["saved_mean"], stats_dtype, "reduction", "saved mean")
    check(saved_inv, expected["saved_inv_var"], stats_dtype, "reduction", "saved inverse std")
    check(run_mean, expected["running_mean"], stats_dtype, "reduction", "running mean")
    check(run_var, expected["running_var"], stats_dtype, "reduction", "running variance")

    y = backend.forward_inference(x, scale, bias, run_mean, run_var)
    check(y, reference.batchnorm_forward_inference(x, scale, bias, run_mean, run_var), x_dtype, "elementwise", "y")

    dy = filled(rng.standard_normal(SHAPE), x_dtype)
    dbias = nan_filled((c,), stats_dtype)  # the bias gradient in the statistics' type: its own descriptor
    dx, dscale, dbias = backend.backward(x, dy, scale, saved_mean=saved_mean, saved_inv_var=saved_inv, dbias=dbias)
    expected = reference.batchnorm_backward(x, dy, scale, saved_mean=saved_mean, saved_inv_var=saved_inv)
    check(dx, expected["dx"], x_dtype, "elementwise", "dx")
    check(dscale, expected["dscale"], scale_dtype, "reduction", "dscale")
    check(dbias, expected["dbias"], stats_dtype, "reduction", "dbias")


def _fused(name):
    return (name,) + ACTIVATIONS[name]


@pytest.mark.parametrize("mode", ["spatial", "per_activation"])
@pytest.mark.parametrize("x_dtype", ["float32", "float16"])
@pytest.mark.parametrize("name", list(ACTIVATIONS))
def test_fused_activation_v3_and_inverse_variance(backend, rng, name, x_dtype, mode):
    pshape = (SHAPE[1],) if mode == "spatial" else SHAPE[1:]
    x = filled(rng.normal(0.3, 1.4, SHAPE), x_dtype, CHANNELS_LAST)
    scale, bias = filled(rng.uniform(0.5, 2, pshape), x_dtype), filled(rng.uniform(-1, 1, pshape), x_dtype)
    run_mean, run_var = filled(rng.uniform(-1, 1, pshape), "float32"), filled(rng.uniform(0.5, 2, pshape), "float32")
    before = (run_mean.copy(), run_var.copy())
    next_mean, next_var = nan_filled(pshape, "float32"), nan_filled(pshape, "float32")
    activation = {"activation": name, "activation_params": ACTIVATIONS[name]}
    y, saved_mean, saved_inv = backend.forward_training(
        x, scale, bias, mode=mode, running_mean=run_mean, running_var=run_var, next_running_mean=next_mean,
        next_running_var=next_var, alpha=0.75, **activation)  # fmt: skip
    expected = reference.batchnorm_forward_training(
        x, scale, bias, mode=mode, running_mean=before[0], running_var=before[1], alpha=0.75,
        fused_activation=_fused(name))  # fmt: skip
    check(y, expected["y"], x_dtype, "elementwise", "y")
    check(next_mean, expected["running_mean"], "float32", "reduction", "next running mean")
    check(next_var, expected["running_var"], "float32", "reduction", "next running variance")
    assert np.array_equal(run_mean, before[0]) and np.array_equal(run_var, before[1]), "V3 wrote the previous"

    y = backend.forward_inference(x, scale, bias, saved_mean, saved_inv, mode=mode, inverse_variance=True, **activation)
    expected = reference.batchnorm_forward_inference(
        x, scale, bias, saved_mean, saved_inv, mode=mode, var_is_inv_std=True, fused_activation=_fused(name)
    )
    check(y, expected, x_dtype, "elementwise", "y (inverse variance)")
    y = backend.forward_inference(x, scale, bias, before[0], before[1], mode=mode, epsilon=1e-3, **activation)
    expected = reference.batchnorm_forward_inference(
        x, scale, bias, before[0], before[1], mode=mode, epsilon=1e-3, fused_activation=_fused(name)
    )
    check(y, expected, x_dtype, "elementwise", "y (estimates)")

    dy = filled(rng.standard_normal(SHAPE), x_dtype)
    for stats in ((saved_mean, saved_inv), (None, None)):
        dx, dscale, dbias = backend.backward(
            x, dy, scale, saved_mean=stats[0], saved_inv_var=stats[1], mode=mode, bias=bias, **activation
        )
        expected = reference.batchnorm_backward(
            x, dy, scale, saved_mean=stats[0], saved_inv_var=stats[1], mode=mode, bias=bias,
            fused_activation=_fused(name))  # fmt: skip
        check(dx, expected["dx"], x_dtype, "elementwise", "dx")
        check(dscale, expected["dscale"], x_dtype, "reduction", "dscale")
        check(dbias, expected["dbias"], x_dtype, "reduction", "dbias")


def test_fused_activation_backward_recomputing_statistics_in_float(backend, rng):
    """NHWC float32 with M >= 256 values a feature: dx in float, statistics
    recomputed for the activation's input.  That call takes the most working
    arrays of any (it once ran out of them: AllocFailed)."""
    shape = (4, 3, 8, 10)
    x = filled(rng.normal(0.3, 1.4, shape), "float32", CHANNELS_LAST)
    dy = filled(rng.standard_normal(shape), "float32", CHANNELS_LAST)
    scale, bias = filled(rng.uniform(0.5, 2, 3), "float32"), filled(rng.uniform(-1, 1, 3), "float32")
    dx, dscale, dbias = backend.backward(x, dy, scale, bias=bias, activation="elu", activation_params=(1.0, 0, 0))
    expected = reference.batchnorm_backward(x, dy, scale, bias=bias, fused_activation=("elu", 1.0, 0.0, 0.0))
    check(dx, expected["dx"], "float32", "elementwise", "dx")
    check(dscale, expected["dscale"], "float32", "reduction", "dscale")
    check(dbias, expected["dbias"], "float32", "reduction", "dbias")
