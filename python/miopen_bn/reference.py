"""The float64 NumPy reference: the oracle every backend is checked against.

It is written to be read as the statement of the conventions
(docs/conventions.md):

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
* alpha and beta (and group norm's epsilon and swish beta) are read by the
  library as C floats, so they are rounded to float32 here too.

M, the reduction count, is N*D*H*W per channel in spatial mode and N per
(c, d, h, w) per activation.  Arrays are in logical order (N, C[, D][, H][, W]),
whatever their memory layout; parameters may be given as (C,) / (C, H, W)
or with the leading 1, and results come back in the broadcastable shape
(1, C, 1, ...) / (1, C, H, W) -- reshape as needed.
"""

from __future__ import annotations

import functools

import numpy as np

from . import renamed

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


def _c_float(value: float) -> float:
    """A scalar the library takes as a C float (alpha, beta, group norm's
    epsilon and swish beta), rounded as it sees it."""
    return float(np.float32(value))


def _float_epsilon(value: float) -> float:
    """Group norm's epsilon, which the library takes as a C float and widens
    to the double its shortest decimal names (1e-5 stays 1e-5)."""
    return float(str(np.float32(value))) if np.isfinite(value) else float(value)


def blend(result: np.ndarray, alpha: float, beta: float, prior=None) -> np.ndarray:
    """alpha * result + beta * prior; the prior is not read when beta == 0."""
    alpha, beta = _c_float(alpha), _c_float(beta)
    if beta == 0.0:
        return alpha * result
    if prior is None:
        raise ValueError("beta is nonzero: the prior output is needed")
    return alpha * result + beta * _as_float64(prior).reshape(result.shape)


# --------------------------------------------------------------------------- #
# Activations fused into batch norm (miopenActivationMode_t, by value)
# --------------------------------------------------------------------------- #
ACTIVATION_MODES = (
    "pasthru", "logistic", "tanh", "relu", "softrelu", "abs", "power", "clippedrelu", "leakyrelu", "elu", "clamp",
)  # fmt: skip


def _mode_index(mode) -> int:
    return mode if isinstance(mode, int) else ACTIVATION_MODES.index(mode)


@_ieee
def activation(z, mode, alpha: float = 0.0, beta: float = 0.0, gamma: float = 0.0) -> np.ndarray:
    """f(z) for an activation mode (name or miopenActivationMode_t value);
    power is 0 where alpha + beta * z <= 0.  NaN stays NaN."""
    z = _as_float64(z)
    name = ACTIVATION_MODES[_mode_index(mode)]
    nan = np.isnan(z)
    if name == "pasthru":
        out = z.copy()
    elif name == "logistic":
        out = 0.5 * (1.0 + np.tanh(0.5 * z))  # 1 / (1 + e^-z) without overflow
    elif name == "tanh":
        out = beta * np.tanh(alpha * z)
    elif name == "relu":
        out = np.where(z > 0, z, 0.0)
    elif name == "softrelu":
        out = np.logaddexp(0.0, z)
    elif name == "abs":
        out = np.abs(z)
    elif name == "power":
        v = alpha + beta * z
        out = np.where(v > 0, np.power(np.where(v > 0, v, 1.0), gamma), 0.0)
    elif name == "clippedrelu":
        out = np.minimum(alpha, np.maximum(0.0, z))
    elif name == "leakyrelu":
        out = np.where(z > 0, z, alpha * z)
    elif name == "elu":
        out = np.where(z > 0, z, alpha * np.expm1(np.minimum(z, 0.0)))
    else:  # clamp
        out = np.maximum(alpha, np.minimum(beta, z))
    return np.where(nan, np.nan, out)


