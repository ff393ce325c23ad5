"""Repeated calls skip the adaptation of their arrays.

What call.py concludes (which entry point, which descriptors, which arrays
to allocate and how, what it refuses) depends only on a call's *signature*:
for each array argument its type, dtype, shape, strides, writability and
alignment (device and requires_grad for torch tensors); the arguments that
steer it (the mode, whether a beta is nonzero, ...); and the handle.  The
first call with a signature adapts every array and leaves a ``Plan`` here:
the C function with its descriptors and constants in place and, for each
array, a cheap way to read its address.  A later call with the same
signature reads the addresses and the scalar values and makes the C call
(which checks everything again, as always): a few microseconds of Python
instead of tens, which on a small tensor is most of the call.  What runs
then is generated once and written out without loops: each Entry's find()
reads the signature in one expression per array count, and each plan's
run() allocates, reads addresses and calls in straight-line code (its
constants bound as closure variables), so that the Python left is mostly
reading the arrays' layouts and addresses and making the outputs.

Plain NumPy arrays that the library addresses as they are (no private copy)
and plain torch tensors are planned; any other argument takes the first-call
path every time.  A plan on CUDA tensors runs only where the first-call
path's DLPack export would order nothing: with the handle on the default
stream or on torch's current one (else the export makes the handle's stream
wait for torch's).  Plans are kept per thread (each owns the buffer its ``float*``
scalars are passed in), the oldest dropped first when there are too many.
"""

from __future__ import annotations

import functools
import operator
import sys
import threading
import weakref
from typing import Callable, Optional

import numpy as np

from . import arrays as adapters
from .cdef import void_pointer

_PLANS_PER_THREAD = 256
_per_thread = threading.local()
# torch.Tensor once torch is imported (this module never imports it) and a
# call has been planned; torch's current raw CUDA stream of a device.
_torch_tensor: Optional[type] = None
_current_stream = None


class Entry:
    """One public function: its array arguments in the order its calls list
    them (outputs it allocates included), the values run() takes in order,
    and the arrays it returns (one alone, or a tuple)."""

    __slots__ = ("name", "arrays", "values", "results", "pick", "key", "find")

    def __init__(self, name: str, arrays: tuple, values: tuple, results: tuple):
        self.name = name
        self.arrays = arrays
        self.values = values
        self.results = tuple(arrays.index(result) for result in results)  # their indices in arrays
        self.pick = operator.itemgetter(*self.results)
        # key(handle, arrays, steering): a call's signature (_Unplanned for an
        # argument that is neither a plain NumPy array nor a plain torch
        # tensor); find(handle, arrays, steering): the plan a previous call of
        # this signature left in this thread, or None.
        self.key, self.find = _entry_functions(len(arrays))(self)

    def __repr__(self) -> str:
        return f"<prepared.Entry {self.name}>"


def real_number(value, name: str) -> float:
    """A scalar passed by pointer (alpha, beta), as the C float it becomes."""
    try:
        return float(value)
    except (TypeError, ValueError):
        raise TypeError(f"{name} must be a real number, got {value!r}") from None


