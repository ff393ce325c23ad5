"""The library's calls on torch tensors, with as little Python as possible.

This is the hot path under every op and module of ``miopen_bn.torch``: it
reads each tensor's dtype, shape, strides and address straight from torch,
looks up cached descriptors, allocates the outputs with torch (so CUDA
outputs come from torch's caching allocator, also during graph capture) and
makes the C call.  It checks nothing the library checks: a bad argument comes
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
_ONE, _ZERO = _ONE_ZERO + 0, _ONE_ZERO + 1
NULL = ffi.NULL
_as_pointer = ffi.cast

# --------------------------------------------------------------------------- #
# Descriptors: one per (dtype, shape, strides), never changed once set; the
# library only reads them during a call, so threads share them.
# --------------------------------------------------------------------------- #
_DESCRIPTOR_LIMIT = 4096
_descriptors: dict = {}  # key -> the descriptor's pointer, what calls pass
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
    _descriptors[key] = descriptor.ptr
    return descriptor.ptr


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
_gpu_handle_ptrs: dict = {}  # (device, stream) -> its cffi pointer
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
        _per_thread.cpu = handle.ptr
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
        _gpu_handle_ptrs[key] = handle.ptr
        if not capturing:
            _spares[device] = _made_on(device)
        return handle.ptr


def address(t: torch.Tensor):
    return _as_pointer("void*", t.data_ptr())


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
        rm, rv = address(running_mean), address(running_var)
        like = running_mean
    if save:  # described by the running statistics' descriptors: allocated like them
        saved_mean, saved_invstd = torch.empty_like(like), torch.empty_like(like)
        sm, si = address(saved_mean), address(saved_invstd)
    else:
        saved_mean = saved_invstd = None
        sm = si = NULL
    check(lib.miopenBatchNormalizationForwardTraining_V2(
        handle_for(x), SPATIAL, _ONE, _ZERO, data_desc(x), address(x), data_desc(y), address(y),
        p, param_desc(bias, rank), stats_desc, var_desc, address(weight), address(bias),
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
        mean_ptr, var_ptr = address(mean), address(var)
    check(lib.miopenBatchNormalizationForwardInference_V2(
        handle_for(x), SPATIAL, _ONE, _ZERO, data_desc(x), address(x), data_desc(y), address(y),
        param_desc(weight, rank), param_desc(bias, rank), mean_desc, var_desc,
        address(weight), address(bias), mean_ptr, var_ptr, eps))
    return y


def batch_norm_backward(x, dy, weight, saved_mean, saved_invstd, eps: float):
    """dx, dweight, dbias from the training forward's saved statistics."""
    dx = torch.empty_like(x, dtype=dy.dtype)
    dweight = torch.empty_like(weight)
    dbias = torch.empty_like(weight)
    rank = x.dim()
    p = param_desc(weight, rank)
    s = param_desc(saved_mean, rank)
    check(lib.miopenBatchNormalizationBackward_V2(
        handle_for(x), SPATIAL, _ONE, _ZERO, _ONE, _ZERO, data_desc(x), address(x),
        data_desc(dy), address(dy), data_desc(dx), address(dx), p, p, s, s,
        address(weight), address(dweight), address(dbias), eps, address(saved_mean), address(saved_invstd)))
    return dx, dweight, dbias


# --------------------------------------------------------------------------- #
# Group norm
# --------------------------------------------------------------------------- #
def _stats_dtype(x):
    return torch.float64 if x.dtype == torch.float64 else torch.float32


def group_norm_forward(x, num_groups: int, weight, bias, eps: float, swish: bool, stats: bool = True):
    """y (through SiLU when ``swish``), mean and rstd of shape (N, G) (None,
    None unless ``stats``)."""
    y = torch.empty_like(x)
    rank = x.dim()
    if weight is None:
        mode, w_desc, w_ptr, b_desc, b_ptr = _NOT_AFFINE, NULL, NULL, NULL, NULL
    else:
        mode = _AFFINE
        w_desc, w_ptr = param_desc(weight, rank), address(weight)
        b_desc, b_ptr = param_desc(bias, rank), address(bias)
    if stats:
        stats_shape = (x.shape[0], num_groups)
        mean = torch.empty(stats_shape, dtype=_stats_dtype(x), device=x.device)
        rstd = torch.empty_like(mean)
        s, mean_ptr, rstd_ptr = data_desc(mean), address(mean), address(rstd)
    else:  # the library writes them only when given
        mean = rstd = None
        s = mean_ptr = rstd_ptr = NULL
    head = (handle_for(x), mode, data_desc(x), address(x), w_desc, w_ptr, b_desc, b_ptr, num_groups, eps)
    tail = (data_desc(y), address(y), s, mean_ptr, s, rstd_ptr)
    if swish:
        check(lib.miopenBNGroupNormForwardActivation(*head, SWISH, 1.0, *tail))
    else:
        check(lib.miopenGroupNormForward(*head, *tail))
    return y, mean, rstd


def group_norm_backward(x, dy, num_groups: int, weight, bias, mean, rstd, swish: bool):
    """dx, dweight, dbias (the last two None without weight)."""
    dx = torch.empty_like(x)
    rank = x.dim()
    s = data_desc(mean)
    if weight is None:
        mode = _NOT_AFFINE
        w_desc = w_ptr = b_desc = b_ptr = dw_ptr = db_ptr = NULL
        dweight = dbias = None
    else:
        mode = _AFFINE
        dweight = torch.empty_like(weight)
        dbias = torch.empty_like(weight)
        w_desc, w_ptr = param_desc(weight, rank), address(weight)
        b_desc, b_ptr = param_desc(bias, rank), address(bias)
        dw_ptr, db_ptr = address(dweight), address(dbias)
    check(lib.miopenBNGroupNormBackward(
        handle_for(x), mode, data_desc(x), address(x), data_desc(dy), address(dy), w_desc, w_ptr,
        b_desc, b_ptr, s, address(mean), s, address(rstd), num_groups, SWISH if swish else NO_ACTIVATION,
        1.0, data_desc(dx), address(dx), w_desc, dw_ptr, b_desc, db_ptr))
    return dx, dweight, dbias
