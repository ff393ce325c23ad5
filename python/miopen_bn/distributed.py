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
from .arrays import allocate_like
from .batchnorm import _BnCall
from .call import ArrayCall
from .handle import Handle

_LOCAL = prepared.Entry("batchnorm_local_statistics", ("x", "count", "mean", "m2"), (), ("count", "mean", "m2"))
_MERGE = prepared.Entry(
    "batchnorm_merge_statistics",
    # "x" is the partial mean: the array the call is adapted from first.
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
    """The dtype of new statistics: the one asked for, else float64 for float64 x, else float32."""
    if requested is None:
        return dtypes.FLOAT64 if x_dtype == dtypes.FLOAT64 else dtypes.FLOAT32
    return dtypes.name_of(requested)


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
    call = _LOCAL.find(handle, arrays, steering) or _adapted_local(arrays, steering, handle)
    return call.run(arrays, ())


def _adapted_local(arrays: tuple, steering: tuple, handle: Optional[Handle]):
    x, count, mean, m2 = arrays
    mode, stats_dtype = steering
    call = _BnCall(x, mode, handle, (_LOCAL, arrays, steering))
    named = ((count, "count"), (mean, "mean"), (m2, "m2"))
    given = next(((obj, name) for obj, name in named if obj is not None), None)
    if stats_dtype is None and given is not None:  # new statistics take the given ones' dtype
        stats_dtype = call.view(*given).dtype
    else:
        stats_dtype = _stats_dtype(stats_dtype, call.x.dtype)
    shape = tuple(call.x.shape[1:2] if mode == "spatial" else call.x.shape[1:])
    stats = []
    for obj, name in named:
        if obj is None:
            obj = allocate_like(call.x, name, shape, stats_dtype)
        stats.append(call.view(obj, name, output=True))
    return call.prepare(
        "miopenBNBatchNormLocalStatistics",
        call.handle.ptr,
        call.mode_code,
        *call.tensor(call.x),
        call.shared_desc(*stats),
        *(call.ptr(v) for v in stats),
    )


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
    call = _MERGE.find(handle, arrays, steering) or _adapted_merge(arrays, steering, handle)
    return call.run(arrays, (epsilon, exp_avg_factor))


def _adapted_merge(arrays: tuple, steering: tuple, handle: Optional[Handle]):
    mean, count, m2, saved_mean, saved_inv_std, running_mean, running_var = arrays
    (saved_dtype,) = steering
    call = ArrayCall(mean, handle, (_MERGE, arrays, steering))  # "x": the partial mean, (K,) + one rank's shape
    count_v, m2_v = call.view(count, "count"), call.view(m2, "m2")
    saved_dtype = call.x.dtype if saved_dtype is None else dtypes.name_of(saved_dtype)
    saved = []
    for obj, name in ((saved_mean, "saved_mean"), (saved_inv_std, "saved_inv_std")):
        if obj is None:
            obj = allocate_like(call.x, name, call.x.shape[1:], saved_dtype)
        saved.append(call.view(obj, name, output=True))
    running = [call.view(running_mean, "running_mean", output=True),
               call.view(running_var, "running_var", output=True)]
    return call.prepare(
        "miopenBNBatchNormMergeStatistics",
        call.handle.ptr,
        call.shared_desc(call.x, count_v, m2_v, as_parameter=False),
        call.ptr(count_v),
        call.ptr(call.x),
        call.ptr(m2_v),
        call.number("epsilon"),
        call.shared_desc(*saved),
        *(call.ptr(v) for v in saved),
        call.number("exp_avg_factor"),
        call.shared_desc(*running),
        *(call.ptr(v) for v in running),
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
    call = _NORMALIZE.find(handle, arrays, steering) or _adapted_normalize(arrays, steering, handle)
    return call.run(arrays, (alpha, beta))


def _adapted_normalize(arrays: tuple, steering: tuple, handle: Optional[Handle]):
    x, scale, bias, mean, inv_std, y = arrays
    mode, blended = steering
    call = _BnCall(x, mode, handle, (_NORMALIZE, arrays, steering))
    params = [call.view(a, n) for a, n in ((scale, "scale"), (bias, "bias"), (mean, "mean"), (inv_std, "inv_std"))]
    y_v = call.output(y, "y", call.x, same_layout=True, blended=blended)
    return call.prepare(
        "miopenBNBatchNormForwardNormalize",
        call.handle.ptr,
        call.mode_code,
        call.scalar("alpha"),
        call.scalar("beta"),
        *call.tensor(call.x),
        *call.tensor(y_v),
        call.shared_desc(*params),
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
    call = _REDUCE.find(handle, arrays, steering) or _adapted_reduce(arrays, steering, handle)
    return call.run(arrays, (alpha_param, beta_param))


def _adapted_reduce(arrays: tuple, steering: tuple, handle: Optional[Handle]):
    x, dy, mean, inv_std, sum_dy, sum_dy_xmu, dscale, dbias = arrays
    mode, param_grads, stats_dtype, blended = steering
    if not param_grads and (dscale is not None or dbias is not None):
        raise ValueError("dscale/dbias were given but param_grads is False")
    call = _BnCall(x, mode, handle, (_REDUCE, arrays, steering))
    dy_v = call.view(dy, "dy")
    mean_v, inv_std_v = call.view(mean, "mean"), call.view(inv_std, "inv_std")
    dscale_v = dbias_v = None
    if param_grads:
        dscale_v = call.output(dscale, "dscale", mean_v, blended=blended)
        dbias_v = call.output(dbias, "dbias", mean_v, blended=blended)
    given = sum_dy if sum_dy is not None else sum_dy_xmu
    if stats_dtype is None and given is not None:  # new sums take the given one's dtype
        stats_dtype = call.view(given, "sum_dy").dtype
    else:
        stats_dtype = _stats_dtype(stats_dtype, call.x.dtype)
    sums = [call.output(obj, name, mean_v, dtype=stats_dtype)
            for obj, name in ((sum_dy, "sum_dy"), (sum_dy_xmu, "sum_dy_xmu"))]
    return call.prepare(
        "miopenBNBatchNormBackwardReduce",
        call.handle.ptr,
        call.mode_code,
        call.scalar("alpha_param"),
        call.scalar("beta_param"),
        *call.tensor(call.x),
        *call.tensor(dy_v),
        call.shared_desc(mean_v, inv_std_v, dscale_v, dbias_v),
        call.ptr(mean_v),
        call.ptr(inv_std_v),
        call.ptr(dscale_v),
        call.ptr(dbias_v),
        call.shared_desc(*sums),
        *(call.ptr(v) for v in sums),
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
    call = _ELEMENTWISE.find(handle, arrays, steering) or _adapted_elementwise(arrays, steering, handle)
    return call.run(arrays, (alpha_data, beta_data))


def _adapted_elementwise(arrays: tuple, steering: tuple, handle: Optional[Handle]):
    x, dy, scale, mean, inv_std, sum_dy, sum_dy_xmu, count, dx = arrays
    mode, blended = steering
    call = _BnCall(x, mode, handle, (_ELEMENTWISE, arrays, steering))
    dy_v = call.view(dy, "dy")
    params = [call.view(a, n) for a, n in ((scale, "scale"), (mean, "mean"), (inv_std, "inv_std"))]
    stats = [call.view(a, n) for a, n in ((sum_dy, "sum_dy"), (sum_dy_xmu, "sum_dy_xmu"), (count, "count"))]
    dx_v = call.output(dx, "dx", call.x, dtype=dy_v.dtype, same_layout=True, blended=blended)
    return call.prepare(
        "miopenBNBatchNormBackwardElementwise",
        call.handle.ptr,
        call.mode_code,
        call.scalar("alpha_data"),
        call.scalar("beta_data"),
        *call.tensor(call.x),
        *call.tensor(dy_v),
        *call.tensor(dx_v),
        call.shared_desc(*params),
        *(call.ptr(v) for v in params),
        call.shared_desc(*stats),
        *(call.ptr(v) for v in stats),
    )
