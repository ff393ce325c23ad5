"""Batch normalization on arrays: argument checks in Python, then one C call.

Every argument is checked (shape, dtype, strides, host or device) before the
library is called, with a message naming it, so a rejected call writes no
output.  Missing outputs are allocated in the input's array library; y and dx
follow x's memory layout (NHWC stays NHWC).

Parameter arrays (scale, bias, means, variances and their gradients) take the
parameter descriptor's shape with or without its leading 1: (C,) or
(1, C, 1, 1) spatially, (C, H, W) or (1, C, H, W) per activation, and
likewise for ranks 2, 3 and 5.  They share one dtype: float32, or x's.
"""

from __future__ import annotations

from typing import Optional

from . import arrays, dtypes
from .arrays import DEVICE, HOST, TensorView
from .descriptor import TensorDescriptor, mode_code
from .handle import Handle, default_handle
from .library import load

_BACKEND_FOR_LOCATION = {HOST: "cpu", DEVICE: "gpu", None: "auto"}
_LOCATION_FOR_BACKEND = {"cpu": HOST, "gpu": DEVICE}


class _BnCall:
    """The tensors of one call: checked, described, and kept alive until it returns."""

    def __init__(self, x, mode: str, handle: Optional[Handle]):
        self.library = load()
        self.ffi = self.library.ffi
        self.mode = mode
        self.mode_code = mode_code(mode)
        if handle is None:
            handle = default_handle(_BACKEND_FOR_LOCATION[arrays.location_of(x)])
        elif not isinstance(handle, Handle):
            raise TypeError(f"handle must be a miopen_bn.Handle, got {type(handle).__name__}")
        self.handle = handle
        self.backend = handle.backend
        self.stream = handle.stream if self.backend == "gpu" else None
        self._descriptors: list = []
        self._keepalive: list = []
        self.x = self.view(x, "x")
        if not 2 <= self.x.ndim <= 5:
            raise ValueError(f"x must have 2 to 5 dimensions (N, C[, D][, H][, W]), got shape {self.x.shape}")
        if 0 in self.x.shape:
            raise ValueError(f"x has an empty dimension: shape {self.x.shape}")
        full = (1, self.x.shape[1])
        full += (1,) * (self.x.ndim - 2) if mode == "spatial" else tuple(self.x.shape[2:])
        short = (self.x.shape[1],) if mode == "spatial" else full[1:]
        self.param_shapes = (full, short)
        self.param_dtype: Optional[str] = None

    # -- views ---------------------------------------------------------------
    def view(self, obj, name: str, *, output: bool = False) -> TensorView:
        view = arrays.view_of(obj, name, output=output, stream=self.stream)
        expected = _LOCATION_FOR_BACKEND[self.backend]
        if view.location is not None and view.location != expected:
            where = "device (GPU) memory" if view.location == DEVICE else "host memory"
            raise ValueError(
                f"{name} is {where} but the handle runs on the {self.backend.upper()}; "
                f"pass {'host (NumPy)' if expected == HOST else 'device'} arrays or "
                f"another handle"
            )
        if view.strides is None and not output:
            raise ValueError(
                f"{name} has strides the library cannot address "
                f"(negative, zero or misaligned); make it contiguous"
            )
        self._keepalive.append(view)
        return view

    def _check_writable(self, view: TensorView) -> None:
        if view.strides is None:
            raise ValueError(
                f"{view.name} has strides the library cannot write through "
                f"(negative, zero or misaligned): shape {view.shape}"
            )
        if not view.writable:
            raise ValueError(f"{view.name} is read-only")
        if view.may_self_overlap():
            raise ValueError(
                f"{view.name} has overlapping strides {view.strides}; outputs need "
                f"each element in its own memory"
            )

    def data(self, obj, name: str, dtype_rule: str, *, output: bool = False) -> TensorView:
        """A tensor with x's shape.  dtype_rule: "x" (x's dtype) or "x_or_float32"."""
        view = self.view(obj, name, output=output)
        if view.shape != self.x.shape:
            raise ValueError(f"{name} has shape {view.shape} but x has shape {self.x.shape}")
        allowed = {self.x.dtype} if dtype_rule == "x" else {self.x.dtype, dtypes.FLOAT32}
        if view.dtype not in allowed:
            raise TypeError(f"{name} has dtype {view.dtype} but must be {' or '.join(sorted(allowed))}")
        if output:
            self._check_writable(view)
        return view

    def param(self, obj, name: str, *, output: bool = False) -> TensorView:
        """A parameter-shaped tensor; the first one given fixes the parameter dtype."""
        view = self.view(obj, name, output=output)
        if view.shape not in self.param_shapes:
            full, short = self.param_shapes
            raise ValueError(
                f"{name} has shape {view.shape} but must be {short} or {full} "
                f"for x of shape {self.x.shape} in {self.mode} mode"
            )
        if self.param_dtype is None:
            if view.dtype not in (dtypes.FLOAT32, self.x.dtype):
                raise TypeError(
                    f"{name} has dtype {view.dtype}; parameters must be float32 or x's dtype ({self.x.dtype})"
                )
            self.param_dtype = view.dtype
        elif view.dtype != self.param_dtype:
            raise TypeError(
                f"{name} has dtype {view.dtype} but the parameters are "
                f"{self.param_dtype} (all parameters share one dtype)"
            )
        if output:
            self._check_writable(view)
        return view

    def optional_pair(self, first, second, names: tuple) -> tuple:
        if (first is None) != (second is None):
            raise ValueError(f"{names[0]} and {names[1]} go together: give both or neither")
        if first is None:
            return None, None
        return self.param(first, names[0], output=True), self.param(second, names[1], output=True)

    # -- outputs -------------------------------------------------------------
    def data_output(self, obj, name: str, dtype: str, dtype_rule: str, blended: bool) -> TensorView:
        if obj is not None:
            return self.data(obj, name, dtype_rule, output=True)
        if blended:
            raise ValueError(f"{name} must be given when its beta is nonzero (the result is blended into it)")
        allocated = arrays.allocate_like(self.x, name, self.x.shape, dtype, layout=self.x)
        return self.data(allocated, name, dtype_rule, output=True)

    def param_output(
        self, obj, name: str, like: TensorView, blended: bool = False, hint: str = ""
    ) -> TensorView:
        if obj is not None:
            return self.param(obj, name, output=True)
        if blended:
            raise ValueError(f"{name} must be given when its beta is nonzero (the result is blended into it)")
        allocated = arrays.allocate_like(like, name, like.shape, like.dtype, hint=hint)
        return self.param(allocated, name, output=True)

    def require_same_strides(self, a: TensorView, b: TensorView, reason: str) -> None:
        """Two parameter tensors that one C descriptor will describe."""
        shape, a_strides = self._padded(a)
        _, b_strides = self._padded(b)
        used = [i for i, n in enumerate(shape) if n > 1]
        if [a_strides[i] for i in used] != [b_strides[i] for i in used]:
            raise ValueError(
                f"{a.name} (strides {a.strides}) and {b.name} (strides {b.strides}) must "
                f"have the same layout: {reason}"
            )

    def _padded(self, view: TensorView) -> tuple:
        """Shape and strides at x's rank (a parameter may omit its leading 1)."""
        if len(view.shape) == self.x.ndim:
            return tuple(view.shape), tuple(view.strides)
        full = self.param_shapes[0]
        trailing = len(full) - 1 - len(view.shape)  # (C,) in spatial mode
        return full, (1,) + tuple(view.strides) + (1,) * trailing

    # -- C arguments ---------------------------------------------------------
    def desc(self, view: Optional[TensorView]):
        if view is None:
            return self.ffi.NULL
        shape, strides = self._padded(view)
        descriptor = TensorDescriptor(view.dtype, shape, strides)
        self._descriptors.append(descriptor)
        return descriptor.ptr

    def ptr(self, view: Optional[TensorView]):
        return self.ffi.NULL if view is None else self.ffi.cast("void*", view.ptr)

    def scalar(self, value: float, name: str):
        try:
            return self.ffi.new("float*", float(value))
        except (TypeError, ValueError):
            raise TypeError(f"{name} must be a real number, got {value!r}") from None

    def run(self, function, *args) -> None:
        try:
            self.library.check(function(*args))
        finally:
            for descriptor in self._descriptors:
                descriptor.close()


