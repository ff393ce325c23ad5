"""The library's calls on torch tensors, with as little Python as possible.

This is the hot path under every op and module of ``miopen_bn.torch``: it
reads each tensor's dtype, shape, strides and address straight from torch,
looks up cached descriptors, allocates the outputs with torch (so CUDA
outputs come from torch's caching allocator, also during graph capture) and
makes the C call, through declarations that take every pointer as an integer
address (``Library.by_address``): torch's ``data_ptr()``, a cached
descriptor's or handle's address, pass as they are, with no cffi object made
per argument.  It checks nothing the library checks: a bad argument comes
back as the library's status, raised as the matching ``MIOpenError``.

Handles: one per thread for CPU tensors; for CUDA tensors one per (device,
stream), the stream being torch's current stream at the call, so the work is
ordered with torch's own.  Creating a GPU handle allocates its workspace and
waits for the device, which a stream being captured into a CUDA graph does
not allow; so a ready spare handle is kept per device, made outside any
capture, and a capture on a stream seen for the first time takes it.
"""

from __future__ import annotations

import threading

import torch

from ..descriptor import described
from ..handle import Handle
from ..library import load

_library = load()
ffi, lib = _library.ffi, _library.lib
check = _library.check
_c = _library.by_address(
    "miopenBatchNormalizationForwardTraining_V2", "miopenBatchNormalizationForwardInference_V2",
    "miopenBatchNormalizationBackward_V2", "miopenGroupNormForward", "miopenBNGroupNormForwardActivation",
    "miopenBNGroupNormBackward")


def _address(cdata) -> int:
    return int(ffi.cast("uintptr_t", cdata))


# torch dtypes the library has a miopenDataType_t for; it decides which it computes on.
_DTYPE_CODE = {
    torch.float16: lib.miopenHalf,
    torch.float32: lib.miopenFloat,
    torch.bfloat16: lib.miopenBFloat16,
    torch.float64: lib.miopenDouble,
    torch.int32: lib.miopenInt32,
    torch.int8: lib.miopenInt8,
    torch.int64: lib.miopenInt64,
}
SPATIAL = lib.miopenBNSpatial
NO_ACTIVATION, SWISH = lib.miopenBNActivationNone, lib.miopenBNActivationSwish
_AFFINE, _NOT_AFFINE = lib.MIOPEN_WEIGHT_BIAS, lib.MIOPEN_ELEMENTWISE_AFFINE

# alpha = 1, beta = 0: MIOpen's blending factors, passed by pointer.
_ONE_ZERO = ffi.new("float[2]", [1.0, 0.0])
_ONE, _ZERO = _address(_ONE_ZERO), _address(_ONE_ZERO + 1)
NULL = 0

# --------------------------------------------------------------------------- #
# Descriptors: one per (dtype, shape, strides), never changed once set; the
# library only reads them during a call, so threads share them.
# --------------------------------------------------------------------------- #
_DESCRIPTOR_LIMIT = 4096
_descriptors: dict = {}  # key -> the descriptor's address, what calls pass
_descriptor_owners: dict = {}  # key -> the TensorDescriptor that owns it
_retired: dict = {}  # the previous generation, alive until the next overflow: in-flight calls may use it


def _described(key: tuple, dtype, shape: tuple, strides: tuple):
    code = _DTYPE_CODE.get(dtype)
    if code is None:
        raise TypeError(f"miopen_bn computes on float16, bfloat16, float32 and float64 tensors, not {dtype}")
    descriptor = described(code, shape, strides)
    global _descriptor_owners, _retired
    if len(_descriptors) >= _DESCRIPTOR_LIMIT:  # a process cycling through this many layouts re-makes them
        _descriptors.clear()
        _retired, _descriptor_owners = _descriptor_owners, {}
    _descriptor_owners[key] = descriptor
    address = _descriptors[key] = _address(descriptor.ptr)
    return address


def data_desc(t: torch.Tensor):
    """The descriptor of a data tensor (x, y, dy, dx) as it lies in memory."""
    key = (t.dtype, t.shape, t.stride())
    found = _descriptors.get(key)
    return found if found is not None else _described(key, t.dtype, tuple(t.shape), t.stride())


def param_desc(t: torch.Tensor, rank: int):
    """The descriptor of a per-channel tensor (C,) at x's rank: (1, C, 1, ...)."""
    key = (t.dtype, rank, t.shape, t.stride())
    found = _descriptors.get(key)
    if found is None:
        pad = (1,) * (rank - 1 - t.dim())
        found = _described(key, t.dtype, (1,) + tuple(t.shape) + pad, (1,) + t.stride() + pad)
    return found


