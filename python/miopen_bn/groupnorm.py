"""Group normalization on arrays: each array adapted, then one C call, which
checks every argument (see call.py for what Python does, prepared.py for how
a repeated call skips even that).

x is (N, C[, D][, H][, W]) in any layout; ``num_groups`` (G) splits the C
channels into groups of C/G, and each (n, g) is normalized over its channels
at every position.  weight and bias are (C,) or (1, C, 1, ...), float32 or
x's dtype; mean and rstd are (N, G), float32 (float64 for float64 x).  The
library's refusals (G not dividing C, groups of fewer than two values, a
wrong shape or dtype...) come back as ``MIOpenError`` subclasses.
"""

from __future__ import annotations

from numbers import Integral
from typing import Optional

from . import dtypes, prepared
from .arrays import TensorView, allocate_like
from .call import ArrayCall
from .cdef import enum_value
from .handle import Handle

# miopenNormMode_t: weight and bias ignored, or applied.
_ELEMENTWISE_AFFINE, _WEIGHT_BIAS = enum_value("MIOPEN_ELEMENTWISE_AFFINE"), enum_value("MIOPEN_WEIGHT_BIAS")
_ACTIVATION_CODES = {None: enum_value("miopenBNActivationNone"), "swish": enum_value("miopenBNActivationSwish")}

_FORWARD = prepared.Entry(
    "groupnorm_forward", ("x", "weight", "bias", "y", "mean", "rstd"), ("epsilon", "swish_beta"), ("y", "mean", "rstd")
)
_BACKWARD = prepared.Entry(
    "groupnorm_backward",
    ("x", "dy", "weight", "mean", "rstd", "bias", "dx", "dweight", "dbias"),
    ("swish_beta",),
    ("dx", "dweight", "dbias"),
)


def _group_count(num_groups) -> int:
    """num_groups as the C ``uint64_t`` the library takes; the (N, G)
    statistics Python allocates need at least one group."""
    if isinstance(num_groups, bool) or not isinstance(num_groups, Integral):
        raise TypeError(f"num_groups must be an integer, got {type(num_groups).__name__}")
    if num_groups < 1:
        raise ValueError(f"num_groups is {num_groups} (must be at least 1)")
    return int(num_groups)


class _GnCall(ArrayCall):
    """A group-norm call: its group count, activation and affine mode."""

    def __init__(self, x, num_groups, activation, handle: Optional[Handle], signature: tuple):
        if activation not in _ACTIVATION_CODES:
            raise ValueError(f"activation must be None or 'swish', got {activation!r}")
        self.activation_code = _ACTIVATION_CODES[activation]
        self.num_groups = _group_count(num_groups)
        super().__init__(x, handle, signature)

    @staticmethod
    def affine_mode(weight) -> int:
        """MIOpen's mode code: weight and bias applied when weight is given."""
        return _ELEMENTWISE_AFFINE if weight is None else _WEIGHT_BIAS

    def statistic_output(self, given, name: str) -> Optional[TensorView]:
        """The mean or rstd output: ``given`` as it is (the library checks its
        (N, G) shape and dtype), else a new one, float32 (float64 for float64
        x).  None (nothing to allocate) for more groups than x has channels,
        which the library refuses whatever the statistics."""
        if given is not None:
            return self.view(given, name, output=True)
        if self.num_groups > (self.x.shape[1] if self.x.ndim > 1 else 0):
            return None
        stats_dtype = dtypes.FLOAT64 if self.x.dtype == dtypes.FLOAT64 else dtypes.FLOAT32
        stats = allocate_like(self.x, name, (self.x.shape[0], self.num_groups), stats_dtype)
        return self.view(stats, name, output=True)

    def stats_tensor(self, view: TensorView) -> tuple:
        """mean/rstd's (descriptor, pointer): described with their own (N, G) shape."""
        return self.tensor(view, as_parameter=False)


