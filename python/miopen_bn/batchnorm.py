"""Batch normalization on arrays: each array adapted, then one C call, which
checks every argument (see call.py for what Python does, prepared.py for how
a repeated call skips even that).

Parameter arrays (scale, bias, means, variances and their gradients) take the
parameter descriptor's shape with or without its leading 1: (C,) or
(1, C, 1, 1) spatially, (C, H, W) or (1, C, H, W) per activation, and
likewise for ranks 2, 3 and 5.  Each is float32 or x's dtype, on its own
(e.g. scale and bias in x's dtype with float32 statistics); a gradient
defaults to its parameter's dtype, saved statistics to the running ones'
(else the scale's).
"""

from __future__ import annotations

from typing import Optional

from . import prepared, renamed
from .activation import ActivationDescriptor, activation_code
from .call import ArrayCall
from .descriptor import mode_code
from .handle import Handle

_TRAINING = prepared.Entry(
    "batchnorm_forward_training",
    ("x", "scale", "bias", "running_mean", "running_var", "saved_mean", "saved_inv_std", "y", "next_running_mean",
     "next_running_var"),  # fmt: skip
    ("alpha", "beta", "exp_avg_factor", "epsilon"),
    ("y", "saved_mean", "saved_inv_std"),
)
_INFERENCE = prepared.Entry(
    "batchnorm_forward_inference",
    ("x", "scale", "bias", "mean", "var", "y"),
    ("alpha", "beta", "epsilon"),
    ("y",),
)
_BACKWARD = prepared.Entry(
    "batchnorm_backward",
    ("x", "dy", "scale", "saved_mean", "saved_inv_std", "dx", "dscale", "dbias", "bias"),
    ("alpha_data", "beta_data", "alpha_param", "beta_param", "epsilon"),
    ("dx", "dscale", "dbias"),
)


def _activation_steering(activation, activation_params) -> tuple:
    """(mode code, (alpha, beta, gamma)) of a fused activation (the callers
    pass None for none without calling this)."""
    alpha, beta, gamma = (float(p) for p in activation_params)
    return activation_code(activation), (alpha, beta, gamma)


class _BnCall(ArrayCall):
    """A batch-norm call: its mode, and the activation descriptor it may take."""

    def __init__(self, x, mode: str, handle: Optional[Handle], signature: tuple):
        self.mode_code = mode_code(mode)
        super().__init__(x, handle, signature)

    def activation_desc(self, activation: tuple):
        """The activation descriptor for steering's (code, params); the plan keeps it."""
        descriptor = ActivationDescriptor(*activation)
        self._descriptors.append(descriptor)
        return descriptor.ptr


def batchnorm_forward_training(
    x,
    scale,
    bias,
    *,
    mode: str = "spatial",
    epsilon: float = 1e-5,
    exp_avg_factor: float = 0.1,
    running_mean=None,
    running_var=None,
    save_stats: bool = True,
    saved_mean=None,
    saved_inv_std=None,
    alpha: float = 1.0,
    beta: float = 0.0,
    y=None,
    activation=None,
    activation_params=(0.0, 0.0, 0.0),
    next_running_mean=None,
    next_running_var=None,
    handle: Optional[Handle] = None,
    **old_names,
):
    """Normalizes x with its own batch statistics.

    ``scale`` and ``bias`` are the per-feature affine parameters (MIOpen's
    bnScale and bnBias; ``weight`` and ``bias`` in group norm, torch and the
    ``BatchNorm`` layer).  Returns ``(y, saved_mean, saved_inv_std)``; the saved values (the mean and
    the inverse std 1/sqrt(var + epsilon), MIOpen's resultSaveInvVariance;
    ``saved_inv_var`` is its deprecated old keyword) are None when
    ``save_stats`` is False, and are written into
    ``saved_mean`` / ``saved_inv_std`` when those are given (both or
    neither), else into new arrays.  Given ``running_mean`` and
    ``running_var`` are updated in place: ``run = (1 - f) * run + f * stat``
    with f = ``exp_avg_factor`` (PyTorch's momentum) and the unbiased
    variance, or, with ``next_running_mean`` and ``next_running_var``
    (MIOpen's V3), read from the running arrays and written to the next ones.  ``y = alpha * result + beta * y_prior``, where
    result passes through ``activation`` (a mode name such as "relu", see
    ``miopen_bn.activation``, with ``activation_params`` = (alpha, beta,
    gamma)) when one is given.
    """
    if old_names:
        saved_inv_std = renamed.keyword("batchnorm_forward_training", old_names, "saved_inv_std", saved_inv_std)
    arrays = (x, scale, bias, running_mean, running_var, saved_mean, saved_inv_std, y, next_running_mean,
              next_running_var)  # fmt: skip
    fused = None if activation is None else _activation_steering(activation, activation_params)
    steering = (mode, bool(save_stats), beta != 0, fused)
    call = _TRAINING.find(handle, arrays, steering) or _adapted_training(arrays, steering, handle)
    return call.run(arrays, (alpha, beta, exp_avg_factor, epsilon))