# --------------------------------------------------------------------------- #
# Handles
# --------------------------------------------------------------------------- #
_per_thread = threading.local()
_gpu_handles: dict = {}  # (device, stream) -> Handle
_gpu_handle_ptrs: dict = {}  # (device, stream) -> its address
_spares: dict = {}  # device -> a GPU handle made outside any capture, not yet bound to a stream
_lock = threading.Lock()
try:
    _raw_stream = torch._C._cuda_getCurrentRawStream  # what torch's own generated code reads
except AttributeError:  # a build without CUDA
    _raw_stream = None


def cpu_handle():
    try:
        return _per_thread.cpu
    except AttributeError:
        handle = Handle("cpu")
        _per_thread.cpu_owner = handle
        _per_thread.cpu = _address(handle.ptr)
        return _per_thread.cpu


def handle_for(t: torch.Tensor):
    """The handle to run on ``t``'s device: torch's current stream on a GPU."""
    device = t.get_device()
    if device < 0:
        return cpu_handle()
    key = (device, _raw_stream(device))
    found = _gpu_handle_ptrs.get(key)
    return found if found is not None else _bind_gpu_handle(key)


def _made_on(device: int) -> Handle:
    with torch.cuda.device(device):
        return Handle("gpu")


def _bind_gpu_handle(key: tuple):
    device, stream = key
    with _lock:
        capturing = torch.cuda.is_current_stream_capturing()
        handle = _spares.pop(device, None)
        if handle is None:
            if capturing:
                raise RuntimeError(
                    f"miopen_bn: first use of CUDA device {device} inside a CUDA graph capture; run the "
                    f"model once before capturing (as torch.cuda.graph's documentation asks)"
                )
            handle = _made_on(device)
        handle.stream = stream
        _gpu_handles[key] = handle
        _gpu_handle_ptrs[key] = _address(handle.ptr)
        if not capturing:
            _spares[device] = _made_on(device)
        return _gpu_handle_ptrs[key]


def _alike(t: torch.Tensor) -> torch.Tensor:
    """A new tensor with ``t``'s strides, whatever they are (empty_like makes
    a strided (C,) view contiguous, which t's descriptor would not describe)."""
    if t.is_contiguous():
        return torch.empty_like(t)
    return torch.empty_strided(t.shape, t.stride(), dtype=t.dtype, device=t.device)


# --------------------------------------------------------------------------- #
# Batch norm (spatial: one statistic per channel, as torch's modules)
# --------------------------------------------------------------------------- #
def batch_norm_train(x, weight, bias, running_mean, running_var, factor: float, eps: float, save: bool = True):
    """y, saved mean, saved 1/sqrt(var + eps) (None, None unless ``save``);
    updates the running statistics in place when given (with the unbiased
    variance)."""
    y = torch.empty_like(x)
    rank = x.dim()
    p = param_desc(weight, rank)
    if running_mean is None:
        stats_desc = var_desc = p
        rm = rv = NULL
        like = weight
    else:
        stats_desc, var_desc = param_desc(running_mean, rank), param_desc(running_var, rank)
        rm, rv = running_mean.data_ptr(), running_var.data_ptr()
        like = running_mean
    if save:  # described by the running statistics' descriptors: laid out like them
        saved_mean, saved_invstd = _alike(like), _alike(like)
        sm, si = saved_mean.data_ptr(), saved_invstd.data_ptr()
    else:
        saved_mean = saved_invstd = None
        sm = si = NULL
    check(_c.miopenBatchNormalizationForwardTraining_V2(
        handle_for(x), SPATIAL, _ONE, _ZERO, data_desc(x), x.data_ptr(), data_desc(y), y.data_ptr(),
        p, param_desc(bias, rank), stats_desc, var_desc, weight.data_ptr(), bias.data_ptr(),
        factor, rm, rv, eps, sm, si))
    return y, saved_mean, saved_invstd


def batch_norm_infer(x, weight, bias, mean, var, eps: float):
    """y from the given statistics (None, None: the batch's own)."""
    y = torch.empty_like(x)
    rank = x.dim()
    if mean is None:
        mean_desc = var_desc = NULL
        mean_ptr = var_ptr = NULL
    else:
        mean_desc, var_desc = param_desc(mean, rank), param_desc(var, rank)
        mean_ptr, var_ptr = mean.data_ptr(), var.data_ptr()
    check(_c.miopenBatchNormalizationForwardInference_V2(
        handle_for(x), SPATIAL, _ONE, _ZERO, data_desc(x), x.data_ptr(), data_desc(y), y.data_ptr(),
        param_desc(weight, rank), param_desc(bias, rank), mean_desc, var_desc,
        weight.data_ptr(), bias.data_ptr(), mean_ptr, var_ptr, eps))
    return y


