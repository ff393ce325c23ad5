"""Array adapters: whatever the caller passes, one ``TensorView`` comes out.

Accepted, in the order they are tried:

* ``RawTensor``: a raw integer pointer with an explicit shape, dtype and
  element strides (or a ``TensorDescriptor``); its memory is assumed to belong
  to the handle's backend since nothing can be checked;
* ``numpy.ndarray`` (any strides; NHWC is a transposed view);
* objects with ``__dlpack__`` / ``__dlpack_device__`` (PyTorch, CuPy, JAX, ...),
  read through the legacy ``dltensor`` capsule with ctypes;
* objects with ``__cuda_array_interface__`` version 3 (CuPy, Numba, hip-python's
  DeviceArray, ...); its ``stream`` entry is not synchronized on;
* anything else, for inputs only, through ``numpy.asarray``.

Strides in a view are in elements.  Inputs whose NumPy strides the library
cannot express (negative, zero, or not a multiple of the item size) are
copied; outputs with such strides are refused, because results written to a
copy would be lost.
"""

from __future__ import annotations

import ctypes
import functools
from dataclasses import dataclass, field
from typing import Any, Callable, Optional, Sequence

import cffi
import numpy as np

from . import dtypes

_ffi = cffi.FFI()

HOST, DEVICE = "host", "device"

# DLPack device types.
_DL_CPU, _DL_CUDA, _DL_CUDA_HOST, _DL_ROCM, _DL_ROCM_HOST, _DL_CUDA_MANAGED = 1, 2, 3, 10, 11, 13
_DL_HOST_TYPES = {_DL_CPU, _DL_CUDA_HOST, _DL_ROCM_HOST}
_DL_DEVICE_TYPES = {_DL_CUDA, _DL_ROCM, _DL_CUDA_MANAGED}


@dataclass
class TensorView:
    """Where a tensor is and how it is laid out, plus what keeps it alive."""

    name: str  # the argument's name, for messages
    ptr: int
    shape: tuple
    strides: Optional[tuple]  # elements; None when the library cannot express them
    dtype: str  # a dtypes name
    location: Optional[str]  # HOST, DEVICE, or None (raw pointer: unknown)
    family: str  # "numpy", "torch", "cupy", "raw" or another producer's name
    source: Any  # what the caller passed (returned for outputs)
    writable: bool = True
    device_id: int = 0
    keepalive: list = field(default_factory=list)
    copy_of: Any = None  # the caller's array, where this view is a private copy of it

    def byte_range(self) -> tuple:
        """(first byte, one past the last byte) of the memory the view covers."""
        last = sum((n - 1) * s for n, s in zip(self.shape, self.strides))
        return self.ptr, self.ptr + (last + 1) * dtypes.ITEMSIZE[self.dtype]

    @property
    def ndim(self) -> int:
        return len(self.shape)

    def layout_order(self) -> list:
        """Axes from outermost to innermost in memory (NHWC: N, H, W, C)."""
        strides = self.strides or tuple(range(self.ndim, 0, -1))
        return sorted(range(self.ndim), key=lambda axis: (-strides[axis], axis))


class RawTensor:
    """A raw pointer (an ``int``) with the layout the library should assume.

    ``RawTensor(ptr, desc)`` reads dtype, shape and strides from a
    ``TensorDescriptor``; ``RawTensor(ptr, shape=..., dtype=..., strides=...)``
    takes them directly (strides in elements; None means packed row-major).
    The memory must belong to the backend of the handle it is used with.
    """

    def __init__(
        self,
        ptr: int,
        desc=None,
        *,
        shape: Sequence[int] = None,
        dtype=None,
        strides: Optional[Sequence[int]] = None,
    ):
        if isinstance(ptr, bool) or not isinstance(ptr, (int, np.integer)):
            raise TypeError(f"RawTensor needs an integer pointer, got {type(ptr).__name__}")
        self.ptr = int(ptr)
        if desc is not None:
            if shape is not None or dtype is not None or strides is not None:
                raise TypeError("RawTensor takes a descriptor or shape/dtype/strides, not both")
            shape, dtype, strides = desc.shape, desc.dtype, desc.strides
        if shape is None or dtype is None:
            raise TypeError("RawTensor needs a descriptor, or a shape and a dtype")
        self.shape = tuple(int(n) for n in shape)
        self.dtype = dtypes.name_of(dtype)
        self.strides = packed_strides(self.shape) if strides is None else tuple(int(s) for s in strides)
        if len(self.strides) != len(self.shape):
            raise ValueError(f"RawTensor has {len(self.shape)} lengths but {len(self.strides)} strides")

    def __repr__(self) -> str:
        return f"RawTensor(0x{self.ptr:x}, shape={self.shape}, dtype={self.dtype}, strides={self.strides})"