class Plan:
    """A prepared call: the C arguments in place except the arrays' addresses
    and the values (scalars and numbers) that run() is given, in the order
    its entry names them."""

    def __init__(self, entry: Entry, handle, library, function: str, template: list, pointer_positions: tuple,
                 value_slots: tuple, scalars, keepalive: list):
        self._entry = entry
        self._handle = weakref.ref(handle)
        self._handle_open = handle.lifetime()  # .alive: the handle neither closed nor collected
        self._library = library
        self._ffi = library.ffi
        self._check = library.check
        self._name = function
        self._function = getattr(library.lib, function)
        self._template = template
        self._pointer_positions = pointer_positions
        # value_slots: (position, value index, index in scalars or None for a number)
        self._pointed = tuple((scalar, index) for _, index, scalar in value_slots if scalar is not None)
        self._numbers = tuple((position, index) for position, index, scalar in value_slots if scalar is None)
        self._scalars = scalars  # float[]; the template points into it
        self._keepalive = keepalive  # the descriptors the template names
        # Set by repeatable():
        self._reads: tuple = ()  # (position, array index, address reader) per pointer argument
        self._allocations: tuple = ()  # (array index, source index, make) per output it creates: arrays.allocator
        self._joint: tuple = ()  # (array indices, make) per group of outputs made together: arrays.joint_allocators
        self._cuda_device: Optional[int] = None  # of the CUDA tensors, whose stream must be the handle's
        self._integer_addresses = False  # the function takes pointers as ints (_take_addresses)

    def repeatable(self, arrays: tuple, views: list) -> bool:
        """Learns to read each pointer argument's address from a later call's
        arrays (or from an output it allocates like this call did); False
        when some address cannot be read that way."""
        reads, allocations, names = [], {}, self._entry.arrays
        made = list(arrays)  # and the outputs this call allocated, once met: later ones may be made like them
        for position, view in zip(self._pointer_positions, views):
            if view.name not in names:
                return False
            index = names.index(view.name)
            array = view.source
            if type(array) is np.ndarray:
                if not (array.flags.aligned and array.dtype.alignment == array.dtype.itemsize):
                    return False  # the signature's alignment flag would not stand for ours
                read = adapters.address_reader(array, self._ffi)
            elif type(array) is _torch_tensor:
                read = _tensor_address(self._ffi)
                if array.is_cuda:
                    self._cuda_device = array.get_device()
            else:
                return False
            if arrays[index] is None:  # an output the first call allocated
                allocate = adapters.allocator(array, made)
                if allocate is None:
                    return False
                allocations[index] = allocate
                made[index] = array
            elif array is not arrays[index]:  # a private copy, for strides the library cannot use
                return False
            reads.append((position, index, read))
        self._reads = tuple(reads)
        if self._cuda_device is not None:  # a CUDA allocation costs more host time than a view
            self._joint, allocations = adapters.joint_allocators(allocations, made)
        self._allocations = tuple((index, source, make) for index, (source, make) in allocations.items())
        if reads and all(type(view.source) is _torch_tensor for view in views):
            self._take_addresses()
        self._compile_run()
        return True

    def _take_addresses(self) -> None:
        """Every array is a torch tensor, whose data_ptr() is an int: the
        call goes through the entry point's integer-address declaration
        (Library.by_address), with the template's void pointers (alpha and
        beta, NULL data) as ints too, and makes no cffi object per array."""
        ffi = self._ffi
        self._integer_addresses = True
        self._function = _address_function(self._library, self._name)
        parameters = ffi.typeof(getattr(self._library.lib, self._name)).args
        self._template = [int(ffi.cast("uintptr_t", arg)) if isinstance(arg, ffi.CData) and void_pointer(parameter)
                          else arg for arg, parameter in zip(self._template, parameters)]
        self._reads = tuple((position, index, None) for position, index, _ in self._reads)  # a.data_ptr()

    def on_torch_stream(self) -> bool:
        """For a plan on CUDA tensors whose handle is open: its handle on the
        default stream or on torch's current one (where find() may use it)."""
        handle = self._handle()
        stream = handle._stream  # Handle.stream's cached answer (None after the setter), without its checks
        if stream is None:
            stream = handle.stream
        return stream == 0 or stream == _current_stream(self._cuda_device)

    def _compile_run(self) -> None:
        """Sets ``self.run(arrays, values)``, which repeats the call on
        ``arrays`` (of this plan's signature) with ``values``: the plan's
        steps written out as one function without loops (prepared_source()),
        so that a repeated call spends its Python time reading the arrays
        and allocating outputs rather than walking tables."""
        constants, template, reads = {}, self._template, {position: (index, read) for position, index, read in
                                                           self._reads}
        numbers = dict(self._numbers)

        def constant(value) -> str:
            name = f"_k{len(constants)}"
            constants[name] = value
            return name

        allocations = tuple((index, source, constant(make)) for index, source, make in self._allocations)
        joint = tuple((indices, constant(make)) for indices, make in self._joint)
        args = []
        for position, value in enumerate(template):
            if position in reads:
                index, read = reads[position]
                args.append(f"a{index}.data_ptr()" if self._integer_addresses else f"{constant(read)}(a{index})")
            elif position in numbers:
                args.append(f"float(values[{numbers[position]}])")
            else:
                args.append(constant(value))
        source = prepared_source(len(self._entry.arrays), allocations, joint, self._pointed, tuple(args),
                                 self._entry.results, tuple(constants))
        make = _compiled(source, self._entry.name)
        self.run = make(self._function, self._check, self._scalars, real_number, self._entry.values,
                        *constants.values())

    def with_addresses(self, addresses: list) -> list:
        """The C arguments with these addresses (ints) in place (values still to set)."""
        args = self._template.copy()
        for position, address in zip(self._pointer_positions, addresses):
            args[position] = address if self._integer_addresses else self._ffi.cast("void*", address)
        return args

    def call(self, args: list, values: tuple) -> None:
        """Sets the values in ``args`` and makes the C call."""
        scalars = self._scalars
        for scalar, index in self._pointed:
            try:
                scalars[scalar] = float(values[index])
            except (TypeError, ValueError):
                scalars[scalar] = real_number(values[index], self._entry.values[index])
        for position, index in self._numbers:
            args[position] = float(values[index])
        status = self._function(*args)
        if status:
            self._check(status)


