"""Batch normalization on arrays: argument checks in Python, then one C call
(see call.py for the checks every function shares, prepared.py for how a
repeated call skips them).

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

from . import prepared
from .activation import ActivationDescriptor, activation_code
from .call import ArrayCall
from .descriptor import mode_code
from .handle import Handle

_TRAINING = prepared.Entry(
    "batchnorm_forward_training",
    ("x", "scale", "bias", "running_mean", "running_var", "saved_mean", "saved_inv_var", "y", "next_running_mean",
     "next_running_var"),  # fmt: skip
    ("alpha", "beta", "exp_avg_factor", "epsilon"),
    ("y", "saved_mean", "saved_inv_var"),
)
_INFERENCE = prepared.Entry(
    "batchnorm_forward_inference",
    ("x", "scale", "bias", "mean", "var", "y"),
    ("alpha", "beta", "epsilon"),
    ("y",),
)
_BACKWARD = prepared.Entry(
    "batchnorm_backward",
    ("x", "dy", "scale", "saved_mean", "saved_inv_var", "dx", "dscale", "dbias", "bias"),
    ("alpha_data", "beta_data", "alpha_param", "beta_param", "epsilon"),
    ("dx", "dscale", "dbias"),
)


def _activation_steering(activation, activation_params) -> Optional[tuple]:
    """(mode code, (alpha, beta, gamma)) of a fused activation, or None."""
    if activation is None:
        return None
    alpha, beta, gamma = (float(p) for p in activation_params)
    return activation_code(activation), (alpha, beta, gamma)


class _BnCall(ArrayCall):
    """A batch-norm call: parameter shapes follow the mode."""

    def __init__(self, x, mode: str, handle: Optional[Handle], signature: tuple):
        self.mode_code = mode_code(mode)
        super().__init__(x, handle, signature)
        self.params_share_dtype = False
        self.mode = mode
        full = (1, self.x.shape[1])
        full += (1,) * (self.x.ndim - 2) if mode == "spatial" else tuple(self.x.shape[2:])
        short = (self.x.shape[1],) if mode == "spatial" else full[1:]
        self.param_shapes = (full, short)
        self.param_context = f" in {mode} mode"

    def activation_desc(self, activation: tuple):
        """The activation descriptor for steering's (code, params); the plan keeps it."""
        descriptor = ActivationDescriptor(*activation)
        self._descriptors.append(descriptor)
        return descriptor.ptr

    def optional_pair(self, first, second, names: tuple) -> tuple:
        if (first is None) != (second is None):
            raise ValueError(f"{names[0]} and {names[1]} go together: give both or neither")
        if first is None:
            return None, None
        return self.param(first, names[0], output=True), self.param(second, names[1], output=True)


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
    saved_inv_var=None,
    alpha: float = 1.0,
    beta: float = 0.0,
    y=None,
    activation=None,
    activation_params=(0.0, 0.0, 0.0),
    next_running_mean=None,
    next_running_var=None,
    handle: Optional[Handle] = None,
):
    """Normalizes x with its own batch statistics.

    Returns ``(y, saved_mean, saved_inv_var)``; the saved values (the mean and
    the inverse std 1/sqrt(var + epsilon), under MIOpen's name "inverse
    variance") are None when ``save_stats`` is False, and are written into
    ``saved_mean`` / ``saved_inv_var`` when those are given (both or
    neither), else into new arrays.  Given ``running_mean`` and
    ``running_var`` are updated in place: ``run = (1 - f) * run + f * stat``
    with f = ``exp_avg_factor`` (PyTorch's momentum) and the unbiased
    variance, or, with ``next_running_mean`` and ``next_running_var``
    (MIOpen's V3), read from the running arrays and written to the next ones.  ``y = alpha * result + beta * y_prior``, where
    result passes through ``activation`` (a mode name such as "relu", see
    ``miopen_bn.activation``, with ``activation_params`` = (alpha, beta,
    gamma)) when one is given.
    """
    arrays = (x, scale, bias, running_mean, running_var, saved_mean, saved_inv_var, y, next_running_mean,
              next_running_var)  # fmt: skip
    steering = (mode, bool(save_stats), beta != 0, _activation_steering(activation, activation_params))
    call = prepared.find(_TRAINING, handle, arrays, steering) or _checked_training(arrays, steering, handle)
    return call.run(arrays, (alpha, beta, exp_avg_factor, epsilon))


