"""One library call on arrays: the handle, each array adapted and described,
missing outputs allocated, and the C call.  Shared by the batch-norm,
group-norm and split-phase functions.

The library is the only validator.  It checks shapes, dtypes, strides, which
pointers go together, epsilon, overlap between outputs and inputs..., and
its refusal comes back as the ``MIOpenError`` subclass of its status with its
message; a refused call writes nothing.  What Python checks is what the
library cannot see:

* that each argument is an array it can address (arrays.py: a dtype with a
  ``miopenDataType_t``, strides in whole elements) and lives where the
  handle's backend runs;
* that an output is writable, and that it does not overlap an input Python
  copied for its strides (the library sees only the copy);
* that arrays the C prototype describes with one descriptor (a scale and its
  gradient, a running and a saved mean...) are laid out alike, since the
  library can only trust the descriptor it is given.

prepare() ends a first call and leaves a plan that later calls with the same
signature run without any of this (prepared.py).  Missing outputs are
allocated in the input's array library; data outputs (y, dx) follow x's
memory layout (NHWC stays NHWC).  A parameter array (scale, bias, their
gradients, statistics) of lower rank than x is described with a leading 1
and trailing 1s up to x's rank: (C,) as (1, C, 1, 1), (C, H, W) as
(1, C, H, W).
"""

from __future__ import annotations

from typing import Optional

from . import arrays, dtypes, prepared
from .arrays import DEVICE, HOST, TensorView
from .descriptor import described
from .errors import MIOpenError
from .handle import Handle, default_handle
from .library import load

_BACKEND_FOR_LOCATION = {HOST: "cpu", DEVICE: "gpu", None: "auto"}
_LOCATION_FOR_BACKEND = {"cpu": HOST, "gpu": DEVICE}


class _Value:
    """Stands in prepare()'s arguments for a value run() is given by name:
    a float passed by pointer (alpha, beta) or a number passed by value."""

    def __init__(self, name: str, by_pointer: bool):
        self.name = name
        self.by_pointer = by_pointer


class ArrayCall:
    """The arrays of one call: adapted, described, and kept alive until it
    returns."""

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
        self.desc(self.x)  # x's descriptor first: what is wrong with x is told before the rest

    # -- views ---------------------------------------------------------------
    def view(self, obj, name: str, *, output: bool = False) -> Optional[TensorView]:
        """The array ``obj`` as the library will address it (None stays None)."""
        if obj is None:
            return None
        view = arrays.view_of(obj, name, output=output, stream=self.stream)
        expected = _LOCATION_FOR_BACKEND[self.backend]
        if view.location is not None and view.location != expected:
            where = "device (GPU) memory" if view.location == DEVICE else "host memory"
            raise ValueError(
                f"{name} is {where} but the handle runs on the {self.backend.upper()}; "
                f"pass {'host (NumPy)' if expected == HOST else 'device'} arrays or "
                f"another handle"
            )
        if view.strides is None:
            raise ValueError(
                f"{name} has strides the library cannot {'write through' if output else 'address'} "
                f"(negative, zero or misaligned): shape {view.shape}"
                + ("" if output else "; make it contiguous")
            )
        if output:
            if not view.writable:
                raise ValueError(f"{name} is read-only")
            self._outputs.append(view)
        self._keepalive.append(view)
        return view

    def output(self, obj, name: str, like: TensorView, *, dtype: Optional[str] = None, same_layout: bool = False,
               blended: bool = False, hint: str = "") -> TensorView:
        """The output ``obj``, or when None a new array of ``like``'s shape
        and library, in ``dtype`` (default ``like``'s), packed in ``like``'s
        axis order with ``same_layout`` (else row-major).  ``blended``: the
        result is blended into the output, which must then be given."""
        if obj is None:
            if blended:
                raise ValueError(f"{name} must be given when its beta is nonzero (the result is blended into it)")
            obj = arrays.allocate_like(like, name, like.shape, dtype or like.dtype,
                                       layout=like if same_layout else None, hint=hint)
        return self.view(obj, name, output=True)

    def refuse_outputs_over_copies(self) -> None:
        """The library refuses an output that overlaps another operand, but
        it cannot see an input that was copied here for its strides: an
        output over the caller's original is refused here."""
        for copy in (view for view in self._keepalive if view.copy_of is not None):
            original = arrays.byte_bounds(copy.copy_of)
            for out in self._outputs:
                begin, end = out.byte_range()
                if begin < original[1] and original[0] < end:
                    raise ValueError(
                        f"{out.name} overlaps {copy.name}'s memory: an output may share memory with "
                        f"another tensor only in place (at the same address with the same strides)"
                    )

    # -- C arguments ---------------------------------------------------------
    def _layout(self, view: TensorView, as_parameter: bool) -> tuple:
        """(shape, strides) as described: a parameter of lower rank than x
        gets a leading 1 and trailing 1s up to x's rank."""
        rank = len(view.shape)
        if not as_parameter or rank >= self.x.ndim:
            return tuple(view.shape), tuple(view.strides)
        trailing = (1,) * (self.x.ndim - 1 - rank)
        return (1,) + tuple(view.shape) + trailing, (1,) + tuple(view.strides) + trailing

    def desc(self, view: Optional[TensorView], *, as_parameter: bool = True):
        """The view's descriptor: at x's rank for data and parameters, or with
        the view's own shape (``as_parameter=False``)."""
        if view is None:
            return self.ffi.NULL
        shape, strides = self._layout(view, as_parameter)
        try:
            descriptor = described(dtypes.MIOPEN_CODE[view.dtype], shape, strides)
        except MIOpenError as exc:  # a length or stride the library's descriptor refuses
            raise type(exc)(exc.status, f"{view.name}: {exc.message}", exc.status_name) from None
        self._descriptors.append(descriptor)
        return descriptor.ptr

    def shared_desc(self, view: Optional[TensorView], *others: Optional[TensorView], as_parameter: bool = True):
        """The descriptor the C prototype gives ``view`` and ``others``
        together: they must be laid out alike (dtype, lengths, strides where
        a length exceeds 1), as the library can only trust that descriptor."""
        present = [v for v in (view, *others) if v is not None]
        if not present:
            return self.ffi.NULL
        first = present[0]
        shape, strides = self._layout(first, as_parameter)
        used = [i for i, n in enumerate(shape) if n > 1]
        for other in present[1:]:
            other_shape, other_strides = self._layout(other, as_parameter)
            if (other.dtype, other_shape, [other_strides[i] for i in used]) != (
                    first.dtype, shape, [strides[i] for i in used]):
                raise ValueError(
                    f"{first.name} ({first.dtype}, shape {first.shape}, strides {first.strides}) and "
                    f"{other.name} ({other.dtype}, shape {other.shape}, strides {other.strides}) share one "
                    f"descriptor in the C call and must have the same dtype, shape and layout"
                )
        return self.desc(first, as_parameter=as_parameter)

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

    def prepare(self, function: str, *args):
        """The call of the entry point named ``function``: ``args`` with
        views standing for addresses and scalar()/number() for the values
        run() takes; run() returns the arrays the entry names.  Leaves a plan
        for later calls of the same signature where their arrays can take
        the views' place."""
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
        addresses = [view.ptr for view in views]
        # What run() returns: the caller's arrays, with the outputs allocated here.
        outputs = list(arrays)
        for view in views:
            outputs[entry.arrays.index(view.name)] = view.source
        return prepared.FirstCall(plan, addresses, entry.pick(outputs), self._keepalive)
