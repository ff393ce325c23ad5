"""The library's calls on torch tensors, with as little Python as possible.

This is the hot path under every op and module of ``miopen_bn.torch``: it
reads each tensor's dtype, shape, strides and address straight from torch,
looks up what the first call of that layout left (the descriptors, and how
to make the outputs), allocates the outputs with torch (so CUDA outputs come
from torch's caching allocator, also during graph capture; through the
undispatched allocation functions of arrays.torch_maker, and on CUDA the
per-channel outputs of a call as the rows of one buffer) and makes the C
call, through declarations that take every data pointer as an
integer address (``Library.by_address``): torch's ``data_ptr()`` passes as
it is, and so do the cached cffi pointers of descriptors and handles, with
no cffi object made per argument.  It checks nothing the library checks: a
bad argument comes back as the library's status, raised as the matching
``MIOpenError``.

Handles: one per thread for CPU tensors; for CUDA tensors one per (device,
stream), the stream being torch's current stream at the call, so the work is
ordered with torch's own.  Creating a GPU handle allocates its workspace and
waits for the device, which a stream being captured into a CUDA graph does
not allow; so a ready spare handle is kept per device, made outside any
capture, and a capture on a stream seen for the first time takes it.
"""

from __future__ import annotations

import threading
from typing import Optional

import torch

from .. import arrays
from ..descriptor import described
from ..handle import Handle
from ..library import load