def _checked_training(arrays: tuple, steering: tuple, handle: Optional[Handle]):
    x, scale, bias, running_mean, running_var, saved_mean, saved_inv_var, y, next_mean, next_var = arrays
    mode, save_stats, blended, activation = steering
    call = _BnCall(x, mode, handle, (_TRAINING, arrays, steering))
    scale_v = call.param(scale, "scale")
    bias_v = call.param(bias, "bias")
    running_mean_v, running_var_v = call.optional_pair(
        running_mean, running_var, ("running_mean", "running_var")
    )
    previous = None  # V3: (previous mean, previous variance), read only
    if next_mean is not None or next_var is not None:
        if running_mean_v is None:
            raise ValueError("next_running_mean/next_running_var need running_mean and running_var to read from")
        previous = (running_mean_v, running_var_v)
        running_mean_v, running_var_v = call.optional_pair(
            next_mean, next_var, ("next_running_mean", "next_running_var")
        )
        reason = "the previous and next running statistics share a descriptor"
        call.require_same_layout(previous[0], running_mean_v, reason)
        call.require_same_layout(previous[1], running_var_v, reason)
    y_v = call.data_output(y, "y", call.x.dtype, "x", blended=blended)
    if not save_stats and (saved_mean is not None or saved_inv_var is not None):
        raise ValueError("saved_mean/saved_inv_var were given but save_stats is False")
    if (saved_mean is None) != (saved_inv_var is None):
        raise ValueError("saved_mean and saved_inv_var go together: give both or neither")
    saved_mean_v = saved_inv_var_v = None
    if save_stats:
        hint = "use save_stats=False"
        # One descriptor describes the running and the saved mean (and one the
        # two variances): new saved statistics take the running ones' dtype.
        saved_mean_v = call.param_output(
            saved_mean, "saved_mean", like=scale_v if running_mean_v is None else running_mean_v, hint=hint
        )
        saved_inv_var_v = call.param_output(
            saved_inv_var, "saved_inv_var", like=scale_v if running_var_v is None else running_var_v, hint=hint
        )
        if running_mean_v is not None:
            # One descriptor describes the running and the saved mean (and
            # one the two variances), so they must share strides.
            reason = "with save_stats=True the running and saved statistics share a descriptor"
            call.require_same_layout(running_mean_v, saved_mean_v, reason)
            call.require_same_layout(running_var_v, saved_inv_var_v, reason)
    mean_desc_view = running_mean_v if running_mean_v is not None else saved_mean_v
    var_desc_view = running_var_v if running_var_v is not None else saved_inv_var_v
    lib = call.library.lib
    functions = {
        (False, False): lib.miopenBatchNormalizationForwardTraining_V2,
        (False, True): lib.miopenBatchNormalizationForwardTraining_V3,
        (True, False): lib.miopenBatchNormForwardTrainingActivation,
        (True, True): lib.miopenBatchNormForwardTrainingActivation_V2,
    }
    function = functions[activation is not None, previous is not None]
    running = [call.ptr(running_mean_v), call.ptr(running_var_v)]
    if previous:
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
        call.desc(mean_desc_view),
        call.desc(var_desc_view),
        call.ptr(scale_v),
        call.ptr(bias_v),
        call.number("exp_avg_factor"),
        *running,
        call.number("epsilon"),
        call.ptr(saved_mean_v),
        call.ptr(saved_inv_var_v),
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
    steering = (mode, beta != 0, _activation_steering(activation, activation_params), bool(inverse_variance))
    call = prepared.find(_INFERENCE, handle, arrays, steering) or _checked_inference(arrays, steering, handle)
    return call.run(arrays, (alpha, beta, epsilon))


