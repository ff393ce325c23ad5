"""The group-norm oracle itself: its forward against explicit loops over
each (n, g) written from docs/conventions.md#group-norm-statistics, its
backward against central finite
differences of its forward, and swish's documented limits."""

from __future__ import annotations

import numpy as np
import pytest

from miopen_bn import reference

SHAPES = [((3, 4), 2), ((2, 6, 5), 3), ((2, 4, 3, 2), 1), ((1, 6, 2, 2, 3), 6)]
BETAS = [1.0, 0.7, -1.5, 0.0]


@pytest.mark.parametrize("shape, groups", SHAPES)
@pytest.mark.parametrize("activation", [None, "swish"])
def test_forward_matches_the_formulas(rng, shape, groups, activation):
    x = rng.normal(1, 2, shape)
    weight, bias = rng.uniform(0.5, 2, shape[1]), rng.uniform(-1, 1, shape[1])
    eps, beta = 1e-3, 0.75
    out = reference.groupnorm_forward(x, groups, weight, bias, epsilon=eps, activation=activation, swish_beta=beta)
    per_group = shape[1] // groups
    eps32 = eps  # a C float in the API, widened to the decimal it names (1e-3)
    for n in range(shape[0]):
        for g in range(groups):
            channels = range(g * per_group, (g + 1) * per_group)
            values = [x[(n, c) + pos] for c in channels for pos in np.ndindex(*shape[2:])]
            mean = sum(values) / len(values)
            var = sum((v - mean) ** 2 for v in values) / len(values)
            rstd = 1 / np.sqrt(var + eps32)
            assert out["mean"][n, g] == pytest.approx(mean, rel=1e-13, abs=1e-13)
            assert out["rstd"][n, g] == pytest.approx(rstd, rel=1e-13)
            for c in channels:
                for pos in np.ndindex(*shape[2:]):
                    y = (x[(n, c) + pos] - mean) * rstd * weight[c] + bias[c]
                    if activation == "swish":
                        y = y / (1 + np.exp(-beta * y))
                    assert out["y"][(n, c) + pos] == pytest.approx(y, rel=1e-12, abs=1e-12)


def loss(x, dy, groups, weight, bias, activation, beta):
    y = reference.groupnorm_forward(x, groups, weight, bias, epsilon=1e-3, activation=activation, swish_beta=beta)
    return float(np.sum(dy * y["y"]))


def central_difference(f, values, h=1e-6):
    grad = np.empty_like(values)
    for index in np.ndindex(*values.shape):
        saved = values[index]
        values[index] = saved + h
        up = f()
        values[index] = saved - h
        down = f()
        values[index] = saved
        grad[index] = (up - down) / (2 * h)
    return grad


@pytest.mark.parametrize("shape, groups", SHAPES)
@pytest.mark.parametrize("activation, beta", [(None, 1.0)] + [("swish", b) for b in BETAS])
@pytest.mark.parametrize("affine", [True, False])
def test_backward_is_the_derivative_of_forward(rng, shape, groups, activation, beta, affine):
    """With the forward's own mean and rstd, backward is the exact gradient of
    L = Σ dy * y with respect to x, weight and bias."""
    x = rng.normal(1, 2, shape)
    dy = rng.standard_normal(shape)
    weight = rng.uniform(0.5, 2, shape[1]) if affine else None
    bias = rng.uniform(-1, 1, shape[1]) if affine else None
    stats = reference.groupnorm_forward(x, groups, weight, bias, epsilon=1e-3)
    grads = reference.groupnorm_backward(
        x, dy, groups, weight, stats["mean"], stats["rstd"], bias=bias, activation=activation, swish_beta=beta
    )
    f = lambda: loss(x, dy, groups, weight, bias, activation, beta)  # noqa: E731
    np.testing.assert_allclose(grads["dx"], central_difference(f, x), rtol=1e-6, atol=1e-7)
    if affine:
        np.testing.assert_allclose(grads["dweight"], central_difference(f, weight), rtol=1e-6, atol=1e-7)
        np.testing.assert_allclose(grads["dbias"], central_difference(f, bias), rtol=1e-6, atol=1e-7)
    else:
        assert grads["dweight"] is None and grads["dbias"] is None


@pytest.mark.parametrize("beta", BETAS)
def test_swish_derivative_is_the_derivative_of_swish(beta):
    z = np.linspace(-30, 30, 241)
    h = 1e-6
    numeric = (reference.swish(z + h, beta) - reference.swish(z - h, beta)) / (2 * h)
    np.testing.assert_allclose(reference.swish_derivative(z, beta), numeric, rtol=1e-7, atol=1e-8)


def test_swish_limits_at_infinity_and_far_below_zero():
    """The documented values where the formula would give inf/inf or 0*inf."""
    z = np.array([np.inf, -np.inf, -1e4, -800.0, np.nan, 0.0])
    with np.errstate(over="raise", invalid="raise", divide="raise"):  # no warning escapes either
        assert reference.swish(z, 1.0)[:4].tolist() == [np.inf, 0.0, 0.0, 0.0]
        assert reference.swish(z, -1.0)[:4].tolist() == [0.0, -np.inf, -1e4, -800.0]
        assert reference.swish(z, 0.0)[:4].tolist() == [np.inf, -np.inf, -5e3, -400.0]
        assert reference.swish_derivative(z, 1.0)[:4].tolist() == [1.0, 0.0, 0.0, 0.0]
        assert reference.swish_derivative(z, -1.0)[:4].tolist() == [0.0, 1.0, 1.0, 1.0]
        assert reference.swish_derivative(z, 0.0)[:4].tolist() == [0.5, 0.5, 0.5, 0.5]
    assert np.isnan(reference.swish(z, 1.0)[4]) and np.isnan(reference.swish_derivative(z, 1.0)[4])
    assert reference.swish(z, 1.0)[5] == 0.0 and reference.swish_derivative(z, 1.0)[5] == 0.5
    # Just short of exp's overflow, t * exp(-t) alone would overflow: the value is tiny, not -inf.
    near = reference.swish_derivative(np.array([-700.0, -708.0, -709.7]), 1.0)
    assert np.all(np.isfinite(near)) and np.all(np.abs(near) < 1e-290)


def test_bad_groups_are_refused():
    with pytest.raises(ValueError, match="does not divide"):
        reference.groupnorm_forward(np.ones((2, 6, 3)), 4)
    with pytest.raises(ValueError, match="activation"):
        reference.groupnorm_forward(np.ones((2, 6, 3)), 3, activation="relu")
