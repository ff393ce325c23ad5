"""The float64 NumPy reference: the oracle every backend is checked against.

It is written to be read as the statement of the conventions (SPEC 2):

* statistics are taken in two passes in float64: the mean first, then the
  mean of squared deviations (never E[x^2] - mean^2);
* the batch variance is *biased* (divided by M) for normalizing, while the
  running variance is updated with the *unbiased* one, var * M / (M - 1)
  (the biased one when M == 1);
* what is saved for backward is the mean and the inverse standard deviation
  1 / sqrt(var + epsilon), despite MIOpen's name "saved inverse variance";
* inference takes sqrt(var + epsilon) as is, no fabs: a negative sum gives NaN;
* results blend as out = alpha * result + beta * prior, and with beta == 0
  the prior is never read (NaN there cannot leak);
* alpha and beta are read by the library as C floats, so they are rounded to
  float32 here too.

M, the reduction count, is N*D*H*W per channel in spatial mode and N per
(c, d, h, w) per activation.  Arrays are in logical order (N, C[, D][, H][, W]),
whatever their memory layout; parameters may be given as (C,) / (C, H, W)
or with the leading 1, and results come back in the broadcastable shape
(1, C, 1, ...) / (1, C, H, W) -- reshape as needed.
"""

from __future__ import annotations

import functools

import numpy as np

SPATIAL, PER_ACTIVATION = "spatial", "per_activation"


def _ieee(function):
    """Runs a reference function with NumPy's floating-point warnings off:
    0 * inf = NaN, 1 / 0 = inf and overflow to inf are results here (they
    propagate exactly as the library must propagate them), not errors."""

    @functools.wraps(function)
    def quiet(*args, **kwargs):
        with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
            return function(*args, **kwargs)

    return quiet


def reduction_axes(ndim: int, mode: str) -> tuple:
    """Axes the statistics are taken over."""
    if mode == SPATIAL:
        return (0,) + tuple(range(2, ndim))
    if mode == PER_ACTIVATION:
        return (0,)
    raise ValueError(f"mode must be {SPATIAL!r} or {PER_ACTIVATION!r}, got {mode!r}")


def reduction_count(shape: tuple, mode: str) -> int:
    """M: how many values each statistic is taken over."""
    return int(np.prod([shape[axis] for axis in reduction_axes(len(shape), mode)]))


def param_shape(x_shape: tuple, mode: str) -> tuple:
    """The broadcastable shape of parameters: (1, C, 1, ...) or (1, C, D, H, W)."""
    if mode == SPATIAL:
        return (1, x_shape[1]) + (1,) * (len(x_shape) - 2)
    return (1,) + tuple(x_shape[1:])


def _as_float64(array) -> np.ndarray:
    return np.asarray(array).astype(np.float64)


def _param(value, x_shape: tuple, mode: str) -> np.ndarray:
    return _as_float64(value).reshape(param_shape(x_shape, mode))


def _scaling(value: float) -> float:
    """alpha/beta as the library sees them: a C float."""
    return float(np.float32(value))


def blend(result: np.ndarray, alpha: float, beta: float, prior=None) -> np.ndarray:
    """alpha * result + beta * prior; the prior is not read when beta == 0."""
    alpha, beta = _scaling(alpha), _scaling(beta)
    if beta == 0.0:
        return alpha * result
    if prior is None:
        raise ValueError("beta is nonzero: the prior output is needed")
    return alpha * result + beta * _as_float64(prior).reshape(result.shape)


def batch_statistics(x, mode: str) -> tuple:
    """Two-pass float64 mean and *biased* variance, in the broadcastable shape."""
    x = _as_float64(x)
    axes = reduction_axes(x.ndim, mode)
    mean = x.mean(axis=axes, keepdims=True)
    var = np.square(x - mean).mean(axis=axes, keepdims=True)
    return mean, var


def inverse_std(var: np.ndarray, epsilon: float) -> np.ndarray:
    with np.errstate(invalid="ignore", divide="ignore"):
        return 1.0 / np.sqrt(var + epsilon)


