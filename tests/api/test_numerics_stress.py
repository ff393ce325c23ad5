"""Numerics stress beyond docs/numerics.md#values, on every backend (the ``backend``
fixture): reductions of 2^24 to 2^26 values per statistic, float32 inputs
near 1e30, zero-variance channels with epsilon = 0, and variances in the
subnormal range.  The documented outcomes (docs/numerics.md#limits) are what
these tests pin down, non-finite values included: check() demands NaN and
inf exactly where the float64 reference has them."""

from __future__ import annotations

import numpy as np
import pytest

from miopen_bn import reference
from miopen_bn.tolerances import ELEMENTWISE, REDUCTION, Tolerance, check, tolerance

MODES = ("spatial", "per_activation")
FLOAT16_SUBNORMAL_STEP = 2.0**-24


def params_for(shape, mode, rng, dtype=np.float32):
    pshape = (shape[1],) if mode == "spatial" else tuple(shape[1:])
    return rng.uniform(0.5, 2, pshape).astype(dtype), rng.uniform(-1, 1, pshape).astype(dtype)


def standardized(rng, shape, mode):
    """Noise with mean 0 and std 1 exactly over each statistic's values."""
    axes = reference.reduction_axes(len(shape), mode)
    noise = rng.standard_normal(shape)
    return (noise - noise.mean(axis=axes, keepdims=True)) / noise.std(axis=axes, keepdims=True)


def check_all(backend, x, mode, rng, epsilon=1e-5, param_dtype=np.float32, running_tol=None):
    """Training (with running statistics, factor 1: they become the batch's),
    then backward from the saved statistics, against the reference; returns
    the outputs for further assertions."""
    scale, bias = params_for(x.shape, mode, rng, param_dtype)
    running_mean, running_var = np.zeros_like(scale), np.ones_like(scale)
    y, mean, inv_std = backend.forward_training(
        x, scale, bias, mode=mode, epsilon=epsilon, exp_avg_factor=1.0,
        running_mean=running_mean, running_var=running_var,
    )
    ref = reference.batchnorm_forward_training(
        x, scale, bias, mode=mode, epsilon=epsilon, exp_avg_factor=1.0,
        running_mean=np.zeros_like(scale), running_var=np.ones_like(scale),
    )
    check(y, ref["y"], x.dtype, ELEMENTWISE, "y")
    check(mean, ref["saved_mean"], param_dtype, REDUCTION, "saved mean")
    check(inv_std, ref["saved_inv_std"], param_dtype, REDUCTION, "saved inverse std")
    check(running_mean, ref["running_mean"], param_dtype, REDUCTION, "running mean")
    # Rounded to the parameter type first: a variance beyond it is its +inf.
    with np.errstate(over="ignore"):
        expected_var = np.asarray(ref["running_var"]).astype(param_dtype)
    check(running_var, expected_var, param_dtype, REDUCTION, "running variance", tol=running_tol)
    dy = rng.standard_normal(x.shape).astype(x.dtype)
    dx, dscale, dbias = backend.backward(x, dy, scale, mode=mode, saved_mean=mean, saved_inv_std=inv_std)
    grads = reference.batchnorm_backward(x, dy, scale, mode=mode, saved_mean=mean, saved_inv_std=inv_std)
    check(dx, grads["dx"], x.dtype, ELEMENTWISE, "dx")
    check(dscale, grads["dscale"], param_dtype, REDUCTION, "dscale")
    check(dbias, grads["dbias"], param_dtype, REDUCTION, "dbias")
    return {"y": y, "mean": mean, "inv_std": inv_std, "running_var": running_var, "dx": dx}


# --------------------------------------------------------------------------- #
# Reductions of 2^24 to 2^26 values per statistic
# --------------------------------------------------------------------------- #
HUGE_REDUCTIONS = [
    # shape, mode, dtype, layout; the id says how many values each statistic has
    pytest.param((2**24, 1), "per_activation", np.float32, "packed", id="2^24 per activation, fp32 (N, C)"),
    pytest.param(
        (1, 2, 4096, 4096), "spatial", np.float16, "channels_last", id="2^24 per channel, fp16 NHWC",
        marks=pytest.mark.stress,
    ),
    pytest.param(
        (2, 2, 4096, 4096), "spatial", np.float16, "channels_last", id="2^25 per channel, fp16 NHWC",
        marks=pytest.mark.stress,
    ),
    pytest.param(
        (1, 1, 8192, 8192), "spatial", np.float32, "packed", id="2^26 per channel, fp32 NCHW",
        marks=pytest.mark.stress,
    ),
]


