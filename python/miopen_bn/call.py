"""One library call on arrays: the handle, every argument checked and
described, and the C call itself.  Shared by the batch-norm and group-norm
functions.

Every argument is checked (shape, dtype, strides, host or device) before the
library is called, with a message naming it, so a rejected call writes no
output.  The checks end in prepare(), which leaves a plan that later calls of
the same signature run without them (prepared.py).  Missing outputs are
allocated in the input's array library; data outputs (y, dx) follow x's
memory layout (NHWC stays NHWC).

Parameter arrays (per-channel or per-activation scale/weight, bias, their
gradients...) take their descriptor's shape with or without its leading 1,
e.g. (C,) or (1, C, 1, 1), and are float32 or x's dtype: each on its own
for batch norm, one dtype for all of them for group norm.
"""

from __future__ import annotations

import threading
from typing import Optional

import numpy as np

from . import arrays, dtypes, prepared
from .arrays import DEVICE, HOST, TensorView
from .descriptor import TensorDescriptor
from .handle import Handle, default_handle
from .library import load

_BACKEND_FOR_LOCATION = {HOST: "cpu", DEVICE: "gpu", None: "auto"}
_LOCATION_FOR_BACKEND = {"cpu": HOST, "gpu": DEVICE}

# Descriptors made for calls, kept per thread for the most recent layouts:
# creating, setting and destroying the six or so a call needs costs more than
# a small tensor's whole batch norm.  They are never changed once set, and the
# library only reads them during a call.  Least recently used first; one
# dropped here is destroyed when nothing else (a call, a plan) holds it.
_DESCRIPTOR_CACHE_SIZE = 64
_per_thread = threading.local()


def _byte_bounds(array) -> tuple:
    """(first byte, one past the last byte) of a NumPy array's memory."""
    bounds = getattr(getattr(np, "lib", None), "array_utils", None)
    return (bounds.byte_bounds if bounds is not None else np.byte_bounds)(array)


def _descriptor(dtype: str, shape: tuple, strides: tuple) -> TensorDescriptor:
    cache = getattr(_per_thread, "descriptors", None)
    if cache is None:
        cache = _per_thread.descriptors = {}
    key = (dtype, shape, strides)
    descriptor = cache.pop(key, None)
    if descriptor is None:
        descriptor = TensorDescriptor(dtype, shape, strides)
        if len(cache) >= _DESCRIPTOR_CACHE_SIZE:
            del cache[next(iter(cache))]
    cache[key] = descriptor
    return descriptor


class _Value:
    """Stands in prepare()'s arguments for a value run() is given by name:
    a float passed by pointer (alpha, beta) or a number passed by value."""

    def __init__(self, name: str, by_pointer: bool):
        self.name = name
        self.by_pointer = by_pointer