@_ieee
def batchnorm_forward_training(
    x,
    scale,
    bias,
    *,
    mode: str = SPATIAL,
    epsilon: float = 1e-5,
    exp_avg_factor: float = 0.1,
    running_mean=None,
    running_var=None,
    alpha: float = 1.0,
    beta: float = 0.0,
    y_prior=None,
) -> dict:
    """Training forward.  Returns a dict with y, saved_mean, saved_inv_var and,
    when running statistics are given, their updated values running_mean and
    running_var (the inputs are not modified)."""
    x = _as_float64(x)
    mean, var = batch_statistics(x, mode)
    inv_std = inverse_std(var, epsilon)
    scale, bias = _param(scale, x.shape, mode), _param(bias, x.shape, mode)
    result = scale * (x - mean) * inv_std + bias
    out = {"y": blend(result, alpha, beta, y_prior), "saved_mean": mean, "saved_inv_var": inv_std}
    if running_mean is not None:
        m = reduction_count(x.shape, mode)
        unbiased = var * m / (m - 1) if m > 1 else var
        f = float(exp_avg_factor)
        out["running_mean"] = (1.0 - f) * _param(running_mean, x.shape, mode) + f * mean
        out["running_var"] = (1.0 - f) * _param(running_var, x.shape, mode) + f * unbiased
    return out


@_ieee
def batchnorm_forward_inference(
    x,
    scale,
    bias,
    mean=None,
    var=None,
    *,
    mode: str = SPATIAL,
    epsilon: float = 1e-5,
    alpha: float = 1.0,
    beta: float = 0.0,
    y_prior=None,
) -> np.ndarray:
    """Inference forward with the given estimates; mean and var both None means
    the batch's own (biased) statistics, as MIOpen's fallback does."""
    x = _as_float64(x)
    if mean is None and var is None:
        mean, var = batch_statistics(x, mode)
    else:
        mean, var = _param(mean, x.shape, mode), _param(var, x.shape, mode)
    scale, bias = _param(scale, x.shape, mode), _param(bias, x.shape, mode)
    result = scale * (x - mean) * inverse_std(var, epsilon) + bias  # no fabs: NaN stays NaN
    return blend(result, alpha, beta, y_prior)


@_ieee
def batchnorm_backward(
    x,
    dy,
    scale,
    *,
    saved_mean=None,
    saved_inv_var=None,
    mode: str = SPATIAL,
    epsilon: float = 1e-5,
    alpha_data: float = 1.0,
    beta_data: float = 0.0,
    alpha_param: float = 1.0,
    beta_param: float = 0.0,
    dx_prior=None,
    dscale_prior=None,
    dbias_prior=None,
) -> dict:
    """Backward.  Returns a dict with dx, dscale and dbias.  The statistics come
    from saved_mean/saved_inv_var when both are given (epsilon unused), else
    they are recomputed from x with epsilon."""
    x, dy = _as_float64(x), _as_float64(dy)
    axes = reduction_axes(x.ndim, mode)
    m = reduction_count(x.shape, mode)
    if saved_mean is not None and saved_inv_var is not None:
        mean, inv_std = _param(saved_mean, x.shape, mode), _param(saved_inv_var, x.shape, mode)
    else:
        mean, var = batch_statistics(x, mode)
        inv_std = inverse_std(var, epsilon)
    scale = _param(scale, x.shape, mode)
    xhat = (x - mean) * inv_std
    dbias = dy.sum(axis=axes, keepdims=True)
    dscale = (dy * xhat).sum(axis=axes, keepdims=True)
    dx = scale * inv_std / m * (m * dy - dbias - xhat * dscale)
    return {
        "dx": blend(dx, alpha_data, beta_data, dx_prior),
        "dscale": blend(dscale, alpha_param, beta_param, dscale_prior),
        "dbias": blend(dbias, alpha_param, beta_param, dbias_prior),
    }


# --------------------------------------------------------------------------- #
# Group normalization (SPEC 3) goes here: group_norm_forward / _backward with
# the same conventions (two-pass float64 statistics per (n, group), biased
# variance, rstd = 1/sqrt(var + eps), optional fused swish).
# --------------------------------------------------------------------------- #


def rounded_like(values: np.ndarray, dtype) -> np.ndarray:
    """``values`` rounded to ``dtype`` and widened back to float64: the exact
    inputs a half/bfloat16 kernel sees, which is what the reference must use."""
    return np.asarray(values).astype(dtype).astype(np.float64)