def groupnorm_forward(
    x,
    num_groups: int,
    weight=None,
    bias=None,
    *,
    epsilon: float = 1e-5,
    activation: Optional[str] = None,
    swish_beta: float = 1.0,
    y=None,
    mean=None,
    rstd=None,
    handle: Optional[Handle] = None,
):
    """Group-normalizes x: returns ``(y, mean, rstd)``.

    Per (n, g): ``y = (x - mean) * rstd * weight[c] + bias[c]`` with the
    biased variance and ``rstd = 1 / sqrt(var + epsilon)``; without weight
    and bias, ``y = (x - mean) * rstd``.  ``activation="swish"`` applies
    ``y / (1 + exp(-swish_beta * y))`` to the result (SiLU for beta 1).
    mean and rstd are (N, G) arrays, what ``groupnorm_backward`` needs,
    written into ``y``, ``mean`` and ``rstd`` when those are given (float32,
    float64 for float64 x; each allocated when not).  epsilon and swish_beta
    are passed as C floats.  ``weight`` is batch norm's ``scale`` (one per
    channel, as torch's GroupNorm and BatchNorm both call it).
    """
    arrays = (x, weight, bias, y, mean, rstd)
    # The type too: 2.0 == 2, but only an integer converts to the C count.
    steering = (type(num_groups), num_groups, activation)
    call = _FORWARD.find(handle, arrays, steering) or _adapted_forward(arrays, steering, handle)
    return call.run(arrays, (epsilon, swish_beta))


def _adapted_forward(arrays: tuple, steering: tuple, handle: Optional[Handle]):
    x, weight, bias, y, mean, rstd = arrays
    _, num_groups, activation = steering
    if weight is None and bias is not None:  # the mode would ignore it
        raise ValueError("bias was given without weight: give both, or neither for no affine transform")
    call = _GnCall(x, num_groups, activation, handle, (_FORWARD, arrays, steering))
    weight_v, bias_v = call.view(weight, "weight"), call.view(bias, "bias")
    y_v = call.output(y, "y", call.x, same_layout=True)
    mean_v = call.statistic_output(mean, "mean")
    rstd_v = call.statistic_output(rstd, "rstd")
    common = (call.handle.ptr, call.affine_mode(weight), *call.tensor(call.x), *call.tensor(weight_v),
              *call.tensor(bias_v), call.num_groups, call.number("epsilon"))
    outputs = (*call.tensor(y_v), *call.stats_tensor(mean_v), *call.stats_tensor(rstd_v))
    if activation is None:
        return call.prepare("miopenGroupNormForward", *common, *outputs)
    return call.prepare("miopenBNGroupNormForwardActivation", *common, call.activation_code,
                        call.number("swish_beta"), *outputs)


def groupnorm_backward(
    x,
    dy,
    num_groups: int,
    weight,
    mean,
    rstd,
    *,
    bias=None,
    activation: Optional[str] = None,
    swish_beta: float = 1.0,
    dx=None,
    dweight=None,
    dbias=None,
    handle: Optional[Handle] = None,
):
    """Gradients of group norm from the forward's saved mean and rstd:
    returns ``(dx, dweight, dbias)`` (dweight: batch norm's ``dscale``).

    With ``weight`` None (no affine transform) dweight and dbias are None.
    With ``activation="swish"`` the gradient goes through the fused swish
    first, which needs ``bias`` when ``weight`` is given (to recompute the
    swish's input).  dy and dx have x's shape and dtype.
    """
    arrays = (x, dy, weight, mean, rstd, bias, dx, dweight, dbias)
    steering = (type(num_groups), num_groups, activation)
    call = _BACKWARD.find(handle, arrays, steering) or _adapted_backward(arrays, steering, handle)
    return call.run(arrays, (swish_beta,))


def _adapted_backward(arrays: tuple, steering: tuple, handle: Optional[Handle]):
    x, dy, weight, mean, rstd, bias, dx, dweight, dbias = arrays
    _, num_groups, activation = steering
    if weight is None and (dweight is not None or dbias is not None):  # the mode would leave them unwritten
        raise ValueError("dweight and dbias are only computed with a weight (affine group norm)")
    call = _GnCall(x, num_groups, activation, handle, (_BACKWARD, arrays, steering))
    dy_v = call.view(dy, "dy")
    weight_v = call.view(weight, "weight")
    bias_v = call.view(bias, "bias")  # read only to differentiate a fused activation
    mean_v, rstd_v = call.view(mean, "mean"), call.view(rstd, "rstd")
    dx_v = call.output(dx, "dx", call.x, same_layout=True)
    dweight_v = dbias_v = None
    if weight_v is not None:
        dweight_v = call.output(dweight, "dweight", weight_v)
        dbias_v = call.output(dbias, "dbias", weight_v)
    return call.prepare(
        "miopenBNGroupNormBackward",
        call.handle.ptr,
        call.affine_mode(weight),
        *call.tensor(call.x),
        *call.tensor(dy_v),
        *call.tensor(weight_v),
        *call.tensor(bias_v),
        *call.stats_tensor(mean_v),
        *call.stats_tensor(rstd_v),
        call.num_groups,
        call.activation_code,
        call.number("swish_beta"),
        *call.tensor(dx_v),
        *call.tensor(dweight_v),
        *call.tensor(dbias_v),
    )
