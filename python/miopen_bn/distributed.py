"""Data-parallel batch norm on arrays: the split-phase ops, for a batch
split over K ranks (processes, GPUs) whose statistics the caller exchanges
with its own collectives (``miopen_bn.torch.SyncBatchNorm`` does it over
``torch.distributed``).

Forward, per rank::

    count, mean, m2 = batchnorm_local_statistics(x)           # this rank's partials
    # all-gather: stack every rank's partials along a new first axis (K, ...)
    saved_mean, saved_inv_std = batchnorm_merge_statistics(counts, means, m2s,
                                    running_mean=rm, running_var=rv)
    y = batchnorm_forward_normalize(x, scale, bias, saved_mean, saved_inv_std)

Backward::

    sum_dy, sum_dy_xmu, dscale, dbias = batchnorm_backward_reduce(x, dy, saved_mean, saved_inv_std)
    # all-reduce (sum) sum_dy and sum_dy_xmu over the ranks
    dx = batchnorm_backward_elementwise(x, dy, scale, saved_mean, saved_inv_std,
                                        sum_dy, sum_dy_xmu, total_count)

With one rank the five give what ``batchnorm_forward_training`` and
``batchnorm_backward`` give.  Parameter-shaped arrays take the shapes of
batchnorm.py ((C,) or (1, C, 1, 1) spatially, ...).  Statistics (count, mean,
M2, the gradient sums, the global count) are float32 or float64 whatever x's
dtype (float64 by default for float64 x, else float32); the arrays of one
group share a dtype and strides (one C descriptor describes them).
"""

from __future__ import annotations

from typing import Optional

from . import dtypes, prepared
from .arrays import TensorView, allocate_like
from .batchnorm import _BnCall
from .call import ArrayCall
from .handle import Handle

_STATS_DTYPES = (dtypes.FLOAT32, dtypes.FLOAT64)

_LOCAL = prepared.Entry("batchnorm_local_statistics", ("x", "count", "mean", "m2"), (), ("count", "mean", "m2"))
_MERGE = prepared.Entry(
    "batchnorm_merge_statistics",
    # "x" is the partial mean: the array the call's checks start from.
    ("x", "count", "m2", "saved_mean", "saved_inv_std", "running_mean", "running_var"),
    ("epsilon", "exp_avg_factor"),
    ("saved_mean", "saved_inv_std"),
)
_NORMALIZE = prepared.Entry(
    "batchnorm_forward_normalize", ("x", "scale", "bias", "mean", "inv_std", "y"), ("alpha", "beta"), ("y",)
)
_REDUCE = prepared.Entry(
    "batchnorm_backward_reduce",
    ("x", "dy", "mean", "inv_std", "sum_dy", "sum_dy_xmu", "dscale", "dbias"),
    ("alpha_param", "beta_param"),
    ("sum_dy", "sum_dy_xmu", "dscale", "dbias"),
)
_ELEMENTWISE = prepared.Entry(
    "batchnorm_backward_elementwise",
    ("x", "dy", "scale", "mean", "inv_std", "sum_dy", "sum_dy_xmu", "count", "dx"),
    ("alpha_data", "beta_data"),
    ("dx",),
)


def _stats_dtype(requested, x_dtype: str) -> str:
    """The statistics dtype: the one asked for, else float64 for float64 x, else float32."""
    if requested is None:
        return dtypes.FLOAT64 if x_dtype == dtypes.FLOAT64 else dtypes.FLOAT32
    name = dtypes.name_of(requested)
    if name not in _STATS_DTYPES:
        raise TypeError(f"statistics must be float32 or float64, got {name}")
    return name


class _SplitCall(_BnCall):
    """A split-phase call: the parameters of batchnorm.py plus one group of
    statistics arrays (parameter-shaped, float32 or float64, one dtype)."""

    def __init__(self, x, mode: str, handle: Optional[Handle], signature: tuple, stats_dtype=None):
        super().__init__(x, mode, handle, signature)
        self.stats_dtype = stats_dtype  # fixed by the first statistics array, or by the caller
        self._stats_views: list = []

    def stats(self, obj, name: str, *, output: bool = False) -> TensorView:
        view = self.param_shaped(obj, name, output=output)
        if view.dtype not in _STATS_DTYPES:
            raise TypeError(f"{name} has dtype {view.dtype}; statistics must be float32 or float64")
        if self.stats_dtype is None:
            self.stats_dtype = view.dtype
        elif view.dtype != self.stats_dtype:
            raise TypeError(
                f"{name} has dtype {view.dtype} but the statistics are {self.stats_dtype} "
                f"(they share one dtype)"
            )
        if output:
            self.check_writable(view)
        if self._stats_views:
            self.require_same_layout(self._stats_views[0], view, "the statistics share a descriptor in the C call")
        self._stats_views.append(view)
        return view

    def stats_output(self, obj, name: str) -> TensorView:
        if obj is None:
            dtype = self.stats_dtype or _stats_dtype(None, self.x.dtype)
            obj = allocate_like(self.x, name, self.param_shapes[1], dtype)
        return self.stats(obj, name, output=True)

    def shared_params(self, views: list) -> None:
        """Parameters one C descriptor describes must share strides."""
        for view in views[1:]:
            if view is not None:
                self.require_same_layout(views[0], view, "they share a descriptor in the C call")