def _tensor_address(ffi) -> Callable:
    """A reader of a torch tensor's address as a cffi pointer (calls whose
    other arrays are NumPy arrays take cffi pointers)."""
    cast = ffi.cast
    return lambda tensor: cast("void*", tensor.data_ptr())


def prepared_source(count: int, allocations: tuple, joint: tuple, pointed: tuple, args: tuple, results: tuple,
                    constants: tuple) -> str:
    """The Python source of a function ``make(_function, _check, _scalars,
    _real_number, _value_names, _k0, _k1, ...)`` returning a plan's
    ``run(arrays, values)``: it names the ``count`` arrays a0, a1, ...;
    makes each allocated output (``allocations``: (array index, index of the
    array np.empty_like takes or None, name of the maker)) and each group of
    joint outputs (``joint``: (indices, name of the maker)); writes each
    value passed by pointer into ``_scalars`` (``pointed``: (slot, value
    index)), as a float or with real_number()'s TypeError; calls
    ``_function`` with ``args`` (source expressions: an array's address, a
    value as a float, one of the ``constants``, make's last parameters);
    raises a failed status through ``_check``; returns the ``results``
    (array indices)."""
    arrays = ", ".join(f"a{index}" for index in range(count))
    body = [f"{arrays}, = arrays"]
    for index, source, make in allocations:
        body.append(f"a{index} = {make}({'' if source is None else f'a{source}'})")
    for indices, make in joint:
        body.append(f"{', '.join(f'a{index}' for index in indices)}, = {make}()")
    for slot, index in pointed:
        body += ["try:",
                 f"    _scalars[{slot}] = float(values[{index}])",
                 "except (TypeError, ValueError):",
                 f"    _scalars[{slot}] = _real_number(values[{index}], _value_names[{index}])"]
    body += [f"status = _function({', '.join(args)})",
             "if status:",
             "    _check(status)",
             "return " + (f"a{results[0]}" if len(results) == 1 else ", ".join(f"a{index}" for index in results))]
    return "\n".join([f"def make(_function, _check, _scalars, _real_number, _value_names, {', '.join(constants)}):",
                      "    def run(arrays, values):",
                      *(f"        {line}" for line in body),
                      "    return run", ""])


@functools.lru_cache(maxsize=256)
def _compiled(source: str, entry_name: str) -> Callable:
    """The ``make`` function of prepared_source()'s ``source`` (plans of the
    same shape share it: their constants are its arguments)."""
    namespace: dict = {}
    exec(compile(source, f"<miopen_bn plan of {entry_name}>", "exec"), namespace)
    return namespace["make"]


class FirstCall:
    """A signature's first call, on the addresses its arrays were found at
    (private copies and new outputs included); run() returns those arrays."""

    def __init__(self, plan: Plan, addresses: list, results, keepalive: list):
        self._plan = plan
        self._addresses = addresses
        self._results = results
        self._keepalive = keepalive  # the views: private copies live until the call is made

    def run(self, arrays: tuple, values: tuple):
        self._plan.call(self._plan.with_addresses(self._addresses), values)
        return self._results