def _checked_inference(arrays: tuple, steering: tuple, handle: Optional[Handle]):
    x, scale, bias, mean, var, y = arrays
    mode, blended, activation, inverse = steering
    call = _BnCall(x, mode, handle, (_INFERENCE, arrays, steering))
    scale_v = call.param(scale, "scale")
    bias_v = call.param(bias, "bias")
    if (mean is None) != (var is None):
        raise ValueError("mean and var go together: give both, or neither for batch statistics")
    mean_v = None if mean is None else call.param(mean, "mean")
    var_v = None if var is None else call.param(var, "var")
    y_v = call.data_output(y, "y", call.x.dtype, "x", blended=blended)
    lib = call.library.lib
    functions = {
        (False, False): lib.miopenBatchNormalizationForwardInference_V2,
        (False, True): lib.miopenBatchNormalizationForwardInferenceInvVariance,
        (True, False): lib.miopenBatchNormForwardInferenceActivation,
        (True, True): lib.miopenBatchNormForwardInferenceActivationInvVariance,
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
    saved_inv_var=None,
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
):
    """Gradients of batch norm: returns ``(dx, dscale, dbias)``.

    The statistics come from ``saved_mean`` / ``saved_inv_var`` (the mean and
    inverse std, as returned by ``batchnorm_forward_training``) when both are
    given, else they are recomputed from x with ``epsilon``.  dy (and dx) may
    be x's dtype or float32.  ``dx = alpha_data * result + beta_data * dx_prior``, and
    likewise dscale/dbias with alpha_param/beta_param.  With ``activation``
    (as for training) dy is the gradient of the activation's output and
    ``bias`` is needed to recompute its input.
    """
    arrays = (x, dy, scale, saved_mean, saved_inv_var, dx, dscale, dbias, bias)
    steering = (mode, beta_data != 0, beta_param != 0, _activation_steering(activation, activation_params))
    call = prepared.find(_BACKWARD, handle, arrays, steering) or _checked_backward(arrays, steering, handle)
    return call.run(arrays, (alpha_data, beta_data, alpha_param, beta_param, epsilon))


def _checked_backward(arrays: tuple, steering: tuple, handle: Optional[Handle]):
    x, dy, scale, saved_mean, saved_inv_var, dx, dscale, dbias, bias = arrays
    mode, data_blended, param_blended, activation = steering
    call = _BnCall(x, mode, handle, (_BACKWARD, arrays, steering))
    dy_v = call.data(dy, "dy", "x_or_float32")
    scale_v = call.param(scale, "scale")
    if activation is not None and bias is None:
        raise ValueError("bias is needed with an activation (the activation's input is recomputed from it)")
    bias_v = None if activation is None else call.param(bias, "bias")
    saved_mean_v = saved_inv_var_v = None
    if (saved_mean is None) != (saved_inv_var is None):
        raise ValueError(
            "saved_mean and saved_inv_var go together: give both, or neither to recompute them from x"
        )
    if saved_mean is not None:
        saved_mean_v = call.param(saved_mean, "saved_mean")
        saved_inv_var_v = call.param(saved_inv_var, "saved_inv_var")
    dx_v = call.data_output(dx, "dx", dy_v.dtype, "x_or_float32", blended=data_blended)
    if dx_v.dtype != dy_v.dtype:
        raise TypeError(f"dx has dtype {dx_v.dtype} but dy has {dy_v.dtype} (they share one dtype)")
    dscale_v = call.param_output(dscale, "dscale", like=scale_v, blended=param_blended)
    dbias_v = call.param_output(dbias, "dbias", like=scale_v if bias_v is None else bias_v, blended=param_blended)
    # One descriptor describes both the scale and its gradient.
    call.require_same_layout(scale_v, dscale_v, "they share a descriptor in the C call")
    if bias_v is not None:
        call.require_same_layout(bias_v, dbias_v, "they share a descriptor in the C call")
    function = call.library.lib.miopenBatchNormalizationBackward_V2
    if activation is not None:
        function = call.library.lib.miopenBatchNormBackwardActivation
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
        call.desc(scale_v),
        call.desc(dbias_v),
        call.desc(saved_mean_v),
        call.desc(saved_inv_var_v),
        call.ptr(scale_v),
        *([] if activation is None else [call.ptr(bias_v)]),
        call.ptr(dscale_v),
        call.ptr(dbias_v),
        call.number("epsilon"),
        call.ptr(saved_mean_v),
        call.ptr(saved_inv_var_v),
        *([] if activation is None else [call.activation_desc(activation)]),
    )