@_ieee
def activation_derivative(z, mode, alpha: float = 0.0, beta: float = 0.0, gamma: float = 0.0) -> np.ndarray:
    """f'(z): the exact derivative of activation(), 0 at the kinks of relu,
    clipped relu and clamp, 1 for z > 0 and -1 otherwise for abs."""
    z = _as_float64(z)
    name = ACTIVATION_MODES[_mode_index(mode)]
    nan = np.isnan(z)
    if name == "pasthru":
        out = np.ones_like(z)
    elif name in ("logistic", "softrelu"):
        s = 0.5 * (1.0 + np.tanh(0.5 * z))
        out = s if name == "softrelu" else s * (1.0 - s)
    elif name == "tanh":
        out = alpha * beta * (1.0 - np.tanh(alpha * z) ** 2)
    elif name == "relu":
        out = np.where(z > 0, 1.0, 0.0)
    elif name == "abs":
        out = np.where(z > 0, 1.0, -1.0)
    elif name == "power":
        v = alpha + beta * z
        out = np.where(v > 0, gamma * beta * np.power(np.where(v > 0, v, 1.0), gamma - 1.0), 0.0)
    elif name == "clippedrelu":
        out = np.where((z > 0) & (z < alpha), 1.0, 0.0)
    elif name == "leakyrelu":
        out = np.where(z > 0, 1.0, alpha)
    elif name == "elu":
        out = np.where(z > 0, 1.0, alpha * np.exp(np.minimum(z, 0.0)))
    else:  # clamp
        out = np.where((z > alpha) & (z < beta), 1.0, 0.0)
    return np.where(nan, np.nan, out)


def _activated(result: np.ndarray, fused) -> np.ndarray:
    """f(result) for fused = (mode, alpha, beta, gamma), or result for None."""
    return result if fused is None else activation(result, *fused)


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
    fused_activation=None,
) -> dict:
    """Training forward.  Returns a dict with y, saved_mean, saved_inv_std and,
    when running statistics are given, their updated values running_mean and
    running_var (the inputs are not modified).  ``fused_activation`` =
    (mode, alpha, beta, gamma) makes y = alpha * f(z) (+ beta * prior)."""
    x = _as_float64(x)
    mean, var = batch_statistics(x, mode)
    inv_std = inverse_std(var, epsilon)
    scale, bias = _param(scale, x.shape, mode), _param(bias, x.shape, mode)
    result = _activated(scale * (x - mean) * inv_std + bias, fused_activation)
    out = renamed.Results(y=blend(result, alpha, beta, y_prior), saved_mean=mean, saved_inv_std=inv_std)
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
    fused_activation=None,
    var_is_inv_std: bool = False,
) -> np.ndarray:
    """Inference forward with the given estimates; mean and var both None means
    the batch's own (biased) statistics, as MIOpen's fallback does.  With
    ``var_is_inv_std`` var holds 1 / sqrt(variance + epsilon) (MIOpen's
    InvVariance entry points) and epsilon is not used with it."""
    x = _as_float64(x)
    if mean is None and var is None:
        mean, batch_var = batch_statistics(x, mode)
        inv_std = inverse_std(batch_var, epsilon)
    else:
        mean, var = _param(mean, x.shape, mode), _param(var, x.shape, mode)
        inv_std = var if var_is_inv_std else inverse_std(var, epsilon)  # no fabs: NaN stays NaN
    scale, bias = _param(scale, x.shape, mode), _param(bias, x.shape, mode)
    result = _activated(scale * (x - mean) * inv_std + bias, fused_activation)
    return blend(result, alpha, beta, y_prior)