def _plans() -> dict:
    try:
        return _per_thread.plans
    except AttributeError:
        plans = _per_thread.plans = {}
        return plans


class _Unplanned(Exception):
    """An argument neither None, a plain NumPy array nor a plain torch tensor."""


def _unplanned():
    raise _Unplanned


# A signature is (entry, id of the handle or None, steering, one layout per
# array): None for an absent array, else a tuple of five starting with its
# dtype (NumPy's and torch's dtypes never compare equal).  For a torch
# tensor: its strides as True where it is contiguous (cheaper to read and
# compare than the tuple; the strides of a contiguous tensor are its
# shape's packed strides except along length-1 axes, whose strides address
# nothing and which a descriptor made here takes as 1), the device as True
# for the CPU (cheaper than a torch.device), else as it is; DLPack refuses
# tensors that require grad: the key keeps them apart.  Written out per
# array, as Entry's functions read it.
_LAYOUT = ("None if {a} is None "
           "else ({a}.dtype, {a}.shape, {a}.is_contiguous() or {a}.stride(), {a}.is_cpu or {a}.device, "
           "{a}.requires_grad) "
           "if type({a}) is tensor "
           "else ({a}.dtype, {a}.shape, {a}.strides, {a}.flags.writeable, {a}.flags.aligned) "
           "if type({a}) is np.ndarray "
           "else _unplanned()")


@functools.lru_cache(maxsize=None)
def _entry_functions(count: int) -> Callable:
    """``make(entry)`` giving an Entry of ``count`` arrays its key() and
    find(), each reading the arrays' layouts in one expression (no loop: a
    repeated call spends its Python time reading the arrays, not walking
    them).  They run in this module's namespace: ``_torch_tensor`` is read
    at each call, as torch may be imported after the entry is made."""
    names = ", ".join(f"a{index}" for index in range(count))
    signature = ("(entry, None if handle is None else id(handle), steering, "
                 + ", ".join(_LAYOUT.format(a=f"a{index}") for index in range(count)) + ")")
    source = f"""
def make(entry):
    def key(handle, arrays, steering):
        {names}, = arrays
        tensor = _torch_tensor
        return {signature}

    def find(handle, arrays, steering):
        plans = getattr(_per_thread, "plans", None)
        if plans is None:
            return None
        {names}, = arrays
        tensor = _torch_tensor
        try:
            plan = plans.get({signature})
        except (_Unplanned, TypeError):  # TypeError: an unhashable steering argument (the first call tells)
            return None
        # Usable while its handle is open (the signature names a given handle
        # by id: while the plan's is open, no other object has its id) and,
        # on CUDA tensors, on torch's stream.
        if plan is None or not plan._handle_open.alive:
            return None
        return plan if plan._cuda_device is None or plan.on_torch_stream() else None

    return key, find
"""
    namespace: dict = {}
    exec(compile(source, f"<miopen_bn signature of {count} arrays>", "exec"), globals(), namespace)
    return namespace["make"]


def remember(plan: Plan, entry: Entry, handle, arrays: tuple, steering: tuple, views: list) -> None:
    """Keeps ``plan`` for this signature when a later call's arrays can stand
    in for ``views`` (the pointer arguments, in order)."""
    _know_torch()
    try:
        key = entry.key(handle, arrays, steering)
    except _Unplanned:
        return
    if not plan.repeatable(arrays, views):
        return
    plans = _plans()
    try:
        if len(plans) >= _PLANS_PER_THREAD:
            del plans[next(iter(plans))]
        plans[key] = plan
    except TypeError:  # an unhashable steering argument the first call did not need
        pass


_address_functions: dict = {}  # entry point name -> its integer-address declaration


def _address_function(library, name: str):
    found = _address_functions.get(name)
    if found is None:
        found = _address_functions.setdefault(name, getattr(library.by_address(name), name))
    return found


def _know_torch() -> None:
    """Learns torch's tensor type (and stream query) once torch is imported."""
    global _torch_tensor, _current_stream
    if _torch_tensor is None and "torch" in sys.modules:
        torch = sys.modules["torch"]
        _current_stream = getattr(torch._C, "_cuda_getCurrentRawStream", None)
        _torch_tensor = torch.Tensor