def _adapted_training(arrays: tuple, steering: tuple, handle: Optional[Handle]):
    x, scale, bias, running_mean, running_var, saved_mean, saved_inv_std, y, next_mean, next_var = arrays
    mode, save_stats, blended, activation = steering
    if not save_stats and (saved_mean is not None or saved_inv_std is not None):
        raise ValueError("saved_mean/saved_inv_std were given but save_stats is False")
    call = _BnCall(x, mode, handle, (_TRAINING, arrays, steering))
    scale_v, bias_v = call.view(scale, "scale"), call.view(bias, "bias")
    v3 = next_mean is not None or next_var is not None  # running statistics read from one pair, written to another
    previous = (call.view(running_mean, "running_mean"), call.view(running_var, "running_var")) if v3 else None
    running_mean_v = call.view(next_mean if v3 else running_mean, "next_running_mean" if v3 else "running_mean",
                               output=True)
    running_var_v = call.view(next_var if v3 else running_var, "next_running_var" if v3 else "running_var",
                              output=True)
    y_v = call.output(y, "y", call.x, same_layout=True, blended=blended)
    saved_mean_v = saved_inv_std_v = None
    if save_stats and saved_mean is None and saved_inv_std is None:
        # One descriptor describes the running and the saved mean (and one the
        # two variances): new saved statistics take the running ones' layout.
        hint = "use save_stats=False"
        mean_like = scale_v if running_mean_v is None else running_mean_v
        var_like = scale_v if running_var_v is None else running_var_v
        saved_mean_v = call.output(None, "saved_mean", mean_like, hint=hint)
        saved_inv_std_v = call.output(None, "saved_inv_std", var_like, hint=hint)
    else:
        saved_mean_v = call.view(saved_mean, "saved_mean", output=True)
        saved_inv_std_v = call.view(saved_inv_std, "saved_inv_std", output=True)
    mean_desc = call.shared_desc(running_mean_v, saved_mean_v, *(previous[:1] if v3 else ()))
    var_desc = call.shared_desc(running_var_v, saved_inv_std_v, *(previous[1:] if v3 else ()))
    functions = {
        (False, False): "miopenBatchNormalizationForwardTraining_V2",
        (False, True): "miopenBatchNormalizationForwardTraining_V3",
        (True, False): "miopenBatchNormForwardTrainingActivation",
        (True, True): "miopenBatchNormForwardTrainingActivation_V2",
    }
    function = functions[activation is not None, v3]
    running = [call.ptr(running_mean_v), call.ptr(running_var_v)]
    if v3:
        running = [call.ptr(previous[0]), call.ptr(previous[1])] + running
    return call.prepare(
        function,
        call.handle.ptr,
        call.mode_code,
        call.scalar("alpha"),
        call.scalar("beta"),
        call.desc(call.x),
        call.ptr(call.x),
        call.desc(y_v),
        call.ptr(y_v),
        call.desc(scale_v),
        call.desc(bias_v),
        mean_desc,
        var_desc,
        call.ptr(scale_v),
        call.ptr(bias_v),
        call.number("exp_avg_factor"),
        *running,
        call.number("epsilon"),
        call.ptr(saved_mean_v),
        call.ptr(saved_inv_std_v),
        *([] if activation is None else [call.activation_desc(activation)]),
    )


def batchnorm_forward_inference(
    x,
    scale,
    bias,
    mean=None,
    var=None,
    *,
    mode: str = "spatial",
    epsilon: float = 1e-5,
    alpha: float = 1.0,
    beta: float = 0.0,
    y=None,
    activation=None,
    activation_params=(0.0, 0.0, 0.0),
    inverse_variance: bool = False,
    handle: Optional[Handle] = None,
):
    """``y = scale * (x - mean) / sqrt(var + epsilon) + bias`` with the given
    estimates; with ``mean`` and ``var`` both None, the batch's own statistics
    (nothing else is written).  A negative ``var + epsilon`` gives NaN.  With
    ``inverse_variance`` var holds 1 / sqrt(variance + epsilon) and epsilon is
    not passed (MIOpen's InvVariance entry points; 1e-5 for batch
    statistics).  ``activation``: as for training."""
    arrays = (x, scale, bias, mean, var, y)
    fused = None if activation is None else _activation_steering(activation, activation_params)
    steering = (mode, beta != 0, fused, bool(inverse_variance))
    call = _INFERENCE.find(handle, arrays, steering) or _adapted_inference(arrays, steering, handle)
    return call.run(arrays, (alpha, beta, epsilon))


