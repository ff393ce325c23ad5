"""The numerics cases of docs/numerics.md#values, where a naive implementation goes wrong, on
every backend (the ``backend`` fixture: the CPU here, the GPU in device runs)."""

from __future__ import annotations

import numpy as np
import pytest

from miopen_bn import reference
from miopen_bn.arrays import in_memory_order
from miopen_bn.tolerances import check

MODES = ("spatial", "per_activation")


def params_for(x, mode, rng):
    shape = (x.shape[1],) if mode == "spatial" else x.shape[1:]
    return rng.uniform(0.5, 2, shape).astype(np.float32), rng.uniform(-1, 1, shape).astype(np.float32)


def check_training(backend, x, scale, bias, mode, dtype="float32", **kwargs):
    y, mean, inv_std = backend.forward_training(x, scale, bias, mode=mode, **kwargs)
    expected = reference.batchnorm_forward_training(x, scale, bias, mode=mode)
    check(y, expected["y"], dtype, "elementwise", "y")
    check(mean, expected["saved_mean"], mean.dtype, "reduction", "saved_mean")
    check(inv_std, expected["saved_inv_std"], inv_std.dtype, "reduction", "saved_inv_std")
    return y, mean, inv_std


# Small shapes, and shapes whose reductions are long enough (M >= 256) for
# the backward to work in float rather than double: on the GPU in the
# multi-launch kernels (a center split in two floats), on the CPU in the row
# kernels, which channels-last spatial and packed per-activation data take
# (the mean rounded to float, the rest folded into a coefficient).
NHWC = (0, 2, 3, 1)
LARGE_MEAN_SHAPES = [
    pytest.param("spatial", (64, 4, 6, 6), None, id="spatial-small"),
    pytest.param("per_activation", (64, 4, 6, 6), None, id="per_activation-small"),
    pytest.param("spatial", (64, 4, 64, 64), None, id="spatial-long", marks=pytest.mark.slow),
    pytest.param("spatial", (64, 4, 6, 6), NHWC, id="spatial-long-nhwc"),
    pytest.param("per_activation", (512, 4, 8, 8), None, id="per_activation-long"),
]


@pytest.mark.parametrize("mode, shape, order", LARGE_MEAN_SHAPES)
def test_large_mean_small_std(backend, rng, mode, shape, order):
    """mean 1e4, std 1e-2: E[x^2] - mean^2 in float32 would lose every digit,
    and so would x - mean with the mean rounded to float32 (6e-4 off)."""

    def normal():  # laid out in memory in `order` (None: as given)
        return in_memory_order(rng.standard_normal, shape, order or range(len(shape)))

    x = (1e4 + 1e-2 * normal()).astype(np.float32)
    scale, bias = params_for(x, mode, rng)
    _, _, inv_std = check_training(backend, x, scale, bias, mode)
    assert np.all(inv_std > 50)  # var ~ 1e-4 was found, not 0 or garbage
    dy = normal().astype(np.float32)
    dx, dscale, dbias = backend.backward(x, dy, scale, mode=mode)
    grads = reference.batchnorm_backward(x, dy, scale, mode=mode)
    check(dx, grads["dx"], "float32", "elementwise", "dx (statistics recomputed)")
    check(dscale, grads["dscale"], "float32", "reduction", "dscale")


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_constant_channel_gives_bias_exactly(backend, rng, mode, dtype):
    x = rng.standard_normal((16, 3, 5, 7)).astype(dtype)
    x[:, 1] = 1e7
    scale, bias = params_for(x, mode, rng)
    y, mean, _ = backend.forward_training(x, scale, bias, mode=mode)
    expected_bias = np.broadcast_to(bias[1] if mode == "spatial" else bias[1][None], y[:, 1].shape)
    np.testing.assert_array_equal(y[:, 1], expected_bias.astype(dtype))
    np.testing.assert_array_equal(mean.reshape(3, -1)[1], 1e7)
    y_inference = backend.forward_inference(x, scale, bias, mode=mode)
    np.testing.assert_array_equal(y_inference[:, 1], expected_bias.astype(dtype))