_library = load()
ffi, lib = _library.ffi, _library.lib
check = _library.check
_c = _library.by_address(
    "miopenBatchNormalizationForwardTraining_V2", "miopenBatchNormalizationForwardInference_V2",
    "miopenBatchNormalizationBackward_V2", "miopenBNGroupNormForwardActivation",
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
NULL = 0  # an absent array's address
NO_DESCRIPTOR = ffi.NULL  # and its descriptor

# --------------------------------------------------------------------------- #
# Descriptors and output makers, by layout: a call looks its tensors'
# layouts (and x's device) up once, as one key, and finds every descriptor it
# passes and the functions that make its outputs.  Descriptors are never
# changed once set and the library only reads them during a call, so threads
# share them.
# --------------------------------------------------------------------------- #
_LAYOUT_LIMIT = 4096
_layouts: dict = {}  # key -> descriptor pointers (as the call's _described gave its tensors), then its makers
_owners: dict = {}  # key -> the TensorDescriptors behind those pointers
_retired: dict = {}  # the previous generation, alive until the next overflow: in-flight calls may use it


def _layout(t) -> Optional[tuple]:
    """What a descriptor of ``t`` depends on (None for an absent tensor)."""
    return None if t is None else (t.dtype, t.shape, t.stride())


def _descriptor(t: torch.Tensor, rank: int = 0):
    """``t``'s descriptor (None for None), as it lies or, with ``rank``, as a
    per-channel tensor (C,) at x's rank: (1, C, 1, ...)."""
    if t is None:
        return None
    code = _DTYPE_CODE.get(t.dtype)
    if code is None:
        raise TypeError(f"miopen_bn computes on float16, bfloat16, float32 and float64 tensors, not {t.dtype}")
    shape, strides = tuple(t.shape), t.stride()
    if rank:
        pad = (1,) * (rank - 1 - t.dim())
        shape, strides = (1,) + shape + pad, (1,) + strides + pad
    return described(code, shape, strides)


def _described(key: tuple, data: tuple, params: tuple, makers: tuple = ()) -> tuple:
    """The first call of a layout: the descriptor pointers (NULL for None) of
    the ``data`` tensors as they lie, then of the per-channel ``params`` at
    the rank of data[0] (x), then ``makers``.  Outputs the call allocates are
    among them, allocated as the key's first call does (torch.empty_like,
    new_empty, _alike: the same strides for the same layout); ``makers``
    (_maker, _pair_maker) make later calls' outputs laid out as those, so
    the descriptors hold for every later call of the key."""
    rank = data[0].dim()
    descriptors = tuple(_descriptor(t) for t in data) + tuple(_descriptor(t, rank) for t in params)
    global _owners, _retired
    if len(_layouts) >= _LAYOUT_LIMIT:  # a process cycling through this many layouts re-makes them
        _layouts.clear()
        _retired, _owners = _owners, {}
    _owners[key] = descriptors
    found = _layouts[key] = tuple(NO_DESCRIPTOR if d is None else d.ptr for d in descriptors) + makers
    return found


def _maker(t: torch.Tensor):
    """A function making new tensors with ``t``'s dtype, shape, strides and device."""
    return arrays.torch_maker(t)


def _pair_maker(a: torch.Tensor, b: torch.Tensor, joint: bool):
    """A function making two new tensors laid out like ``a`` and ``b``: with
    ``joint``, on CUDA, where an allocation costs more host time than a view,
    as the rows of one buffer when they are contiguous and alike.  A
    torch.library custom op's outputs must not share storage (torch checks):
    its calls pass joint=False."""
    if joint and a.is_cuda:
        groups, _ = arrays.joint_allocators({0: (None, _maker(a)), 1: (None, _maker(b))}, (a, b))
        if groups:
            return groups[0][1]
    make_a, make_b = _maker(a), _maker(b)
    return lambda: (make_a(), make_b())


# --------------------------------------------------------------------------- #
# Handles
# --------------------------------------------------------------------------- #
_per_thread = threading.local()
_gpu_handles: dict = {}  # (device, stream) -> Handle
_gpu_handle_ptrs: dict = {}  # (device, stream) -> its pointer
_spares: dict = {}  # device -> a GPU handle made outside any capture, not yet bound to a stream
_lock = threading.Lock()
# current_stream(device): torch's current stream there, as an address.  The
# raw query is what torch's own generated code reads, a fraction of the cost
# of torch.cuda.current_stream(device).cuda_stream, the fallback.
try:
    current_stream = torch._C._cuda_getCurrentRawStream
except AttributeError:

    def current_stream(device: int) -> int:
        return torch.cuda.current_stream(device).cuda_stream


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
    return handle_on(t.get_device())


def handle_on(device: int):
    """The handle to run on ``device`` (torch's get_device(): -1 for the
    CPU): torch's current stream on a GPU."""
    if device < 0:
        return cpu_handle()
    key = (device, current_stream(device))
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
# Each call's key starts with its own tag (the same tensors mean other
# descriptors in another call), then x's device (the makers allocate there),
# then the layouts: written out for the tensors a call always has (a
# fixed position each), _layout() for those that may be None.
_TRAIN, _INFER, _BACKWARD, _GROUP_NORM, _GROUP_NORM_BACKWARD = range(5)


def batch_norm_train(x, weight, bias, running_mean, running_var, factor: float, eps: float, save: bool = True,
                     joint: bool = True):
    """y, saved mean, saved 1/sqrt(var + eps) (None, None unless ``save``;
    rows of one buffer on CUDA unless not ``joint``, _pair_maker); updates
    the running statistics in place when given (with the unbiased
    variance)."""
    device = x.get_device()
    key = (_TRAIN, device, save, joint, x.dtype, x.shape, x.stride(), weight.dtype, weight.shape, weight.stride(),
           bias.dtype, bias.shape, bias.stride(), _layout(running_mean), _layout(running_var))
    x_d, y_d, w_d, b_d, mean_d, var_d, make_y, make_saved = _layouts.get(key) or _first_train(
        key, x, weight, bias, running_mean, running_var, save, joint)
    y = make_y()
    if save:
        saved_mean, saved_invstd = make_saved()
        sm, si = saved_mean.data_ptr(), saved_invstd.data_ptr()
    else:
        saved_mean = saved_invstd = None
        sm = si = NULL
    check(_c.miopenBatchNormalizationForwardTraining_V2(
        handle_on(device), SPATIAL, _ONE, _ZERO, x_d, x.data_ptr(), y_d, y.data_ptr(), w_d, b_d, mean_d, var_d,
        weight.data_ptr(), bias.data_ptr(), factor, NULL if running_mean is None else running_mean.data_ptr(),
        NULL if running_var is None else running_var.data_ptr(), eps, sm, si))
    return y, saved_mean, saved_invstd


def _first_train(key, x, weight, bias, running_mean, running_var, save: bool, joint: bool) -> tuple:
    # A running statistic's descriptor describes its saved one too: the saved
    # one is laid out like it (like the weight without running statistics).
    mean_like = weight if running_mean is None else running_mean
    var_like = weight if running_var is None else running_var
    make_saved = _pair_maker(_alike(mean_like), _alike(var_like), joint) if save else None
    y = torch.empty_like(x)
    return _described(key, (x, y), (weight, bias, mean_like, var_like), (_maker(y), make_saved))


def batch_norm_infer(x, weight, bias, mean, var, eps: float):
    """y from the given statistics (None, None: the batch's own)."""
    device = x.get_device()
    key = (_INFER, device, x.dtype, x.shape, x.stride(), weight.dtype, weight.shape, weight.stride(), bias.dtype,
           bias.shape, bias.stride(), _layout(mean), _layout(var))
    x_d, y_d, w_d, b_d, mean_d, var_d, make_y = _layouts.get(key) or _first_infer(key, x, weight, bias, mean, var)
    y = make_y()
    check(_c.miopenBatchNormalizationForwardInference_V2(
        handle_on(device), SPATIAL, _ONE, _ZERO, x_d, x.data_ptr(), y_d, y.data_ptr(), w_d, b_d, mean_d, var_d,
        weight.data_ptr(), bias.data_ptr(), NULL if mean is None else mean.data_ptr(),
        NULL if var is None else var.data_ptr(), eps))
    return y


def _first_infer(key, x, weight, bias, mean, var) -> tuple:
    y = torch.empty_like(x)
    return _described(key, (x, y), (weight, bias, mean, var), (_maker(y),))


def batch_norm_backward(x, dy, weight, saved_mean, saved_invstd, eps: float, joint: bool = True):
    """dx (in dy's dtype), dweight, dbias from the training forward's saved
    statistics (dweight and dbias as for ``joint``: _pair_maker)."""
    device = x.get_device()
    key = (_BACKWARD, device, joint, x.dtype, x.shape, x.stride(), dy.dtype, dy.shape, dy.stride(), weight.dtype,
           weight.shape, weight.stride(), saved_mean.dtype, saved_mean.shape, saved_mean.stride(),
           saved_invstd.dtype, saved_invstd.shape, saved_invstd.stride())
    x_d, dy_d, dx_d, w_d, mean_d, invstd_d, make_dx, make_grads = _layouts.get(key) or _first_backward(
        key, x, dy, weight, saved_mean, saved_invstd, joint)
    dx = make_dx()
    dweight, dbias = make_grads()  # both described by the weight's descriptor
    check(_c.miopenBatchNormalizationBackward_V2(
        handle_on(device), SPATIAL, _ONE, _ZERO, _ONE, _ZERO, x_d, x.data_ptr(), dy_d, dy.data_ptr(), dx_d,
        dx.data_ptr(), w_d, w_d, mean_d, invstd_d, weight.data_ptr(), dweight.data_ptr(), dbias.data_ptr(), eps,
        saved_mean.data_ptr(), saved_invstd.data_ptr()))
    return dx, dweight, dbias


def _first_backward(key, x, dy, weight, saved_mean, saved_invstd, joint: bool) -> tuple:
    dx = torch.empty_like(x) if dy.dtype == x.dtype else torch.empty_like(x, dtype=dy.dtype)
    return _described(key, (x, dy, dx), (weight, saved_mean, saved_invstd),
                      (_maker(dx), _pair_maker(_alike(weight), _alike(weight), joint)))


# --------------------------------------------------------------------------- #
# Group norm (one entry point with an activation argument, None or swish,
# for both forwards: the same cost with and without SiLU)
# --------------------------------------------------------------------------- #
def group_norm_forward(x, num_groups: int, weight, bias, eps: float, swish: bool, stats: bool = True,
                       joint: bool = True):
    """y (through SiLU when ``swish``), mean and rstd of shape (N, G) (None,
    None unless ``stats``; as for ``joint``: _pair_maker)."""
    if weight is None and bias is not None:  # the library's mode without weight ignores the bias
        raise ValueError("group norm: bias was given without weight: give both, or neither")
    device = x.get_device()
    key = (_GROUP_NORM, device, joint, x.dtype, x.shape, x.stride(), _layout(weight), _layout(bias),
           num_groups if stats else None)
    x_d, y_d, stats_d, w_d, b_d, make_y, make_stats = _layouts.get(key) or _first_group_norm(
        key, x, num_groups, weight, bias, stats, joint)
    y = make_y()
    if stats:
        mean, rstd = make_stats()
        mean_ptr, rstd_ptr = mean.data_ptr(), rstd.data_ptr()
    else:  # the library writes them only when given
        mean = rstd = None
        mean_ptr = rstd_ptr = NULL
    check(_c.miopenBNGroupNormForwardActivation(
        handle_on(device), _NOT_AFFINE if weight is None else _AFFINE, x_d, x.data_ptr(), w_d,
        NULL if weight is None else weight.data_ptr(), b_d, NULL if bias is None else bias.data_ptr(), num_groups,
        eps, SWISH if swish else NO_ACTIVATION, 1.0, y_d, y.data_ptr(), stats_d, mean_ptr, stats_d, rstd_ptr))
    return y, mean, rstd


def _first_group_norm(key, x, num_groups: int, weight, bias, stats: bool, joint: bool) -> tuple:
    y = torch.empty_like(x)
    mean = make_stats = None
    if stats:
        mean = x.new_empty(x.shape[0], num_groups, dtype=torch.float64 if x.dtype == torch.float64 else torch.float32)
        make_stats = _pair_maker(mean, torch.empty_like(mean), joint)
    return _described(key, (x, y, mean), (weight, bias), (_maker(y), make_stats))


def group_norm_backward(x, dy, num_groups: int, weight, bias, mean, rstd, swish: bool, joint: bool = True):
    """dx, dweight, dbias (the last two None without weight; as for
    ``joint``: _pair_maker)."""
    device = x.get_device()
    key = (_GROUP_NORM_BACKWARD, device, joint, x.dtype, x.shape, x.stride(), dy.dtype, dy.shape, dy.stride(),
           mean.dtype, mean.shape, mean.stride(), rstd.dtype, rstd.shape, rstd.stride(), _layout(weight),
           _layout(bias))
    x_d, dy_d, dx_d, mean_d, rstd_d, w_d, b_d, make_dx, make_grads = _layouts.get(key) or _first_group_norm_backward(
        key, x, dy, weight, bias, mean, rstd, joint)
    dx = make_dx()
    if weight is None:
        mode = _NOT_AFFINE
        dweight = dbias = None
        w_ptr = dw_ptr = db_ptr = NULL
        db_d = NO_DESCRIPTOR
    else:  # the gradients are described as their parameters are (dbias as weight without a bias)
        mode = _AFFINE
        dweight, dbias = make_grads()
        w_ptr, dw_ptr, db_ptr = weight.data_ptr(), dweight.data_ptr(), dbias.data_ptr()
        db_d = w_d if bias is None else b_d
    check(_c.miopenBNGroupNormBackward(
        handle_on(device), mode, x_d, x.data_ptr(), dy_d, dy.data_ptr(), w_d, w_ptr, b_d,
        NULL if bias is None else bias.data_ptr(), mean_d, mean.data_ptr(), rstd_d, rstd.data_ptr(), num_groups,
        SWISH if swish else NO_ACTIVATION, 1.0, dx_d, dx.data_ptr(), w_d, dw_ptr, db_d, db_ptr))
    return dx, dweight, dbias


def _first_group_norm_backward(key, x, dy, weight, bias, mean, rstd, joint: bool) -> tuple:
    dx = torch.empty_like(x)
    make_grads = None if weight is None else _pair_maker(_alike(weight), _alike(weight if bias is None else bias),
                                                         joint)
    return _described(key, (x, dy, dx, mean, rstd), (weight, bias), (_maker(dx), make_grads))