def _source(view: Optional[TensorView]):
    return None if view is None else view.source


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
    handle: Optional[Handle] = None,
):
    """Normalizes x with its own batch statistics.

    Returns ``(y, saved_mean, saved_inv_var)``; the saved values (the mean and
    1/sqrt(var + epsilon)) are None when ``save_stats`` is False, and are
    written into ``saved_mean`` / ``saved_inv_var`` when those are given
    (both or neither), else into new arrays.  Given ``running_mean`` and
    ``running_var`` are updated in place: ``run = (1 - f) * run + f * stat``
    with the unbiased variance.  ``y = alpha * result + beta * y_prior``.
    """
    call = _BnCall(x, mode, handle)
    scale_v = call.param(scale, "scale")
    bias_v = call.param(bias, "bias")
    running_mean_v, running_var_v = call.optional_pair(
        running_mean, running_var, ("running_mean", "running_var")
    )
    y_v = call.data_output(y, "y", call.x.dtype, "x", blended=beta != 0)
    if not save_stats and (saved_mean is not None or saved_inv_var is not None):
        raise ValueError("saved_mean/saved_inv_var were given but save_stats is False")
    if (saved_mean is None) != (saved_inv_var is None):
        raise ValueError("saved_mean and saved_inv_var go together: give both or neither")
    saved_mean_v = saved_inv_var_v = None
    if save_stats:
        hint = "use save_stats=False"
        saved_mean_v = call.param_output(saved_mean, "saved_mean", like=scale_v, hint=hint)
        saved_inv_var_v = call.param_output(saved_inv_var, "saved_inv_var", like=scale_v, hint=hint)
        if running_mean_v is not None:
            # One descriptor describes the running and the saved mean (and
            # one the two variances), so they must share strides.
            reason = "with save_stats=True the running and saved statistics share a descriptor"
            call.require_same_strides(running_mean_v, saved_mean_v, reason)
            call.require_same_strides(running_var_v, saved_inv_var_v, reason)
    mean_desc_view = running_mean_v if running_mean_v is not None else saved_mean_v
    var_desc_view = running_var_v if running_var_v is not None else saved_inv_var_v
    lib = call.library.lib
    call.run(
        lib.miopenBatchNormalizationForwardTraining_V2,
        call.handle.ptr,
        call.mode_code,
        call.scalar(alpha, "alpha"),
        call.scalar(beta, "beta"),
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
        float(exp_avg_factor),
        call.ptr(running_mean_v),
        call.ptr(running_var_v),
        float(epsilon),
        call.ptr(saved_mean_v),
        call.ptr(saved_inv_var_v),
    )
    return y_v.source, _source(saved_mean_v), _source(saved_inv_var_v)


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
    handle: Optional[Handle] = None,
):
    """``y = scale * (x - mean) / sqrt(var + epsilon) + bias`` with the given
    estimates; with ``mean`` and ``var`` both None, the batch's own statistics
    (nothing else is written).  A negative ``var + epsilon`` gives NaN."""
    call = _BnCall(x, mode, handle)
    scale_v = call.param(scale, "scale")
    bias_v = call.param(bias, "bias")
    if (mean is None) != (var is None):
        raise ValueError("mean and var go together: give both, or neither for batch statistics")
    mean_v = None if mean is None else call.param(mean, "mean")
    var_v = None if var is None else call.param(var, "var")
    y_v = call.data_output(y, "y", call.x.dtype, "x", blended=beta != 0)
    lib = call.library.lib
    call.run(
        lib.miopenBatchNormalizationForwardInference_V2,
        call.handle.ptr,
        call.mode_code,
        call.scalar(alpha, "alpha"),
        call.scalar(beta, "beta"),
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
        float(epsilon),
    )
    return y_v.source


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
    handle: Optional[Handle] = None,
):
    """Gradients of batch norm: returns ``(dx, dscale, dbias)``.

    The statistics come from ``saved_mean`` / ``saved_inv_var`` (as returned by
    ``batchnorm_forward_training``) when both are given, else they are
    recomputed from x with ``epsilon``.  dy (and dx) may be x's dtype or
    float32.  ``dx = alpha_data * result + beta_data * dx_prior``, and
    likewise dscale/dbias with alpha_param/beta_param.
    """
    call = _BnCall(x, mode, handle)
    dy_v = call.data(dy, "dy", "x_or_float32")
    scale_v = call.param(scale, "scale")
    saved_mean_v = saved_inv_var_v = None
    if (saved_mean is None) != (saved_inv_var is None):
        raise ValueError(
            "saved_mean and saved_inv_var go together: give both, or neither to recompute them from x"
        )
    if saved_mean is not None:
        saved_mean_v = call.param(saved_mean, "saved_mean")
        saved_inv_var_v = call.param(saved_inv_var, "saved_inv_var")
    dx_v = call.data_output(dx, "dx", dy_v.dtype, "x_or_float32", blended=beta_data != 0)
    if dx_v.dtype != dy_v.dtype:
        raise TypeError(f"dx has dtype {dx_v.dtype} but dy has {dy_v.dtype} (they share one dtype)")
    dscale_v = call.param_output(dscale, "dscale", like=scale_v, blended=beta_param != 0)
    dbias_v = call.param_output(dbias, "dbias", like=scale_v, blended=beta_param != 0)
    # One descriptor describes both the scale and its gradient.
    call.require_same_strides(scale_v, dscale_v, "they share a descriptor in the C call")
    lib = call.library.lib
    call.run(
        lib.miopenBatchNormalizationBackward_V2,
        call.handle.ptr,
        call.mode_code,
        call.scalar(alpha_data, "alpha_data"),
        call.scalar(beta_data, "beta_data"),
        call.scalar(alpha_param, "alpha_param"),
        call.scalar(beta_param, "beta_param"),
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
        call.ptr(dscale_v),
        call.ptr(dbias_v),
        float(epsilon),
        call.ptr(saved_mean_v),
        call.ptr(saved_inv_var_v),
    )
    return dx_v.source, dscale_v.source, dbias_v.source
