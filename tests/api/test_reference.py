"""The oracle itself, checked against explicit loops written straight from
docs/conventions.md's formulas (and, where installed, PyTorch's batch norm)."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from miopen_bn import reference


def loop_statistics(x, mode):
    """Mean and biased variance per feature, one feature at a time."""
    n, c = x.shape[:2]
    spatial = x.shape[2:]
    means, variances = {}, {}
    features = (
        [(ch,) for ch in range(c)]
        if mode == "spatial"
        else [(ch,) + pos for ch in range(c) for pos in itertools.product(*map(range, spatial))]
    )
    for feature in features:
        if mode == "spatial":
            values = [
                x[(i, feature[0]) + pos] for i in range(n) for pos in itertools.product(*map(range, spatial))
            ]
        else:
            values = [x[(i,) + feature] for i in range(n)]
        mean = sum(values) / len(values)
        means[feature] = mean
        variances[feature] = sum((v - mean) ** 2 for v in values) / len(values)
    return means, variances, len(values)


def feature_of(index, mode):
    return (index[1],) if mode == "spatial" else index[1:]


def param_at(p, feature, x_shape, mode):
    return np.asarray(p, np.float64).reshape(reference.param_shape(x_shape, mode))[
        (0,) + ((feature[0],) + (0,) * (len(x_shape) - 2) if mode == "spatial" else feature)
    ]


@pytest.mark.parametrize("mode", ["spatial", "per_activation"])
@pytest.mark.parametrize("shape", [(3, 2), (2, 3, 4), (3, 2, 2, 3), (2, 2, 1, 2, 3)])
def test_training_matches_the_formulas(rng, mode, shape):
    x = rng.normal(1, 2, shape)
    pshape = reference.param_shape(shape, mode)
    scale, bias = rng.uniform(0.5, 2, pshape), rng.uniform(-1, 1, pshape)
    run_mean, run_var = rng.standard_normal(pshape), rng.uniform(0.5, 2, pshape)
    eps, f = 1e-3, 0.3
    out = reference.batchnorm_forward_training(
        x, scale, bias, mode=mode, epsilon=eps, exp_avg_factor=f, running_mean=run_mean, running_var=run_var
    )
    means, variances, m = loop_statistics(x, mode)
    for index in np.ndindex(*shape):
        feature = feature_of(index, mode)
        inv_std = 1 / np.sqrt(variances[feature] + eps)
        expected = param_at(scale, feature, shape, mode) * (x[index] - means[feature]) * inv_std + param_at(
            bias, feature, shape, mode
        )
        assert out["y"][index] == pytest.approx(expected, rel=1e-12, abs=1e-12)
    for feature, mean in means.items():

        def at(p, feature=feature):
            return param_at(p, feature, shape, mode)

        assert at(out["saved_mean"]) == pytest.approx(mean, rel=1e-12, abs=1e-14)
        assert at(out["saved_inv_std"]) == pytest.approx(1 / np.sqrt(variances[feature] + eps), rel=1e-12)
        assert at(out["running_mean"]) == pytest.approx((1 - f) * at(run_mean) + f * mean, rel=1e-12)
        unbiased = variances[feature] * m / (m - 1)
        assert at(out["running_var"]) == pytest.approx((1 - f) * at(run_var) + f * unbiased, rel=1e-12)


@pytest.mark.parametrize("mode", ["spatial", "per_activation"])
def test_backward_matches_the_formulas(rng, mode):
    shape = (3, 2, 2, 3)
    x, dy = rng.normal(1, 2, shape), rng.standard_normal(shape)
    pshape = reference.param_shape(shape, mode)
    scale = rng.uniform(0.5, 2, pshape)
    out = reference.batchnorm_backward(x, dy, scale, mode=mode, epsilon=1e-3)
    means, variances, m = loop_statistics(x, mode)
    dbias, dscale = {}, {}
    for index in np.ndindex(*shape):
        feature = feature_of(index, mode)
        xhat = (x[index] - means[feature]) / np.sqrt(variances[feature] + 1e-3)
        dbias[feature] = dbias.get(feature, 0.0) + dy[index]
        dscale[feature] = dscale.get(feature, 0.0) + dy[index] * xhat
    for index in np.ndindex(*shape):
        feature = feature_of(index, mode)
        inv_std = 1 / np.sqrt(variances[feature] + 1e-3)
        xhat = (x[index] - means[feature]) * inv_std
        expected = (
            param_at(scale, feature, shape, mode)
            * inv_std
            / m
            * (m * dy[index] - dbias[feature] - xhat * dscale[feature])
        )
        assert out["dx"][index] == pytest.approx(expected, rel=1e-10, abs=1e-12)
    for feature in dbias:
        assert param_at(out["dbias"], feature, shape, mode) == pytest.approx(dbias[feature], rel=1e-12)
        assert param_at(out["dscale"], feature, shape, mode) == pytest.approx(dscale[feature], rel=1e-10)


def test_blend_never_reads_the_prior_when_beta_is_zero():
    result = np.array([1.0, 2.0])
    assert (reference.blend(result, 0.5, 0.0, np.array([np.nan, np.nan])) == [0.5, 1.0]).all()
    assert (reference.blend(result, 1.0, 2.0, np.array([1.0, -1.0])) == [3.0, 0.0]).all()
    with pytest.raises(ValueError, match="prior"):
        reference.blend(result, 1.0, 1.0)


def test_scalings_are_rounded_like_c_floats():
    out = reference.blend(np.array([1.0]), 0.1, 0.0)
    assert out[0] == float(np.float32(0.1)) != 0.1


def test_inference_without_estimates_is_training_without_updates(rng):
    x = rng.standard_normal((5, 3, 2))
    scale, bias = rng.uniform(0.5, 2, 3), rng.uniform(-1, 1, 3)
    training = reference.batchnorm_forward_training(x, scale, bias)
    np.testing.assert_array_equal(reference.batchnorm_forward_inference(x, scale, bias), training["y"])


def test_inference_negative_variance_gives_nan():
    y = reference.batchnorm_forward_inference(np.ones((2, 1)), [1.0], [0.0], [0.0], [-1.0])
    assert np.isnan(y).all()


def test_saved_statistics_override_epsilon(rng):
    x, dy = rng.standard_normal((4, 2)), rng.standard_normal((4, 2))
    mean, var = reference.batch_statistics(x, "spatial")
    inv_std = reference.inverse_std(var, 0.5)
    a = reference.batchnorm_backward(x, dy, [1.0, 1.0], saved_mean=mean, saved_inv_std=inv_std, epsilon=123.0)
    b = reference.batchnorm_backward(x, dy, [1.0, 1.0], epsilon=0.5)
    np.testing.assert_allclose(a["dx"], b["dx"], rtol=1e-12)


def test_reduction_counts():
    assert reference.reduction_count((4, 3, 5, 7), "spatial") == 140
    assert reference.reduction_count((4, 3, 5, 7), "per_activation") == 4
    assert reference.param_shape((4, 3, 5, 7), "per_activation") == (1, 3, 5, 7)
    with pytest.raises(ValueError, match="mode"):
        reference.reduction_axes(4, "channel")


def test_ieee_special_values_are_results_not_warnings():
    """A constant channel with epsilon 0 gives 0 * inf = NaN in y and dx, as
    the library must; the oracle computes it without NumPy warnings (which
    the test configuration turns into errors)."""
    x = np.array([[1.0, 2.0], [1.0, 4.0]])
    training = reference.batchnorm_forward_training(x, [1.0, 1.0], [0.0, 0.0], epsilon=0.0)
    assert np.isnan(training["y"][:, 0]).all() and np.isposinf(training["saved_inv_std"][0, 0])
    assert np.isfinite(training["y"][:, 1]).all()
    grads = reference.batchnorm_backward(x, np.ones_like(x), [1.0, 1.0], epsilon=0.0)
    assert np.isnan(grads["dx"][:, 0]).all() and np.isfinite(grads["dbias"]).all()
    y = reference.batchnorm_forward_inference(x, [1.0, 1.0], [0.0, 0.0], [1.0, 2.0], [0.0, 0.0], epsilon=0.0)
    assert np.isnan(y[0, 0]) and np.isposinf(y[1, 1])