@_ieee
def batchnorm_backward(
    x,
    dy,
    scale,
    *,
    saved_mean=None,
    saved_inv_std=None,
    mode: str = SPATIAL,
    epsilon: float = 1e-5,
    alpha_data: float = 1.0,
    beta_data: float = 0.0,
    alpha_param: float = 1.0,
    beta_param: float = 0.0,
    dx_prior=None,
    dscale_prior=None,
    dbias_prior=None,
    bias=None,
    fused_activation=None,
    **old_names,
) -> dict:
    """Backward.  Returns a dict with dx, dscale and dbias.  The statistics come
    from saved_mean/saved_inv_std when both are given (epsilon unused), else
    they are recomputed from x with epsilon.  With ``fused_activation`` dy is
    the gradient of f(z), z = scale * xhat + bias, and g = dy * f'(z) takes
    dy's place below."""
    if old_names:
        saved_inv_std = renamed.keyword("reference.batchnorm_backward", old_names, "saved_inv_std", saved_inv_std,
                                        wrappers=1)
    x, dy = _as_float64(x), _as_float64(dy)
    axes = reduction_axes(x.ndim, mode)
    m = reduction_count(x.shape, mode)
    if saved_mean is not None and saved_inv_std is not None:
        mean, inv_std = _param(saved_mean, x.shape, mode), _param(saved_inv_std, x.shape, mode)
    else:
        mean, var = batch_statistics(x, mode)
        inv_std = inverse_std(var, epsilon)
    scale = _param(scale, x.shape, mode)
    xhat = (x - mean) * inv_std
    if fused_activation is not None:
        dy = dy * activation_derivative(scale * xhat + _param(bias, x.shape, mode), *fused_activation)
    dbias = dy.sum(axis=axes, keepdims=True)
    dscale = (dy * xhat).sum(axis=axes, keepdims=True)
    dx = scale * inv_std / m * (m * dy - dbias - xhat * dscale)
    return {
        "dx": blend(dx, alpha_data, beta_data, dx_prior),
        "dscale": blend(dscale, alpha_param, beta_param, dscale_prior),
        "dbias": blend(dbias, alpha_param, beta_param, dbias_prior),
    }


# --------------------------------------------------------------------------- #
# Group normalization (docs/conventions.md#group-norm-statistics)
# --------------------------------------------------------------------------- #
# Sample n's channels are split into G groups of C/G consecutive channels;
# group (n, g) is normalized over its channels at every position (M = C/G *
# D*H*W values), with the same conventions as above: two-pass float64
# statistics, biased variance, rstd = 1/sqrt(var + epsilon).  The optional
# fused activation is swish, applied to the normalized-and-scaled value.
# Results come back in x's shape, mean and rstd as (N, G), parameter
# gradients as (C,).