def batchnorm_local_statistics(
    x,
    *,
    mode: str = "spatial",
    stats_dtype=None,
    count=None,
    mean=None,
    m2=None,
    handle: Optional[Handle] = None,
):
    """This rank's partial statistics of x, per feature: returns ``(count,
    mean, m2)`` with count the number of values reduced over (N*D*H*W
    spatially, N per activation; one is allowed) and ``m2 = sum((x -
    mean)**2)``.  Arrays given are written; the others are allocated in
    ``stats_dtype`` (float32, or float64 for float64 x)."""
    arrays = (x, count, mean, m2)
    steering = (mode, stats_dtype)
    call = prepared.find(_LOCAL, handle, arrays, steering) or _checked_local(arrays, steering, handle)
    return call.run(arrays, ())


def _checked_local(arrays: tuple, steering: tuple, handle: Optional[Handle]):
    x, count, mean, m2 = arrays
    mode, stats_dtype = steering
    call = _SplitCall(x, mode, handle, (_LOCAL, arrays, steering))
    call.stats_dtype = _stats_dtype(stats_dtype, call.x.dtype) if stats_dtype is not None else None
    given = [a for a in (count, mean, m2) if a is not None]
    if given and call.stats_dtype is None:
        call.stats_dtype = call.view(given[0], "count").dtype
    count_v = call.stats_output(count, "count")
    mean_v = call.stats_output(mean, "mean")
    m2_v = call.stats_output(m2, "m2")
    return call.prepare(
        call.library.lib.miopenBNBatchNormLocalStatistics,
        call.handle.ptr,
        call.mode_code,
        *call.tensor(call.x),
        call.desc(count_v),
        call.ptr(count_v),
        call.ptr(mean_v),
        call.ptr(m2_v),
    )


class _MergeCall(ArrayCall):
    """The merge: partials of shape (K, ...) as "x", outputs of the rest of
    that shape (with or without a leading 1)."""

    def __init__(self, mean, handle: Optional[Handle], signature: tuple):
        super().__init__(mean, handle, signature)
        rest = tuple(self.x.shape[1:])
        self.param_shapes = ((1,) + rest, rest)
        self.param_context = " (the partials' shape without its first axis)"
        if self.x.dtype not in _STATS_DTYPES:
            raise TypeError(f"mean has dtype {self.x.dtype}; partial statistics must be float32 or float64")

    def partial(self, obj, name: str) -> TensorView:
        view = self.view(obj, name)
        if view.shape != self.x.shape or view.dtype != self.x.dtype:
            raise ValueError(
                f"{name} ({view.dtype}, shape {view.shape}) must have mean's dtype and shape "
                f"({self.x.dtype}, {self.x.shape})"
            )
        self.require_same_layout(self.x, view, "the partials share a descriptor in the C call")
        return view

    def output_pair(self, first, second, names: tuple, dtype: Optional[str]) -> tuple:
        views = []
        for obj, name in zip((first, second), names):
            if obj is None:
                obj = allocate_like(self.x, name, self.param_shapes[1], dtype or self.x.dtype)
            view = self.param_shaped(obj, name, output=True)
            self.check_writable(view)
            views.append(view)
        if views[0].dtype != views[1].dtype:
            raise TypeError(f"{names[0]} ({views[0].dtype}) and {names[1]} ({views[1].dtype}) share one dtype")
        self.require_same_layout(views[0], views[1], "they share a descriptor in the C call")
        return tuple(views)


def batchnorm_merge_statistics(
    count,
    mean,
    m2,
    *,
    epsilon: float = 1e-5,
    exp_avg_factor: float = 0.1,
    running_mean=None,
    running_var=None,
    saved_mean=None,
    saved_inv_std=None,
    saved_dtype=None,
    handle: Optional[Handle] = None,
):
    """Merges K ranks' partial statistics, stacked along a new first axis
    (shape (K,) + one rank's statistics shape), into the whole batch's:
    returns ``(saved_mean, saved_inv_std)``, the mean and 1/sqrt(var +
    epsilon) with the biased variance.  Counts may differ between ranks.
    Given ``running_mean`` and ``running_var`` (any float dtype, both or
    neither) are updated in place with the variance unbiased over the global
    count.  New outputs are ``saved_dtype`` (default: the partials' dtype)."""
    arrays = (mean, count, m2, saved_mean, saved_inv_std, running_mean, running_var)
    steering = (saved_dtype,)
    call = prepared.find(_MERGE, handle, arrays, steering) or _checked_merge(arrays, steering, handle)
    return call.run(arrays, (epsilon, exp_avg_factor))