@pytest.mark.slow
@pytest.mark.parametrize("shape, mode, dtype, layout", HUGE_REDUCTIONS)
def test_huge_reductions(backend, rng, shape, mode, dtype, layout):
    """Counts past 2^24 defeat float32 counters and naive float sums; the
    mean sits at 3 so a lost increment shows in the statistics.  Every run
    has the per-activation case here and test_numerics.py's 2^24 + 4096
    channel; the others (2^24 to 2^26 per channel, 20 s to a minute of host
    reference each on 2 cores) run with MIOPEN_BN_STRESS=1."""
    x = (3.0 + standardized(rng, shape, mode)).astype(dtype)
    if layout == "channels_last":
        x = np.ascontiguousarray(np.moveaxis(x, 1, -1)).transpose(0, 3, 1, 2)
    check_all(backend, x, mode, rng)


# --------------------------------------------------------------------------- #
# float32 inputs near 1e30
# --------------------------------------------------------------------------- #
@pytest.mark.parametrize("mode", MODES)
def test_float32_inputs_near_1e30(backend, rng, mode):
    """Deviations of 1e29 square to 1e58, beyond float32: statistics must be
    taken wider.  Every output is finite and accurate, except the running
    variance: 1e58 does not fit float32 and is stored as +inf (documented);
    no NaN from inf - inf anywhere."""
    shape = (16, 3, 5, 5)
    x = (1e30 + 1e29 * standardized(rng, shape, mode)).astype(np.float32)
    out = check_all(backend, x, mode, rng)
    assert np.isposinf(out["running_var"]).all()
    assert all(np.isfinite(out[name]).all() for name in ("y", "mean", "inv_std", "dx"))


# --------------------------------------------------------------------------- #
# Zero-variance channels with epsilon = 0
# --------------------------------------------------------------------------- #
@pytest.mark.parametrize("mode", MODES)
def test_zero_variance_with_zero_epsilon(backend, rng, mode):
    """A constant channel (feature) with epsilon 0 has 1/sqrt(0) = +inf as its
    inverse std, and y = scale * 0 * inf + bias = NaN there (as in IEEE
    arithmetic and PyTorch); every other channel is unaffected, and the
    running statistics stay finite (the value, and a variance of 0).
    Backward through it gives NaN dx and dscale on that channel, dbias stays
    the plain sum of dy."""
    shape = (8, 3, 4, 5)
    x = standardized(rng, shape, mode).astype(np.float32)
    x[:, 1] = 2.5
    out = check_all(backend, x, mode, rng, epsilon=0.0)
    constant = (slice(None), 1)
    assert np.isnan(out["y"][constant]).all() and np.isnan(out["dx"][constant]).all()
    assert np.isfinite(np.delete(out["y"], 1, axis=1)).all()
    assert np.isposinf(out["inv_std"].reshape(3, -1)[1]).all()
    assert (out["running_var"].reshape(3, -1)[1] == 0).all()
    # Inference with a zero variance estimate: +-inf off the mean, NaN on it.
    scale, bias = params_for(shape, mode, rng)
    mean, var = np.full_like(scale, 2.5), np.zeros_like(scale)
    y = backend.forward_inference(x, scale, bias, mean, var, mode=mode, epsilon=0.0)
    check(y, reference.batchnorm_forward_inference(x, scale, bias, mean, var, mode=mode, epsilon=0.0),
          "float32", ELEMENTWISE, "inference y")