def _grouped(x: np.ndarray, num_groups: int) -> np.ndarray:
    """x as (N, G, C/G, positions): one group per [n, g]."""
    n, c = x.shape[:2]
    if num_groups < 1 or c % num_groups:
        raise ValueError(f"num_groups {num_groups} does not divide the {c} channels")
    return x.reshape(n, num_groups, c // num_groups, -1)


def _per_channel(value, x_shape: tuple, default: float) -> np.ndarray:
    """A (C,)-like parameter (or None: `default`) broadcastable against x."""
    shape = (1, x_shape[1]) + (1,) * (len(x_shape) - 2)
    return np.full(shape, default) if value is None else _as_float64(value).reshape(shape)


def _per_group(values, x_shape: tuple, num_groups: int) -> np.ndarray:
    """(N, G) statistics spread over x's shape (each channel takes its group's)."""
    n, c = x_shape[:2]
    spread = _as_float64(values).reshape(n, num_groups, 1).repeat(c // num_groups, axis=2)
    return spread.reshape((n, c) + (1,) * (len(x_shape) - 2))


def _swish_argument(z: np.ndarray, beta: float) -> np.ndarray:
    """beta * z, where beta = 0 gives 0 even for infinite z (swish is z / 2)."""
    return np.zeros_like(z) if beta == 0.0 else beta * z


def swish(z, beta: float = 1.0) -> np.ndarray:
    """z / (1 + exp(-beta * z)), and its limit 0 where exp(-beta * z)
    overflows: swish(-inf) = 0 for beta > 0 and very negative z give 0, not
    NaN; swish(+inf) = +inf for beta > 0."""
    z = _as_float64(z)
    with np.errstate(over="ignore", invalid="ignore"):
        e = np.exp(-_swish_argument(z, beta))
        return np.where(np.isinf(e), 0.0, z / (1.0 + e))


def swish_derivative(z, beta: float = 1.0) -> np.ndarray:
    """d swish / dz = s * (1 + t * (1 - s)) with t = beta * z,
    s = 1 / (1 + exp(-t)); its limits 0 where exp(-t) overflows and 1 at
    t = +inf."""
    z = _as_float64(z)
    t = _swish_argument(z, beta)
    with np.errstate(over="ignore", invalid="ignore"):
        e = np.exp(-t)
        s = 1.0 / (1.0 + e)
        d = s * (1.0 + t * (e * s))  # 1 - s = e * s, at most 1: no overflow
        return np.where(np.isinf(e), 0.0, np.where(t == np.inf, 1.0, d))


def _activation_beta(activation, swish_beta: float):
    """The swish beta as the library sees it, or None without an activation."""
    if activation is None:
        return None
    if activation != "swish":
        raise ValueError(f"activation must be None or 'swish', got {activation!r}")
    return _c_float(swish_beta)


def group_statistics(x, num_groups: int, epsilon: float = 1e-5) -> tuple:
    """Two-pass float64 mean and rstd = 1/sqrt(biased var + epsilon) of each
    (n, g), as (N, G) arrays."""
    grouped = _grouped(_as_float64(x), num_groups)
    mean = grouped.mean(axis=(2, 3))
    var = np.square(grouped - mean[:, :, None, None]).mean(axis=(2, 3))
    return mean, inverse_std(var, _float_epsilon(epsilon))


def groupnorm_forward(
    x,
    num_groups: int,
    weight=None,
    bias=None,
    epsilon: float = 1e-5,
    activation=None,
    swish_beta: float = 1.0,
) -> dict:
    """Group-norm forward.  Returns a dict with y (x's shape), mean and rstd
    ((N, G)).  weight/bias None means 1 and 0 (no affine transform)."""
    x = _as_float64(x)
    beta = _activation_beta(activation, swish_beta)
    mean, rstd = group_statistics(x, num_groups, epsilon)
    xhat = (x - _per_group(mean, x.shape, num_groups)) * _per_group(rstd, x.shape, num_groups)
    y = xhat * _per_channel(weight, x.shape, 1.0) + _per_channel(bias, x.shape, 0.0)
    if beta is not None:
        y = swish(y, beta)
    return {"y": y, "mean": mean, "rstd": rstd}


def groupnorm_backward(
    x,
    dy,
    num_groups: int,
    weight,
    mean,
    rstd,
    bias=None,
    activation=None,
    swish_beta: float = 1.0,
) -> dict:
    """Group-norm backward from the saved (N, G) mean and rstd.  Returns a
    dict with dx (x's shape), dweight and dbias ((C,); None without weight).

    With xhat = (x - mean) * rstd and g = dy, or with a fused swish
    g = dy * swish'(z) at its input z = xhat * w + b, recomputed:
        dbias[c] = Σ g,  dweight[c] = Σ g * xhat   (over n and positions),
        dx = rstd * (w*g - mean_group(w*g) - xhat * mean_group(w*g * xhat)),
    mean_group being the average over the M values of (n, g)."""
    x, dy = _as_float64(x), _as_float64(dy)
    beta = _activation_beta(activation, swish_beta)
    w = _per_channel(weight, x.shape, 1.0)
    rstd_full = _per_group(rstd, x.shape, num_groups)
    xhat = (x - _per_group(mean, x.shape, num_groups)) * rstd_full
    g = dy if beta is None else dy * swish_derivative(xhat * w + _per_channel(bias, x.shape, 0.0), beta)

    def group_mean(values: np.ndarray) -> np.ndarray:
        averaged = _grouped(values, num_groups).mean(axis=(2, 3))
        return _per_group(averaged, x.shape, num_groups)

    dx = rstd_full * (w * g - group_mean(w * g) - xhat * group_mean(w * g * xhat))
    axes = (0,) + tuple(range(2, x.ndim))
    out = {"dx": dx, "dweight": None, "dbias": None}
    if weight is not None:
        out["dweight"] = (g * xhat).sum(axis=axes)
        out["dbias"] = g.sum(axis=axes)
    return out


def rounded_like(values: np.ndarray, dtype) -> np.ndarray:
    """``values`` rounded to ``dtype`` and widened back to float64: the exact
    inputs a half/bfloat16 kernel sees, which is what the reference must use."""
    return np.asarray(values).astype(dtype).astype(np.float64)