def byte_bounds(array: np.ndarray) -> tuple:
    """(first byte, one past the last byte) of a NumPy array's memory."""
    bounds = getattr(getattr(np, "lib", None), "array_utils", None)
    return (bounds.byte_bounds if bounds is not None else np.byte_bounds)(array)


def packed_strides(shape: Sequence[int]) -> tuple:
    strides, step = [], 1
    for n in reversed(shape):
        strides.append(step)
        step *= max(int(n), 1)
    return tuple(reversed(strides))


def _element_strides(shape, byte_strides, itemsize, ptr) -> Optional[tuple]:
    """Byte strides as element strides, or None when the library cannot use them.

    A length-1 dimension's stride is never used to address anything, so it is
    replaced by 1 (NumPy may report 0 or any other value there)."""
    if 0 in tuple(shape):
        return packed_strides(shape)  # addresses nothing; the caller rejects it by shape
    if ptr % itemsize:
        return None
    result = []
    for n, stride in zip(shape, byte_strides):
        if n == 1:
            result.append(1)
        elif stride <= 0 or stride % itemsize:
            return None
        else:
            result.append(stride // itemsize)
    return tuple(result)


def _family(obj) -> str:
    return type(obj).__module__.split(".")[0]


# --------------------------------------------------------------------------- #
# Where is it?  (decided before exporting anything, to pick a handle)
# --------------------------------------------------------------------------- #
def location_of(obj) -> Optional[str]:
    if isinstance(obj, RawTensor):
        return None
    if isinstance(obj, np.ndarray):
        return HOST
    if hasattr(obj, "__dlpack_device__"):
        device_type = int(obj.__dlpack_device__()[0])
        return HOST if device_type in _DL_HOST_TYPES else DEVICE
    if hasattr(obj, "__cuda_array_interface__"):
        return DEVICE
    return HOST


# --------------------------------------------------------------------------- #
# Adapters
# --------------------------------------------------------------------------- #
def view_of(obj, name: str, *, output: bool = False, stream: Optional[int] = None) -> TensorView:
    """The TensorView of one argument.  ``stream`` is passed to DLPack exports."""
    if isinstance(obj, RawTensor):
        return TensorView(name, obj.ptr, obj.shape, obj.strides, obj.dtype, None, "raw", obj)
    if isinstance(obj, np.ndarray):
        return _numpy_view(obj, name, output)
    if hasattr(obj, "__dlpack__") and hasattr(obj, "__dlpack_device__"):
        try:
            return _dlpack_view(obj, name, stream)
        except (BufferError, RuntimeError, TypeError):
            if not hasattr(obj, "__cuda_array_interface__"):
                raise
    if hasattr(obj, "__cuda_array_interface__"):
        return _cuda_interface_view(obj, name)
    if output:
        raise TypeError(
            f"{name} must be an array (NumPy, DLPack, __cuda_array_interface__ or "
            f"RawTensor), got {type(obj).__name__}"
        )
    return _numpy_view(np.asarray(obj), name, output=False, source=obj)


def _buffer_pointer(ffi, array: np.ndarray):
    """The array's first element as a cffi pointer, through the buffer
    protocol (a fraction of what building __array_interface__ costs, and
    calls take several arrays); None unless the array is C-contiguous with a
    dtype NumPy exports buffers for."""
    if array.flags.c_contiguous:
        try:
            return ffi.from_buffer(array)
        except (BufferError, TypeError, ValueError):
            pass
    return None


def _data_address(array: np.ndarray) -> int:
    """Where the array's first element is."""
    pointer = _buffer_pointer(_ffi, array)
    if pointer is not None:
        return int(_ffi.cast("uintptr_t", pointer))
    return array.__array_interface__["data"][0]


def _axes_outermost_first(array: np.ndarray) -> tuple:
    """The array's axes by decreasing stride.  A length-1 axis right inside
    another has that axis's stride: it sorts after it, as it lies in a packed
    array made in this order."""
    shape, strides = array.shape, array.strides
    return tuple(sorted(range(array.ndim), key=lambda axis: (-strides[axis], shape[axis] == 1, axis)))


def address_reader(array: np.ndarray, ffi) -> Callable[[np.ndarray], Any]:
    """A function giving the address (a cffi ``void*``-compatible pointer) of
    any array with ``array``'s dtype, shape and strides, chosen once for that
    layout: the buffer protocol on the array or, for a transposed layout such
    as NHWC, on its C-contiguous transposition (same first element)."""
    if _buffer_pointer(ffi, array) is not None:
        return ffi.from_buffer
    order = _axes_outermost_first(array)
    if _buffer_pointer(ffi, array.transpose(order)) is not None:
        return lambda a: ffi.from_buffer(a.transpose(order))
    return lambda a: ffi.cast("void*", a.__array_interface__["data"][0])


def _numpy_view(array: np.ndarray, name: str, output: bool, source=None) -> TensorView:
    dtype = _dtype_name(array.dtype, name)
    ptr = _data_address(array)
    strides = _element_strides(array.shape, array.strides, array.itemsize, ptr)
    copy_of = None
    if strides is None and not output:
        copy_of = array
        array = np.array(array, order="C", copy=True)  # private, aligned, addressable
        ptr = _data_address(array)
        strides = _element_strides(array.shape, array.strides, array.itemsize, ptr)
    return TensorView(
        name,
        ptr,
        array.shape,
        strides,
        dtype,
        HOST,
        "numpy",
        array if source is None else source,
        writable=array.flags.writeable,
        keepalive=[array],
        copy_of=copy_of,
    )


# ctypes mirror of dlpack.h's DLManagedTensor (the unversioned ABI).
class _DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class _DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class _DLTensor(ctypes.Structure):
    _fields_ = [
        ("data", ctypes.c_void_p),
        ("device", _DLDevice),
        ("ndim", ctypes.c_int32),
        ("dtype", _DLDataType),
        ("shape", ctypes.POINTER(ctypes.c_int64)),
        ("strides", ctypes.POINTER(ctypes.c_int64)),
        ("byte_offset", ctypes.c_uint64),
    ]


class _DLManagedTensor(ctypes.Structure):
    _fields_ = [("dl_tensor", _DLTensor), ("manager_ctx", ctypes.c_void_p), ("deleter", ctypes.c_void_p)]


_capsule_pointer = ctypes.pythonapi.PyCapsule_GetPointer
_capsule_pointer.restype = ctypes.c_void_p
_capsule_pointer.argtypes = [ctypes.py_object, ctypes.c_char_p]


def _dlpack_view(obj, name: str, stream: Optional[int]) -> TensorView:
    device_type, device_id = (int(v) for v in obj.__dlpack_device__())
    if device_type in _DL_HOST_TYPES:
        location = HOST
    elif device_type in _DL_DEVICE_TYPES:
        location = DEVICE
    else:
        raise ValueError(f"{name} lives on DLPack device type {device_type}, which this library cannot use")
    # The capsule is not consumed: while we hold it the producer keeps the
    # memory alive, and when it is dropped its destructor releases it.
    capsule = obj.__dlpack__() if location == HOST or not stream else obj.__dlpack__(stream=stream)
    managed = _DLManagedTensor.from_address(_capsule_pointer(capsule, b"dltensor"))
    tensor = managed.dl_tensor
    dtype_key = (tensor.dtype.code, tensor.dtype.bits)
    if tensor.dtype.lanes != 1 or dtype_key not in dtypes.DLPACK_TYPE:
        raise TypeError(
            f"{name} has DLPack type (code {dtype_key[0]}, bits {dtype_key[1]}, "
            f"lanes {tensor.dtype.lanes}), which batch norm does not support"
        )
    dtype = dtypes.DLPACK_TYPE[dtype_key]
    shape = tuple(tensor.shape[i] for i in range(tensor.ndim))
    if tensor.strides:
        raw = tuple(tensor.strides[i] for i in range(tensor.ndim))
    else:
        raw = packed_strides(shape)
    ptr = (tensor.data or 0) + tensor.byte_offset
    itemsize = dtypes.ITEMSIZE[dtype]
    strides = _element_strides(shape, [s * itemsize for s in raw], itemsize, ptr)
    return TensorView(
        name,
        ptr,
        shape,
        strides,
        dtype,
        location,
        _family(obj),
        obj,
        device_id=device_id,
        keepalive=[capsule],
    )


def _cuda_interface_view(obj, name: str) -> TensorView:
    interface = obj.__cuda_array_interface__
    if interface.get("mask") is not None:
        raise ValueError(f"{name} is a masked array, which batch norm cannot read")
    dtype = dtypes.from_cuda_typestr(interface["typestr"])
    shape = tuple(int(n) for n in interface["shape"])
    ptr, readonly = interface["data"]
    ptr = int(ptr or 0)
    itemsize = dtypes.ITEMSIZE[dtype]
    byte_strides = interface.get("strides")
    if byte_strides is None:
        byte_strides = [s * itemsize for s in packed_strides(shape)]
    strides = _element_strides(shape, byte_strides, itemsize, ptr)
    return TensorView(name, ptr, shape, strides, dtype, DEVICE, _family(obj), obj, writable=not readonly)


def _dtype_name(dtype, name: str) -> str:
    try:
        return dtypes.name_of(dtype)
    except TypeError as exc:
        raise TypeError(f"{name}: {exc}") from None


# --------------------------------------------------------------------------- #
# Allocation of missing outputs, in the caller's array library
# --------------------------------------------------------------------------- #
def allocate_like(
    template: TensorView,
    name: str,
    shape: Sequence[int],
    dtype: str,
    layout: Optional[TensorView] = None,
    hint: str = "",
):
    """A new array from ``template``'s library and device, with ``layout``'s
    axis order in memory (packed row-major when None).  ``hint`` says how the
    caller can avoid the allocation when it is impossible."""
    shape = tuple(shape)
    if template.family == "numpy" and layout is None:  # the common case, a parameter: row-major
        return np.empty(shape, dtype=dtypes.NUMPY_DTYPE[dtype])
    order = layout.layout_order() if layout is not None else list(range(len(shape)))
    if template.family == "numpy":
        return in_memory_order(functools.partial(np.empty, dtype=dtypes.NUMPY_DTYPE[dtype]), shape, order)
    if template.family == "torch":
        import torch

        strides = [0] * len(shape)
        for axis, stride in zip(order, packed_strides([shape[axis] for axis in order])):
            strides[axis] = stride
        return torch.empty_strided(shape, strides, dtype=getattr(torch, dtype), device=template.source.device)
    if template.family == "cupy" and dtype != dtypes.BFLOAT16:
        import cupy

        with cupy.cuda.Device(template.device_id):
            return in_memory_order(functools.partial(cupy.empty, dtype=dtypes.NUMPY_DTYPE[dtype]), shape, order)
    raise ValueError(
        f"{name} was not given and cannot be allocated like {template.name} "
        f"(a {template.family} {dtype} array): {hint or f'pass {name}= explicitly'}"
    )


def in_memory_order(make: Callable, shape: Sequence[int], order: Sequence[int]):
    """The array ``make`` returns for the lengths of ``shape`` taken in
    ``order`` (its logical axes, outermost in memory first), viewed in logical
    order: with ``make`` a partial of numpy.empty, numpy.full, cupy.empty or a
    random generator, a new array of ``shape`` whose axes lie in memory in
    ``order`` (NHWC: order (0, 2, 3, 1))."""
    return make([shape[axis] for axis in order]).transpose(np.argsort(order))


def allocator(output, inputs: Sequence) -> Optional[tuple]:
    """How a repeated call makes a new array laid out like ``output`` (a
    NumPy array or torch tensor a first call allocated), given the call's
    arrays (inputs, and outputs allocated before this one): ``(i,
    empty_like)`` where ``empty_like(inputs[i])`` does (the cheapest NumPy
    allocation), else ``(None, make)`` with ``make()`` doing it; None when
    neither can.  A torch tensor is made by torch_maker()."""
    if type(output).__module__.startswith("torch"):
        return None, torch_maker(output)
    for index, array in enumerate(inputs):
        if (type(array) is np.ndarray and array is not output and _numpy_layout(array) == _numpy_layout(output)
                and _numpy_layout(np.empty_like(array)) == _numpy_layout(output)):
            return index, np.empty_like
    make = _numpy_maker(output)
    return None if make is None else (None, make)


def joint_allocators(allocations: dict, made: Sequence) -> tuple:
    """Groups the contiguous torch tensors among the outputs a first call
    allocated (``allocations``: {array index: allocator()'s pair}, ``made``:
    the call's arrays with those outputs) that share one dtype, shape and
    device: a repeated call makes each group as the rows of one buffer (one
    allocation, the rows views of it; on CUDA, where an allocation costs
    more host time than a view, cheaper than an allocation per output).
    Returns ((indices, make) per group, where ``make()`` gives the group's
    tensors in order; the allocations left to make one by one)."""
    groups: dict = {}
    for index in allocations:
        output = made[index]
        if type(output).__module__.startswith("torch") and output.is_contiguous():
            groups.setdefault(_torch_layout(output), []).append(index)
    joint, single = [], dict(allocations)
    for indices in groups.values():
        if len(indices) < 2:
            continue
        make = _rows_maker(made[indices[0]], len(indices))
        if all(_torch_layout(row) == _torch_layout(made[index]) for row, index in zip(make(), indices)):
            joint.append((tuple(indices), make))
            for index in indices:
                del single[index]
    return tuple(joint), single


def _torch_layout(tensor) -> tuple:
    return tensor.dtype, tensor.shape, tensor.stride(), tensor.device


def _numpy_layout(array: np.ndarray) -> tuple:
    return array.dtype, array.shape, array.strides


def _numpy_maker(array: np.ndarray) -> Optional[Callable[[], np.ndarray]]:
    """A function making new arrays laid out like ``array``, or None if it is
    not a packed array's transposition."""
    order = _axes_outermost_first(array)
    if list(order) == sorted(order):
        make = functools.partial(np.empty, array.shape, array.dtype)
    else:
        in_order = tuple(array.shape[axis] for axis in order)
        make = functools.partial(_transposed_empty, in_order, array.dtype, tuple(np.argsort(order)))
    return make if make().strides == array.strides else None


def _transposed_empty(shape: tuple, dtype, axes: tuple) -> np.ndarray:
    return np.empty(shape, dtype).transpose(axes)


# --------------------------------------------------------------------------- #
# torch tensors for repeated calls, made without torch's operator dispatch
# where torch offers it: the allocation functions the code Inductor
# generates calls (an empty_strided without the dispatcher, about half its
# host time, and a view with given sizes, strides and offset), else the
# public operators.
# --------------------------------------------------------------------------- #
@functools.lru_cache(maxsize=None)
def _undispatched() -> tuple:
    """(empty_strided on the CPU, on the current CUDA device, view) from
    torch._C._dynamo.guards, each None where this torch lacks it."""
    guards = getattr(getattr(__import__("torch")._C, "_dynamo", None), "guards", None)
    return tuple(getattr(guards, name, None) for name in
                 ("_empty_strided_cpu", "_empty_strided_cuda", "_reinterpret_tensor"))


def torch_maker(tensor) -> Callable:
    """A function making new tensors with ``tensor``'s dtype, shape, strides
    and device."""
    import torch

    shape, strides, dtype, device = tuple(tensor.shape), tensor.stride(), tensor.dtype, tensor.device
    on_cpu, on_cuda, _ = _undispatched()
    if device.type == "cpu" and on_cpu is not None:
        return functools.partial(on_cpu, shape, strides, dtype)
    public = functools.partial(torch.empty_strided, shape, strides, dtype=dtype, device=device)
    if device.type != "cuda" or on_cuda is None:
        return public
    current, index = torch._C._cuda_getDevice, device.index

    def make():  # the undispatched function allocates on the current device
        return on_cuda(shape, strides, dtype) if current() == index else public()

    return make


def _rows_maker(like, count: int) -> Callable[[], tuple]:
    """A function making ``count`` new tensors laid out like the contiguous
    ``like``, the rows of one buffer."""
    make_buffer = torch_maker(like.new_empty((count,) + tuple(like.shape)))
    view = _undispatched()[2]
    if view is None:
        return lambda: make_buffer().unbind(0)
    shape, strides, offsets = tuple(like.shape), like.stride(), tuple(row * like.numel() for row in range(count))

    def make():
        buffer = make_buffer()
        return tuple(view(buffer, shape, strides, offset) for offset in offsets)

    return make