def _checked_merge(arrays: tuple, steering: tuple, handle: Optional[Handle]):
    mean, count, m2, saved_mean, saved_inv_std, running_mean, running_var = arrays
    (saved_dtype,) = steering
    call = _MergeCall(mean, handle, (_MERGE, arrays, steering))
    count_v = call.partial(count, "count")
    m2_v = call.partial(m2, "m2")
    if (saved_mean is None) != (saved_inv_std is None):
        raise ValueError("saved_mean and saved_inv_std go together: give both or neither")
    dtype = None if saved_dtype is None else dtypes.name_of(saved_dtype)
    saved = call.output_pair(saved_mean, saved_inv_std, ("saved_mean", "saved_inv_std"), dtype)
    if (running_mean is None) != (running_var is None):
        raise ValueError("running_mean and running_var go together: give both or neither")
    running = (None, None)
    if running_mean is not None:
        running = call.output_pair(running_mean, running_var, ("running_mean", "running_var"), None)
    return call.prepare(
        call.library.lib.miopenBNBatchNormMergeStatistics,
        call.handle.ptr,
        call.desc(call.x, as_parameter=False),
        call.ptr(count_v),
        call.ptr(call.x),
        call.ptr(m2_v),
        call.number("epsilon"),
        call.desc(saved[0]),
        call.ptr(saved[0]),
        call.ptr(saved[1]),
        call.number("exp_avg_factor"),
        call.desc(running[0]),
        call.ptr(running[0]),
        call.ptr(running[1]),
    )


def batchnorm_forward_normalize(
    x,
    scale,
    bias,
    mean,
    inv_std,
    *,
    mode: str = "spatial",
    alpha: float = 1.0,
    beta: float = 0.0,
    y=None,
    handle: Optional[Handle] = None,
):
    """``y = alpha * (scale * (x - mean) * inv_std + bias) + beta * y_prior``
    with the given mean and inverse standard deviation (as
    ``batchnorm_merge_statistics`` returns them).  scale, bias, mean and
    inv_std share one dtype (float32 or x's) and layout."""
    arrays = (x, scale, bias, mean, inv_std, y)
    steering = (mode, beta != 0)
    call = prepared.find(_NORMALIZE, handle, arrays, steering) or _checked_normalize(arrays, steering, handle)
    return call.run(arrays, (alpha, beta))


def _checked_normalize(arrays: tuple, steering: tuple, handle: Optional[Handle]):
    x, scale, bias, mean, inv_std, y = arrays
    mode, blended = steering
    call = _SplitCall(x, mode, handle, (_NORMALIZE, arrays, steering))
    params = [call.param(a, n) for a, n in ((scale, "scale"), (bias, "bias"), (mean, "mean"), (inv_std, "inv_std"))]
    call.shared_params(params)
    y_v = call.data_output(y, "y", call.x.dtype, "x", blended=blended)
    return call.prepare(
        call.library.lib.miopenBNBatchNormForwardNormalize,
        call.handle.ptr,
        call.mode_code,
        call.scalar("alpha"),
        call.scalar("beta"),
        *call.tensor(call.x),
        *call.tensor(y_v),
        call.desc(params[0]),
        *(call.ptr(v) for v in params),
    )


def batchnorm_backward_reduce(
    x,
    dy,
    mean,
    inv_std,
    *,
    mode: str = "spatial",
    param_grads: bool = True,
    stats_dtype=None,
    alpha_param: float = 1.0,
    beta_param: float = 0.0,
    sum_dy=None,
    sum_dy_xmu=None,
    dscale=None,
    dbias=None,
    handle: Optional[Handle] = None,
):
    """This rank's backward sums: returns ``(sum_dy, sum_dy_xmu, dscale,
    dbias)`` with ``sum_dy = sum(dy)`` and ``sum_dy_xmu = sum(dy * (x -
    mean))`` per feature (statistics dtype), and this rank's parameter
    gradients ``dbias = sum_dy``, ``dscale = sum_dy_xmu * inv_std`` (the
    parameter dtype; None when ``param_grads`` is False), blended as
    ``alpha_param * result + beta_param * prior``."""
    arrays = (x, dy, mean, inv_std, sum_dy, sum_dy_xmu, dscale, dbias)
    steering = (mode, bool(param_grads), stats_dtype, beta_param != 0)
    call = prepared.find(_REDUCE, handle, arrays, steering) or _checked_reduce(arrays, steering, handle)
    return call.run(arrays, (alpha_param, beta_param))