class ArrayCall:
    """The tensors of one call: checked, described, and kept alive until it
    returns.  A subclass sets ``param_shapes`` (the full and the short form)
    and ``param_context`` (how messages describe what fixes those shapes)."""

    def __init__(self, x, handle: Optional[Handle], signature: tuple):
        # (entry, handle, arrays, steering): what prepare() files its plan under.
        self._signature = (signature[0], handle) + tuple(signature[1:])
        self._descriptors: list = []
        self.library = load()
        self.ffi = self.library.ffi
        if handle is None:
            handle = default_handle(_BACKEND_FOR_LOCATION[arrays.location_of(x)])
        elif not isinstance(handle, Handle):
            raise TypeError(f"handle must be a miopen_bn.Handle, got {type(handle).__name__}")
        self.handle = handle
        self.backend = handle.backend
        self.stream = handle.stream if self.backend == "gpu" else None
        self._keepalive: list = []
        self._outputs: list = []
        self.x = self.view(x, "x")
        if not 2 <= self.x.ndim <= 5:
            raise ValueError(f"x must have 2 to 5 dimensions (N, C[, D][, H][, W]), got shape {self.x.shape}")
        if 0 in self.x.shape:
            raise ValueError(f"x has an empty dimension: shape {self.x.shape}")
        self.param_shapes: tuple = ()
        self.param_context = ""
        self.param_dtype: Optional[str] = None
        self.params_share_dtype = True

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
        if output:
            self._outputs.append(view)
        return view

    def refuse_outputs_over_copies(self) -> None:
        """The library refuses an output that overlaps another operand (C
        checks it), but it cannot see an input that was copied here for its
        strides: an output over the caller's original is refused here."""
        for copy in (view for view in self._keepalive if view.copy_of is not None):
            original = _byte_bounds(copy.copy_of)
            for out in self._outputs:
                begin, end = out.byte_range()
                if begin < original[1] and original[0] < end:
                    raise ValueError(
                        f"{out.name} overlaps {copy.name}'s memory: an output may share memory with "
                        f"another tensor only in place (at the same address with the same strides)"
                    )

    def check_writable(self, view: TensorView) -> None:
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
            self.check_writable(view)
        return view

    def param_shaped(self, obj, name: str, *, output: bool = False) -> TensorView:
        """A tensor of one of the parameter shapes, whatever its dtype."""
        view = self.view(obj, name, output=output)
        if view.shape not in self.param_shapes:
            full, short = self.param_shapes
            raise ValueError(
                f"{name} has shape {view.shape} but must be {short} or {full} "
                f"for x of shape {self.x.shape}{self.param_context}"
            )
        return view

    def param(self, obj, name: str, *, output: bool = False) -> TensorView:
        """A parameter-shaped tensor, float32 or x's dtype; where the
        parameters share one dtype, the first one given fixes it."""
        view = self.param_shaped(obj, name, output=output)
        if self.param_dtype is None or not self.params_share_dtype:
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
            self.check_writable(view)
        return view

    # -- outputs -------------------------------------------------------------
    def data_output(self, obj, name: str, dtype: str, dtype_rule: str, blended: bool = False) -> TensorView:
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

    def require_same_layout(self, a: TensorView, b: TensorView, reason: str) -> None:
        """Two parameter tensors that one C descriptor will describe: same
        dtype and strides."""
        if a.dtype != b.dtype:
            raise TypeError(f"{a.name} ({a.dtype}) and {b.name} ({b.dtype}) must have the same dtype: {reason}")
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
        trailing = len(full) - 1 - len(view.shape)  # (C,) of a per-channel parameter
        return full, (1,) + tuple(view.strides) + (1,) * trailing

    # -- C arguments ---------------------------------------------------------
    def desc(self, view: Optional[TensorView], *, as_parameter: bool = True):
        """The view's descriptor: at x's rank for data and parameters, or with
        the view's own shape (``as_parameter=False``)."""
        if view is None:
            return self.ffi.NULL
        shape, strides = self._padded(view) if as_parameter else (view.shape, view.strides)
        descriptor = _descriptor(view.dtype, tuple(shape), tuple(strides))
        self._descriptors.append(descriptor)
        return descriptor.ptr

    def ptr(self, view: Optional[TensorView]):
        """The view stands for its address until prepare() reads it."""
        return self.ffi.NULL if view is None else view

    def tensor(self, view: Optional[TensorView], *, as_parameter: bool = True) -> tuple:
        """(descriptor, pointer): the argument pair most entry points take."""
        return self.desc(view, as_parameter=as_parameter), self.ptr(view)

    def scalar(self, name: str) -> _Value:
        """run()'s value ``name`` as a float*, as MIOpen takes alpha and beta."""
        return _Value(name, by_pointer=True)

    def number(self, name: str) -> _Value:
        """run()'s value ``name`` passed as a number (epsilon, ...)."""
        return _Value(name, by_pointer=False)

    def prepare(self, function, *args):
        """The checked C call: ``args`` with views standing for addresses and
        scalar()/number() for the values run() takes; run() returns the
        arrays the entry names.  Leaves a plan for later calls of the same
        signature where their arrays can take the views' place."""
        self.refuse_outputs_over_copies()
        entry, handle, arrays, steering = self._signature
        template, pointer_positions, views, slots = list(args), [], [], []
        scalars = self.ffi.new("float[]", max(1, sum(isinstance(a, _Value) and a.by_pointer for a in args)))
        count = 0
        for position, arg in enumerate(args):
            if isinstance(arg, TensorView):
                pointer_positions.append(position)
                views.append(arg)
                template[position] = None  # the plan must not keep the array alive
            elif isinstance(arg, _Value):
                slots.append((position, entry.values.index(arg.name), count if arg.by_pointer else None))
                template[position] = scalars + count if arg.by_pointer else None
                count += arg.by_pointer
        plan = prepared.Plan(entry, self.handle, self.library, function, template, tuple(pointer_positions),
                             tuple(slots), scalars, self._descriptors)
        prepared.remember(plan, entry, handle, arrays, steering, views)
        addresses = [self.ffi.cast("void*", view.ptr) for view in views]
        # What run() returns: the caller's arrays, with the outputs the checks allocated.
        outputs = list(arrays)
        for view in views:
            outputs[entry.arrays.index(view.name)] = view.source
        return prepared.CheckedCall(plan, addresses, entry.pick(outputs), self._keepalive)