@pytest.mark.parametrize("mode", MODES)
def test_float16_beyond_256(backend, rng, mode):
    """|x| > 256 in float16: sums and squares overflow a half accumulator."""
    x = (rng.uniform(300, 3000, (1, 4, 1, 1)) + 40 * rng.standard_normal((32, 4, 16, 16))).astype(np.float16)
    assert np.abs(x).min() > 256
    scale, bias = params_for(x, mode, rng)
    check_training(backend, x, scale, bias, mode, dtype="float16")
    half_scale, half_bias = scale.astype(np.float16), bias.astype(np.float16)
    check_training(backend, x, half_scale, half_bias, mode, dtype="float16")


@pytest.mark.slow
def test_reduction_over_2_to_the_24_values(backend, rng):
    """One channel of 2^24 + 4096 values: float32 counts and naive sums stall there."""
    x = 3.0 + rng.standard_normal((1, 1, 4096, 4097), dtype=np.float32)
    scale, bias = np.ones(1, np.float32), np.zeros(1, np.float32)
    running_mean, running_var = np.zeros(1, np.float32), np.ones(1, np.float32)
    check_training(
        backend, x, scale, bias, "spatial", running_mean=running_mean, running_var=running_var, exp_avg_factor=1.0
    )
    expected_mean, expected_var = reference.batch_statistics(x, "spatial")
    m = x.size
    check(running_mean, expected_mean, "float32", "reduction", "running mean")
    check(running_var, expected_var * m / (m - 1), "float32", "reduction", "running var")


@pytest.mark.parametrize("mode", MODES)
def test_one_nan_poisons_one_channel_only(backend, rng, mode):
    x = rng.standard_normal((6, 4, 3, 5)).astype(np.float32)
    x[2, 1, 1, 3] = np.nan
    scale, bias = params_for(x, mode, rng)
    running_mean, running_var = np.zeros_like(scale), np.ones_like(scale)
    y, mean, inv_std = backend.forward_training(
        x, scale, bias, mode=mode, running_mean=running_mean, running_var=running_var
    )
    expected = reference.batchnorm_forward_training(
        x, scale, bias, mode=mode, running_mean=np.zeros_like(scale), running_var=np.ones_like(scale)
    )
    # check() demands NaN exactly where the reference has it, finite values elsewhere.
    check(y, expected["y"], "float32", "elementwise", "y")
    check(mean, expected["saved_mean"], "float32", "reduction", "saved_mean")
    check(running_var, expected["running_var"], "float32", "reduction", "running_var")
    poisoned = np.isnan(y)
    if mode == "spatial":
        assert poisoned[:, 1].all() and not poisoned[:, [0, 2, 3]].any()
    else:
        assert poisoned[:, 1, 1, 3].all() and poisoned.sum() == x.shape[0]
    dy = rng.standard_normal(x.shape).astype(np.float32)
    dx, dscale, _ = backend.backward(x, dy, scale, mode=mode)
    grads = reference.batchnorm_backward(x, dy, scale, mode=mode)
    check(dx, grads["dx"], "float32", "elementwise", "dx")
    check(dscale, grads["dscale"], "float32", "reduction", "dscale")


def test_negative_variance_gives_nan_not_fabs(backend, rng):
    """Inference takes sqrt(var + eps) as is (deviation from MIOpen's fabs)."""
    x = rng.standard_normal((4, 2, 3, 3)).astype(np.float32)
    var = np.array([1.0, -0.5], np.float32)
    y = backend.forward_inference(x, np.ones(2, np.float32), np.zeros(2, np.float32), np.zeros(2, np.float32), var)
    assert np.isnan(y[:, 1]).all() and np.isfinite(y[:, 0]).all()


def test_nan_prior_does_not_leak_when_beta_is_zero(backend, rng):
    x = rng.standard_normal((4, 2, 3, 3)).astype(np.float32)
    y = np.full_like(x, np.nan)
    y, _, _ = backend.forward_training(x, np.ones(2, np.float32), np.zeros(2, np.float32), y=y, beta=0.0)
    assert np.isfinite(y).all()