def batch_norm_backward(x, dy, weight, saved_mean, saved_invstd, eps: float):
    """dx, dweight, dbias from the training forward's saved statistics."""
    dx = torch.empty_like(x) if dy.dtype == x.dtype else torch.empty_like(x, dtype=dy.dtype)
    dweight = _alike(weight)  # both described by weight's descriptor
    dbias = _alike(weight)
    rank = x.dim()
    p = param_desc(weight, rank)
    s = param_desc(saved_mean, rank)
    check(_c.miopenBatchNormalizationBackward_V2(
        handle_for(x), SPATIAL, _ONE, _ZERO, _ONE, _ZERO, data_desc(x), x.data_ptr(),
        data_desc(dy), dy.data_ptr(), data_desc(dx), dx.data_ptr(), p, p, s, s,
        weight.data_ptr(), dweight.data_ptr(), dbias.data_ptr(), eps, saved_mean.data_ptr(),
        saved_invstd.data_ptr()))
    return dx, dweight, dbias


# --------------------------------------------------------------------------- #
# Group norm
# --------------------------------------------------------------------------- #
def _optional_param(t, rank: int) -> tuple:
    """(descriptor, address) of a weight or bias, (NULL, NULL) without one."""
    return (NULL, NULL) if t is None else (param_desc(t, rank), t.data_ptr())


def _stats_dtype(x):
    return torch.float64 if x.dtype == torch.float64 else torch.float32


def group_norm_forward(x, num_groups: int, weight, bias, eps: float, swish: bool, stats: bool = True):
    """y (through SiLU when ``swish``), mean and rstd of shape (N, G) (None,
    None unless ``stats``)."""
    y = torch.empty_like(x)
    rank = x.dim()
    mode = _NOT_AFFINE if weight is None else _AFFINE
    w_desc, w_ptr = _optional_param(weight, rank)
    b_desc, b_ptr = _optional_param(bias, rank)
    if stats:
        mean = x.new_empty((x.shape[0], num_groups), dtype=_stats_dtype(x))
        rstd = torch.empty_like(mean)
        s, mean_ptr, rstd_ptr = data_desc(mean), mean.data_ptr(), rstd.data_ptr()
    else:  # the library writes them only when given
        mean = rstd = None
        s = mean_ptr = rstd_ptr = NULL
    head = (handle_for(x), mode, data_desc(x), x.data_ptr(), w_desc, w_ptr, b_desc, b_ptr, num_groups, eps)
    tail = (data_desc(y), y.data_ptr(), s, mean_ptr, s, rstd_ptr)
    if swish:
        check(_c.miopenBNGroupNormForwardActivation(*head, SWISH, 1.0, *tail))
    else:
        check(_c.miopenGroupNormForward(*head, *tail))
    return y, mean, rstd


def group_norm_backward(x, dy, num_groups: int, weight, bias, mean, rstd, swish: bool):
    """dx, dweight, dbias (the last two None without weight)."""
    dx = torch.empty_like(x)
    rank = x.dim()
    s = data_desc(mean)
    w_desc, w_ptr = _optional_param(weight, rank)
    b_desc, b_ptr = _optional_param(bias, rank)
    if weight is None:
        mode = _NOT_AFFINE
        dw_ptr = db_ptr = NULL
        dweight = dbias = None
        db_desc = NULL
    else:  # the gradients are described as their parameters are (dbias as weight without a bias)
        mode = _AFFINE
        dweight = _alike(weight)
        dbias = _alike(weight if bias is None else bias)
        dw_ptr, db_ptr = dweight.data_ptr(), dbias.data_ptr()
        db_desc = w_desc if bias is None else b_desc
    check(_c.miopenBNGroupNormBackward(
        handle_for(x), mode, data_desc(x), x.data_ptr(), data_desc(dy), dy.data_ptr(), w_desc, w_ptr,
        b_desc, b_ptr, s, mean.data_ptr(), s, rstd.data_ptr(), num_groups, SWISH if swish else NO_ACTIVATION,
        1.0, data_desc(dx), dx.data_ptr(), w_desc, dw_ptr, db_desc, db_ptr))
    return dx, dweight, dbias