# --------------------------------------------------------------------------- #
# Subnormal variances
# --------------------------------------------------------------------------- #
@pytest.mark.parametrize("mode", MODES)
def test_float32_variance_in_the_subnormal_range(backend, rng, mode):
    """std 1e-20: the variance, 1e-40, is a float32 subnormal.  With epsilon 0
    it is all that scales y, so it must be found to float32 accuracy, and the
    running variance keeps it (not flushed to 0): checked here relative to
    its size, without the table's absolute floor."""
    x = (1e-19 + 1e-20 * standardized(rng, (16, 3, 4, 4), mode)).astype(np.float32)
    table = tolerance(np.float32, REDUCTION)
    out = check_all(backend, x, mode, rng, epsilon=0.0, running_tol=Tolerance(0.0, table.rtol))
    assert (out["running_var"] > 0).all() and (out["running_var"] < np.finfo(np.float32).tiny).all()


@pytest.mark.parametrize("mode", MODES)
def test_float16_variance_in_the_subnormal_range(backend, rng, mode):
    """std 1e-3 in float16 with float16 parameters: the variance, 1e-6, is a
    float16 subnormal; the running variance holds it to within one subnormal
    step (the table's absolute floor of 2e-3 would accept 0)."""
    x = (0.01 + 1e-3 * standardized(rng, (32, 3, 4, 4), mode)).astype(np.float16)
    table = tolerance(np.float16, REDUCTION)
    out = check_all(
        backend, x, mode, rng, epsilon=0.0, param_dtype=np.float16,
        running_tol=Tolerance(FLOAT16_SUBNORMAL_STEP, table.rtol),
    )
    assert (out["running_var"] > 0).all() and (out["running_var"] < np.finfo(np.float16).tiny).all()


@pytest.mark.parametrize("mode", MODES)
def test_subnormal_inputs(backend, rng, mode):
    """Inputs that are themselves float32 subnormals (|x| < 1.2e-38): with
    epsilon 1e-5 the variance is negligible and y is the bias, accurately.
    With epsilon 0 the inverse std (~1e40) exceeds float32: the saved
    inverse std is +inf (documented; y, computed in float32, is not reliable
    there: docs/numerics.md#limits)."""
    shape = (8, 3, 4, 4)
    x = (1e-40 * standardized(rng, shape, mode)).astype(np.float32)
    assert (np.abs(x[x != 0]) < np.finfo(np.float32).tiny).all()
    check_all(backend, x, mode, rng, epsilon=1e-5)
    scale, bias = params_for(shape, mode, rng)
    _, _, inv_std = backend.forward_training(x, scale, bias, mode=mode, epsilon=0.0)
    assert np.isposinf(inv_std).all()


# --------------------------------------------------------------------------- #
# One value per statistic
# --------------------------------------------------------------------------- #
@pytest.mark.parametrize("shape, mode", [((1, 5, 1, 1), "spatial"), ((1, 3, 4, 5), "per_activation"),
                                         ((1, 7), "spatial")])
def test_one_value_per_statistic(backend, rng, shape, mode):
    """N*D*H*W = 1 (spatially) or N = 1 (per activation): training is refused
    (no variance to take), but inference with the batch's own statistics
    gives the bias exactly (x - mean = 0, var = 0, epsilon > 0), with
    estimates it normalizes as usual, and backward gives dx = 0, dscale = 0,
    dbias = dy."""
    x = rng.standard_normal(shape).astype(np.float32)
    scale, bias = params_for(shape, mode, rng)
    y = backend.forward_inference(x, scale, bias, mode=mode)
    np.testing.assert_array_equal(y, bias.reshape(y.shape))
    mean = rng.uniform(-1, 1, scale.shape).astype(np.float32)
    var = rng.uniform(0.5, 2, scale.shape).astype(np.float32)
    y = backend.forward_inference(x, scale, bias, mean, var, mode=mode)
    expected = reference.batchnorm_forward_inference(x, scale, bias, mean, var, mode=mode)
    check(y, expected, "float32", ELEMENTWISE, "y")
    dy = rng.standard_normal(shape).astype(np.float32)
    dx, dscale, dbias = backend.backward(x, dy, scale, mode=mode)
    grads = reference.batchnorm_backward(x, dy, scale, mode=mode)
    check(dx, grads["dx"], "float32", ELEMENTWISE, "dx")
    check(dscale, grads["dscale"], "float32", REDUCTION, "dscale")
    check(dbias, dy.reshape(dbias.shape), "float32", REDUCTION, "dbias")
    with pytest.raises(ValueError, match="more than one value"):
        backend.forward_training(x, scale, bias, mode=mode)