def _adapted_inference(arrays: tuple, steering: tuple, handle: Optional[Handle]):
    x, scale, bias, mean, var, y = arrays
    mode, blended, activation, inverse = steering
    call = _BnCall(x, mode, handle, (_INFERENCE, arrays, steering))
    scale_v, bias_v = call.view(scale, "scale"), call.view(bias, "bias")
    mean_v, var_v = call.view(mean, "mean"), call.view(var, "var")
    y_v = call.output(y, "y", call.x, same_layout=True, blended=blended)
    functions = {
        (False, False): "miopenBatchNormalizationForwardInference_V2",
        (False, True): "miopenBatchNormalizationForwardInferenceInvVariance",
        (True, False): "miopenBatchNormForwardInferenceActivation",
        (True, True): "miopenBatchNormForwardInferenceActivationInvVariance",
    }
    function = functions[activation is not None, inverse]
    return call.prepare(
        function,
        call.handle.ptr,
        call.mode_code,
        call.scalar("alpha"),
        call.scalar("beta"),
        call.desc(call.x),
        call.ptr(call.x),
        call.desc(y_v),
        call.ptr(y_v),
        call.desc(scale_v),
        call.desc(bias_v),
        call.desc(mean_v),
        call.desc(var_v),
        call.ptr(scale_v),
        call.ptr(bias_v),
        call.ptr(mean_v),
        call.ptr(var_v),
        *([] if inverse else [call.number("epsilon")]),
        *([] if activation is None else [call.activation_desc(activation)]),
    )


def batchnorm_backward(
    x,
    dy,
    scale,
    *,
    saved_mean=None,
    saved_inv_std=None,
    mode: str = "spatial",
    epsilon: float = 1e-5,
    alpha_data: float = 1.0,
    beta_data: float = 0.0,
    alpha_param: float = 1.0,
    beta_param: float = 0.0,
    dx=None,
    dscale=None,
    dbias=None,
    bias=None,
    activation=None,
    activation_params=(0.0, 0.0, 0.0),
    handle: Optional[Handle] = None,
    **old_names,
):
    """Gradients of batch norm: returns ``(dx, dscale, dbias)`` (dscale is
    the gradient of ``scale``, group norm's ``dweight``).

    The statistics come from ``saved_mean`` / ``saved_inv_std`` (the mean and
    inverse std, as returned by ``batchnorm_forward_training``; MIOpen's
    savedInvVariance, deprecated keyword ``saved_inv_var``) when both are
    given, else they are recomputed from x with ``epsilon``.  dy (and dx) may
    be x's dtype or float32.  ``dx = alpha_data * result + beta_data * dx_prior``, and
    likewise dscale/dbias with alpha_param/beta_param.  With ``activation``
    (as for training) dy is the gradient of the activation's output and
    ``bias`` is needed to recompute its input.
    """
    if old_names:
        saved_inv_std = renamed.keyword("batchnorm_backward", old_names, "saved_inv_std", saved_inv_std)
    arrays = (x, dy, scale, saved_mean, saved_inv_std, dx, dscale, dbias, bias)
    fused = None if activation is None else _activation_steering(activation, activation_params)
    steering = (mode, beta_data != 0, beta_param != 0, fused)
    call = _BACKWARD.find(handle, arrays, steering) or _adapted_backward(arrays, steering, handle)
    return call.run(arrays, (alpha_data, beta_data, alpha_param, beta_param, epsilon))


def _adapted_backward(arrays: tuple, steering: tuple, handle: Optional[Handle]):
    x, dy, scale, saved_mean, saved_inv_std, dx, dscale, dbias, bias = arrays
    mode, data_blended, param_blended, activation = steering
    call = _BnCall(x, mode, handle, (_BACKWARD, arrays, steering))
    dy_v = call.view(dy, "dy")
    scale_v = call.view(scale, "scale")
    bias_v = None if activation is None else call.view(bias, "bias")  # the activation's input is recomputed
    saved_mean_v, saved_inv_std_v = call.view(saved_mean, "saved_mean"), call.view(saved_inv_std, "saved_inv_std")
    dx_v = call.output(dx, "dx", call.x, dtype=dy_v.dtype, same_layout=True, blended=data_blended)
    dscale_v = call.output(dscale, "dscale", scale_v, blended=param_blended)
    dbias_v = call.output(dbias, "dbias", scale_v if bias_v is None else bias_v, blended=param_blended)
    function = "miopenBatchNormalizationBackward_V2"
    if activation is not None:
        function = "miopenBatchNormBackwardActivation"
    return call.prepare(
        function,
        call.handle.ptr,
        call.mode_code,
        call.scalar("alpha_data"),
        call.scalar("beta_data"),
        call.scalar("alpha_param"),
        call.scalar("beta_param"),
        call.desc(call.x),
        call.ptr(call.x),
        call.desc(dy_v),
        call.ptr(dy_v),
        call.desc(dx_v),
        call.ptr(dx_v),
        call.shared_desc(scale_v, dscale_v),  # describes the scale and its gradient
        call.shared_desc(dbias_v, bias_v),
        call.desc(saved_mean_v),
        call.desc(saved_inv_std_v),
        call.ptr(scale_v),
        *([] if activation is None else [call.ptr(bias_v)]),
        call.ptr(dscale_v),
        call.ptr(dbias_v),
        call.number("epsilon"),
        call.ptr(saved_mean_v),
        call.ptr(saved_inv_std_v),
        *([] if activation is None else [call.activation_desc(activation)]),
    )