def _checked_reduce(arrays: tuple, steering: tuple, handle: Optional[Handle]):
    x, dy, mean, inv_std, sum_dy, sum_dy_xmu, dscale, dbias = arrays
    mode, param_grads, stats_dtype, blended = steering
    call = _SplitCall(x, mode, handle, (_REDUCE, arrays, steering))
    if stats_dtype is not None:
        call.stats_dtype = _stats_dtype(stats_dtype, call.x.dtype)
    dy_v = call.data(dy, "dy", "x_or_float32")
    mean_v = call.param(mean, "mean")
    inv_std_v = call.param(inv_std, "inv_std")
    dscale_v = dbias_v = None
    if param_grads:
        dscale_v = call.param_output(dscale, "dscale", like=mean_v, blended=blended)
        dbias_v = call.param_output(dbias, "dbias", like=mean_v, blended=blended)
    elif dscale is not None or dbias is not None:
        raise ValueError("dscale/dbias were given but param_grads is False")
    call.shared_params([mean_v, inv_std_v, dscale_v, dbias_v])
    sum_dy_v = call.stats_output(sum_dy, "sum_dy")
    sum_dy_xmu_v = call.stats_output(sum_dy_xmu, "sum_dy_xmu")
    return call.prepare(
        call.library.lib.miopenBNBatchNormBackwardReduce,
        call.handle.ptr,
        call.mode_code,
        call.scalar("alpha_param"),
        call.scalar("beta_param"),
        *call.tensor(call.x),
        *call.tensor(dy_v),
        call.desc(mean_v),
        call.ptr(mean_v),
        call.ptr(inv_std_v),
        call.ptr(dscale_v),
        call.ptr(dbias_v),
        call.desc(sum_dy_v),
        call.ptr(sum_dy_v),
        call.ptr(sum_dy_xmu_v),
    )


def batchnorm_backward_elementwise(
    x,
    dy,
    scale,
    mean,
    inv_std,
    sum_dy,
    sum_dy_xmu,
    count,
    *,
    mode: str = "spatial",
    alpha_data: float = 1.0,
    beta_data: float = 0.0,
    dx=None,
    handle: Optional[Handle] = None,
):
    """dx from every rank's summed ``sum_dy`` / ``sum_dy_xmu`` and the global
    ``count`` per feature (statistics arrays):
    ``dx = scale * inv_std * (dy - sum_dy/count - (x - mean) * inv_std**2 * sum_dy_xmu/count)``,
    blended as ``alpha_data * dx + beta_data * dx_prior``.  dy and dx share a
    dtype, x's or float32."""
    arrays = (x, dy, scale, mean, inv_std, sum_dy, sum_dy_xmu, count, dx)
    steering = (mode, beta_data != 0)
    call = prepared.find(_ELEMENTWISE, handle, arrays, steering) or _checked_elementwise(arrays, steering, handle)
    return call.run(arrays, (alpha_data, beta_data))


def _checked_elementwise(arrays: tuple, steering: tuple, handle: Optional[Handle]):
    x, dy, scale, mean, inv_std, sum_dy, sum_dy_xmu, count, dx = arrays
    mode, blended = steering
    call = _SplitCall(x, mode, handle, (_ELEMENTWISE, arrays, steering))
    dy_v = call.data(dy, "dy", "x_or_float32")
    params = [call.param(a, n) for a, n in ((scale, "scale"), (mean, "mean"), (inv_std, "inv_std"))]
    call.shared_params(params)
    stats = [call.stats(a, n) for a, n in ((sum_dy, "sum_dy"), (sum_dy_xmu, "sum_dy_xmu"), (count, "count"))]
    dx_v = call.data_output(dx, "dx", dy_v.dtype, "x_or_float32", blended=blended)
    if dx_v.dtype != dy_v.dtype:
        raise TypeError(f"dx has dtype {dx_v.dtype} but dy has {dy_v.dtype} (they share one dtype)")
    return call.prepare(
        call.library.lib.miopenBNBatchNormBackwardElementwise,
        call.handle.ptr,
        call.mode_code,
        call.scalar("alpha_data"),
        call.scalar("beta_data"),
        *call.tensor(call.x),
        *call.tensor(dy_v),
        *call.tensor(dx_v),
        call.desc(params[0]),
        *(call.ptr(v) for v in params),
        call.desc(stats[0]),
        *(call.ptr(v) for v in stats),
    )
