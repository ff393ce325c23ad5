"""Fuzz cases for the entry points that take tensors (batch norm, group norm).

A case is a valid base problem (``batch_norm_bases`` / ``group_norm_bases``)
with up to three mutations (``mutations``): a descriptor re-set through a
random setter with malformed values, given huge strides, another type or
other lengths, or replaced by NULL, a never-set, a destroyed or a foreign
one; a buffer made NULL or aliased; a scalar made NaN, infinite, extreme or
out of its enum; alpha/beta pointers NULL; the handle NULL, destroyed or
foreign.  ``Case`` then backs every buffer with memory covering what its
(final) descriptor describes, fills inputs, NaN-poisons outputs, calls, and
offers the checks test_fuzz_abi.py states as properties.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

import numpy as np
from entry_points import (
    BACKWARD,
    BATCH_NORM,
    GROUP_NORM,
    INFERENCE,
    PARAMETERS,
    TRAINING,
    buffer_parameters,
    descriptor_of,
    descriptor_parameters,
    invoke,
    is_output,
)
from fuzz_memory import Buffer, DescriptorState, element_space, read_state, strided_view
from hypothesis import strategies as st
from strategies import (
    PACKED,
    activations,
    alpha_betas,
    bn_shapes,
    c_counts,
    c_dtype_codes,
    c_enum_codes,
    c_epsilons,
    c_factors,
    c_lengths,
    c_scalings,
    c_strides,
    dims,
    empty,
    epsilons,
    exp_avg_factors,
    grad_dtypes,
    huge_strides,
    io_dtypes,
    layouts,
    modes,
    param_dtypes,
)

from miopen_bn import dtypes, reference
from miopen_bn.tolerances import ELEMENTWISE, REDUCTION, check

SCALING_PAIRS = {
    "beta": ("alpha", ("y",)),
    "betaDataDiff": ("alphaDataDiff", ("dx",)),
    "betaParamDiff": ("alphaParamDiff", ("resultBnScaleDiff", "resultBnBiasDiff")),
}
SCALINGS = ("alpha", "beta", "alphaDataDiff", "betaDataDiff", "alphaParamDiff", "betaParamDiff")
# Scalars passed by value, with what a mutation may replace them by.
SCALAR_MUTATIONS = {
    "bn_mode": c_enum_codes(2),
    "mode": c_enum_codes(6),
    "activation": c_enum_codes(2),
    "epsilon": c_epsilons(),
    "expAvgFactor": c_factors(),
    "activationBeta": st.sampled_from((float("nan"), float("inf"), 0.0, -3.0)),
    "num_groups": st.sampled_from((0, 1, 7, 2**32 + 1, 2**63, 2**64 - 1)),
}
# Inputs a well-posed call has positive: scales, variances, inverse std.
POSITIVE_INPUTS = {"bnScale", "weight", "resultRunningVariance", "estimatedVariance", "savedInvVariance", "rstd"}
# Optional pairs (both or neither); exactly one is a mutation.
PAIRS = (
    ("resultRunningMean", "resultRunningVariance"),
    ("resultSaveMean", "resultSaveInvVariance"),
    ("estimatedMean", "estimatedVariance"),
    ("savedMean", "savedInvVariance"),
)


@dataclass
class Base:
    """A valid call: descriptor states, scalar values, NULL buffers, aliases."""

    function: str
    mode: str  # batch norm's mode, for the data ("spatial" for group norm)
    states: dict  # descriptor parameter -> DescriptorState, or None for NULL
    scalars: dict  # parameter -> value (alpha/beta as floats, passed by pointer)
    null_buffers: set = field(default_factory=set)
    aliases: dict = field(default_factory=dict)  # output buffer -> buffer it shares


def state_for(shape: tuple, dtype, layout=PACKED) -> DescriptorState:
    """The descriptor of a tensor of `shape` laid out as `layout`."""
    array = empty(shape, dtype, layout)
    code = dtypes.MIOPEN_CODE[dtypes.name_of(dtype)]
    return DescriptorState(code, tuple(shape), tuple(s // array.itemsize for s in array.strides))


# --------------------------------------------------------------------------- #
# Base problems: built from explicit choices (fixed workloads use these), or
# drawn (the strategies below)
# --------------------------------------------------------------------------- #
SHARED_PARAM_DESCS = ("bnScaleBiasMeanVarDesc", "bnScaleBiasDiffDesc")


def batch_norm_base(
    function: str,
    mode: str,
    shape: tuple,
    x_dtype,
    p_dtype=dtypes.FLOAT32,
    g_dtype=None,
    layouts_by_desc: Optional[dict] = None,
    in_place: Optional[str] = None,
    absent_pairs: tuple = (),
    null_unused_descs: bool = False,
    scalars: Optional[dict] = None,
) -> Base:
    """A valid batch-norm call.  layouts_by_desc: descriptor parameter ->
    Layout (default packed); in_place: the buffer the output shares ("x", or
    "dy" for dx); absent_pairs: first members of the optional pairs passed as
    NULL, whose V2 descriptors are NULL too with null_unused_descs; scalars
    overrides the defaults (epsilon 1e-5, factor 0.1, alpha 1, beta 0)."""
    names = PARAMETERS[function]
    layout_of = (layouts_by_desc or {}).get
    pshape = reference.param_shape(shape, mode)
    g_dtype = g_dtype or x_dtype
    states, aliases = {}, {}
    for name in (n for n in names if n.endswith("Desc")):
        if name == "xDesc":
            states[name] = state_for(shape, x_dtype, layout_of(name, PACKED))
        elif name in ("dyDesc", "dxDesc"):
            states[name] = state_for(shape, g_dtype, layout_of(name, PACKED))
        elif name == "yDesc":
            states[name] = state_for(shape, x_dtype, layout_of(name, PACKED))
        else:
            states[name] = state_for(pshape, p_dtype, layout_of(name, PACKED))
    output = "dx" if function in BACKWARD else "y"
    if in_place is not None:
        states[output + "Desc"] = states[in_place + "Desc"]
        aliases[output] = in_place
    null_buffers = {member for pair in PAIRS if pair[0] in absent_pairs for member in pair}
    if null_unused_descs:
        for desc in set(states) - set(SHARED_PARAM_DESCS):
            users = [b for b in buffer_parameters(function) if descriptor_of(function, b) == desc]
            if users and all(b in null_buffers for b in users):
                states[desc] = None
    values = {"bn_mode": 1 if mode == "spatial" else 0, "epsilon": 1e-5}
    if "expAvgFactor" in names:
        values["expAvgFactor"] = 0.1
    for beta, (alpha, _) in SCALING_PAIRS.items():
        if beta in names:
            values[alpha], values[beta] = 1.0, 0.0
    values.update(scalars or {})
    return Base(function, mode, states, values, null_buffers, aliases)


@st.composite
def batch_norm_bases(draw) -> Base:
    function = draw(st.sampled_from(BATCH_NORM), label="function")
    mode = draw(modes(), label="mode")
    shape = draw(bn_shapes(mode=mode, training=True), label="shape")
    x_dtype = draw(io_dtypes(), label="x dtype")
    p_dtype = draw(param_dtypes(x_dtype), label="param dtype")
    g_dtype = draw(grad_dtypes(x_dtype), label="grad dtype") if function in BACKWARD else x_dtype
    names = PARAMETERS[function]
    layouts_by_desc = {n: draw(layouts(len(shape)), label=n) for n in names if n.endswith("Desc")}
    in_place = draw(st.sampled_from((None, "dy", "x") if function in BACKWARD else (None, "x")), label="in place")
    if in_place == "x" and g_dtype != x_dtype:
        in_place = None  # dx over x needs x's type
    absent = tuple(pair[0] for pair in PAIRS if pair[0] in names and draw(st.booleans(), label=f"no {pair[0]}"))
    scalars = {"epsilon": draw(epsilons(), label="epsilon")}
    if "expAvgFactor" in names:
        scalars["expAvgFactor"] = draw(exp_avg_factors(), label="factor")
    for beta, (alpha, _) in SCALING_PAIRS.items():
        if beta in names:
            scalars[alpha], scalars[beta] = draw(alpha_betas(), label=f"{alpha}/{beta}")
    return batch_norm_base(
        function, mode, shape, x_dtype, p_dtype, g_dtype, layouts_by_desc, in_place, absent,
        draw(st.booleans(), label="NULL descriptors for absent pairs"), scalars,
    )


def group_norm_base(
    function: str,
    shape: tuple,
    groups: int,
    x_dtype,
    p_dtype=dtypes.FLOAT32,
    stats_dtype=dtypes.FLOAT32,
    channel_params: bool = True,
    layouts_by_desc: Optional[dict] = None,
    absent: tuple = (),
    scalars: Optional[dict] = None,
) -> Base:
    """A valid group-norm call: parameters (C,) with channel_params, else
    (1, C, 1, ...); absent: forward statistics passed as NULL; scalars
    overrides mode 1 (affine), epsilon 1e-5, no activation."""
    layout_of = (layouts_by_desc or {}).get
    pshape = (shape[1],) if channel_params else (1, shape[1]) + (1,) * (len(shape) - 2)
    states = {}
    for name in (n for n in PARAMETERS[function] if n.endswith("Desc")):
        if name in ("xDesc", "yDesc", "dyDesc", "dxDesc"):
            states[name] = state_for(shape, x_dtype, layout_of(name, PACKED))
        elif name in ("meanDesc", "rstdDesc"):
            states[name] = state_for((shape[0], groups), stats_dtype)
        else:
            states[name] = state_for(pshape, p_dtype)
    values = {"mode": 1, "num_groups": groups, "epsilon": 1e-5, "activation": 0, "activationBeta": 1.0}
    values.update(scalars or {})
    return Base(function, "spatial", states, values, set(absent))


@st.composite
def group_norm_bases(draw) -> Base:
    function = draw(st.sampled_from(GROUP_NORM), label="function")
    groups, per_group = draw(st.integers(1, 3), label="G"), draw(st.integers(1, 3), label="C/G")
    spatial = tuple(draw(st.lists(dims(), max_size=3), label="spatial lengths"))
    if per_group * int(np.prod(spatial)) < 2:
        per_group = 2
    shape = (draw(st.integers(1, 3), label="N"), groups * per_group) + spatial
    x_dtype = draw(io_dtypes(), label="x dtype")
    stats = sorted({dtypes.FLOAT32, x_dtype if x_dtype == dtypes.FLOAT64 else dtypes.FLOAT32})
    absent = ()
    if function != "miopenBNGroupNormBackward":
        absent = tuple(name for name in ("mean", "rstd") if draw(st.booleans(), label=f"no {name}"))
    return group_norm_base(
        function,
        shape,
        groups,
        x_dtype,
        draw(param_dtypes(x_dtype), label="param dtype"),
        draw(st.sampled_from(stats), label="statistics dtype"),
        draw(st.booleans(), label="(C) parameters"),
        {n: draw(layouts(len(shape)), label=n) for n in ("xDesc", "yDesc", "dyDesc", "dxDesc")},
        absent,
        {
            "mode": draw(st.integers(0, 5), label="norm mode"),
            "epsilon": draw(epsilons(), label="epsilon"),
            "activation": draw(st.integers(0, 1), label="activation"),
            "activationBeta": draw(st.sampled_from((1.0, 0.5, 2.0)), label="activation beta"),
        },
    )


# --------------------------------------------------------------------------- #
# Mutations: (kind, target, payload)
# --------------------------------------------------------------------------- #
@st.composite
def setter_calls(draw) -> tuple:
    """A call of one of the four setters with caller-style malformed values."""
    setter = draw(st.sampled_from(("4d", "4dEx", "nd", "layout")))
    dtype = draw(c_dtype_codes())
    if setter == "4d":
        return setter, dtype, tuple(draw(c_lengths()) for _ in range(4))
    if setter == "4dEx":
        return setter, dtype, tuple(draw(c_lengths()) for _ in range(4)) + tuple(draw(c_strides()) for _ in range(4))
    count = draw(c_counts())
    entries = min(max(count, 1), 5)  # the library never reads more than 5 entries
    lens = tuple(draw(c_lengths()) for _ in range(entries))
    if setter == "nd":
        strides = draw(st.none() | st.tuples(*[c_strides()] * entries))
        return setter, dtype, (count, lens, strides)
    return setter, dtype, (draw(c_enum_codes(9)), lens, count)


def call_setter(lib, ffi, desc, call: tuple) -> int:
    """Makes a setter_calls() call on `desc`; returns its status."""
    setter, dtype, args = call
    if setter == "4d":
        return lib.miopenSet4dTensorDescriptor(desc, dtype, *args)
    if setter == "4dEx":
        return lib.miopenSet4dTensorDescriptorEx(desc, dtype, *args)
    if setter == "nd":
        count, lens, strides = args
        c_strides = ffi.NULL if strides is None else ffi.new("int[]", list(strides))
        return lib.miopenSetTensorDescriptor(desc, dtype, count, ffi.new("int[]", list(lens)), c_strides)
    layout, lens, count = args
    return lib.miopenSetNdTensorDescriptorWithLayout(desc, dtype, layout, ffi.new("int[]", list(lens)), count)


SETTER_NAMES = {
    "4d": "miopenSet4dTensorDescriptor",
    "4dEx": "miopenSet4dTensorDescriptorEx",
    "nd": "miopenSetTensorDescriptor",
    "layout": "miopenSetNdTensorDescriptorWithLayout",
}


@st.composite
def mutations(draw, base: Base) -> list:
    names = PARAMETERS[base.function]
    descs = descriptor_parameters(base.function)
    buffers = buffer_parameters(base.function)
    scalars = [name for name in names if name in SCALAR_MUTATIONS]
    scalings = [name for name in names if name in SCALINGS]
    pairs = [pair for pair in PAIRS if pair[0] in names]
    kinds = ["setter", "restride", "retype", "relength", "descriptor", "null_buffer", "scalar", "handle"]
    kinds += ["scaling", "null_scaling"] if scalings else []
    kinds += ["pair"] if pairs else []
    kinds += ["alias"] if {"x", "y"} <= set(buffers) or {"dy", "dx"} <= set(buffers) else []
    result = []
    for _ in range(draw(st.integers(0, 3), label="mutation count")):
        kind = draw(st.sampled_from(kinds), label="mutation")
        if kind == "setter":
            result.append((kind, draw(st.sampled_from(descs)), draw(setter_calls())))
        elif kind == "restride":
            result.append((kind, draw(st.sampled_from(descs)), tuple(draw(huge_strides()) for _ in range(5))))
        elif kind == "retype":
            result.append((kind, draw(st.sampled_from(descs)), draw(c_dtype_codes())))
        elif kind == "relength":
            change = draw(st.sampled_from(("grow", "one", "drop", "append")))
            result.append((kind, draw(st.sampled_from(descs)), (change, draw(st.integers(0, 4)))))
        elif kind == "descriptor":
            what = draw(st.sampled_from(("null", "unset", "dead", "foreign")))
            result.append((kind, draw(st.sampled_from(descs)), what))
        elif kind == "null_buffer":
            result.append((kind, draw(st.sampled_from(buffers)), None))
        elif kind == "scalar":
            target = draw(st.sampled_from(scalars))
            result.append((kind, target, draw(SCALAR_MUTATIONS[target])))
        elif kind == "handle":
            result.append((kind, "handle", draw(st.sampled_from(("null", "dead", "foreign")))))
        elif kind == "scaling":
            result.append((kind, draw(st.sampled_from(scalings)), draw(c_scalings())))
        elif kind == "null_scaling":
            result.append((kind, draw(st.sampled_from(scalings)), None))
        elif kind == "pair":
            result.append((kind, draw(st.sampled_from(pairs))[draw(st.integers(0, 1))], None))
        else:  # alias an output onto an input with possibly other addressing
            output, source = ("y", "x") if "y" in buffers else draw(st.sampled_from((("dx", "dy"), ("dx", "x"))))
            result.append((kind, output, source))
    return result


# --------------------------------------------------------------------------- #
# The case itself
# --------------------------------------------------------------------------- #
class Case:
    """Arguments and memory of one call; ``close()`` frees what it made.
    With `handle` the call goes through that (shared) handle, else its own."""

    def __init__(self, lib, ffi, base: Base, mutation_list: list, seed: int, handle=None):
        self.lib, self.ffi, self.base = lib, ffi, base
        self.function = base.function
        self.rng = np.random.default_rng(seed)
        self.values: dict = {}
        self.keep: list = []  # cffi objects that must outlive the call
        self.created_descs: list = []
        self.dead: list = []  # objects to destroy once everything is created
        self.numerics = True  # False once a scalar leaves the ordinary range
        self.buffers: dict = {}
        self.states: dict = {}
        self.snapshots: dict = {}
        self.handle = self._new_handle() if handle is None else None
        self.values["handle"] = handle if handle is not None else self.handle
        for name, state in base.states.items():
            self.values[name] = self.ffi.NULL if state is None else self._new_descriptor(state)
        for name, value in base.scalars.items():
            self.values[name] = self._scaling(value) if name in SCALINGS else value
        self.null_buffers = set(base.null_buffers)
        self.aliases = dict(base.aliases)
        for mutation in mutation_list:
            self._apply(*mutation)
        self._destroy_dead()
        self._back_buffers()

    # -- objects ---------------------------------------------------------------
    def _new_handle(self):
        created = self.ffi.new("miopenHandle_t*")
        assert self.lib.miopenBNCreateWithBackend(created, self.lib.miopenBNBackendCPU) == 0
        return created[0]

    def _new_descriptor(self, state: Optional[DescriptorState] = None):
        created = self.ffi.new("miopenTensorDescriptor_t*")
        assert self.lib.miopenCreateTensorDescriptor(created) == 0
        self.created_descs.append(created[0])
        if state is not None:
            self._set(created[0], state.dtype_code, state.lens, state.strides)
        return created[0]

    def _set(self, desc, dtype: int, lens: tuple, strides: Optional[tuple]) -> int:
        dims = self.ffi.new("int[]", list(lens) or [1])
        c_strides = self.ffi.NULL if strides is None else self.ffi.new("int[]", list(strides) or [1])
        return self.lib.miopenSetTensorDescriptor(desc, dtype, len(lens), dims, c_strides)

    def _scaling(self, value: float):
        pointer = self.ffi.new("float*", value)
        self.keep.append(pointer)
        return pointer

    def _foreign(self, kind: str):
        memory = self.ffi.new("char[256]")
        self.keep.append(memory)
        return self.ffi.cast(kind, memory)

    def _destroy_dead(self) -> None:
        # Destroyed only now: a later create could reuse the address, making
        # it live again, which no registry can tell apart.
        for kind, obj in self.dead:
            if kind == "handle":
                assert self.lib.miopenDestroy(obj) == 0
            else:
                self.created_descs.remove(obj)
                assert self.lib.miopenDestroyTensorDescriptor(obj) == 0

    # -- mutations -------------------------------------------------------------
    def _apply(self, kind: str, target: str, payload) -> None:
        lib, ffi = self.lib, self.ffi
        if kind in ("setter", "restride", "retype", "relength"):
            desc = self.values[target]
            if desc == ffi.NULL:
                desc = self.values[target] = self._new_descriptor()
            if kind == "setter":
                call_setter(lib, ffi, desc, payload)
                return
            state = read_state(lib, ffi, desc)
            if state is None:
                return
            if kind == "restride":
                self._set(desc, state.dtype_code, state.lens, payload[: len(state.lens)])
            elif kind == "retype":
                self._set(desc, payload, state.lens, state.strides)
            else:
                change, index = payload
                lens = list(state.lens)
                if change in ("grow", "one"):
                    lens[index % len(lens)] = lens[index % len(lens)] + 1 if change == "grow" else 1
                elif change == "drop" and len(lens) > 1:
                    lens.pop(index % len(lens))
                elif change == "append":
                    lens.append(2)
                self._set(desc, state.dtype_code, tuple(lens), None)
        elif kind == "descriptor":
            if payload == "null":
                self.values[target] = ffi.NULL
            elif payload == "unset":
                self.values[target] = self._new_descriptor()
            elif payload == "dead":
                dead = self._new_descriptor()
                self.dead.append(("descriptor", dead))
                self.values[target] = dead
            else:
                self.values[target] = self._foreign("miopenTensorDescriptor_t")
        elif kind == "null_buffer":
            self.null_buffers.add(target)
        elif kind == "scalar":
            self.values[target] = payload
            self.numerics = False
        elif kind == "handle":
            if payload == "null":
                self.values["handle"] = ffi.NULL
            elif payload == "dead":
                dead = self._new_handle()
                self.dead.append(("handle", dead))
                self.values["handle"] = dead
            else:
                self.values["handle"] = self._foreign("miopenHandle_t")
        elif kind == "scaling":
            self.values[target] = self._scaling(payload)
            self.numerics = False
        elif kind == "null_scaling":
            self.values[target] = ffi.NULL
        elif kind == "pair":
            self.null_buffers.add(target)
        else:
            self.aliases[target] = payload

    # -- memory ----------------------------------------------------------------
    def _back_buffers(self) -> None:
        """Memory for every buffer from its final descriptor, then the data."""
        lib, ffi = self.lib, self.ffi
        for name in buffer_parameters(self.function):
            desc = self.values[descriptor_of(self.function, name)]
            self.states[name] = read_state(lib, ffi, desc)
            if name in self.null_buffers or name in self.aliases:
                continue
            self.buffers[name] = Buffer.covering(element_space(lib, ffi, desc), self.states[name])
        for output, source in self.aliases.items():
            if output not in self.null_buffers:
                self.buffers[output] = self.buffers.get(source)
        for name in buffer_parameters(self.function):
            buffer = self.buffers.get(name)
            self.values[name] = ffi.NULL if buffer is None else ffi.cast("void*", buffer.ptr)
        for name, buffer in self.buffers.items():
            if buffer is not None and name not in self.aliases and self.states[name] is not None:
                self._fill(name, buffer, self.states[name])
        for buffer in self.unique_buffers():
            self.snapshots[id(buffer)] = self._snapshot(buffer)

    def _blended(self, name: str) -> bool:
        for beta, (_, outputs) in SCALING_PAIRS.items():
            if name in outputs:
                pointer = self.values.get(beta)
                return pointer is not None and pointer != self.ffi.NULL and pointer[0] != 0.0
        return False

    def _fill(self, name: str, buffer: Buffer, state: DescriptorState) -> None:
        """Inputs (and read-modify-write running statistics, and outputs
        blended with their prior) get data; other outputs stay NaN (0xFF)."""
        written = is_output(self.function, name) and not name.startswith("resultRunning")
        if not state.is_float or (written and not self._blended(name)):
            return  # integer types: the library must refuse them anyway
        buffer.view(state)[...] = self._data(name, state.lens, written).astype(state.numpy_dtype)

    def _data(self, name: str, lens: tuple, written: bool) -> np.ndarray:
        rng = self.rng
        if name == "x" and len(lens) >= 2:
            return activations(rng, lens, self.base.mode if self.function in BATCH_NORM else None)
        if name in POSITIVE_INPUTS:
            return rng.uniform(0.5, 2.0, lens)
        if name in ("x", "dy") or written:
            return rng.standard_normal(lens)
        return rng.uniform(-1.0, 1.0, lens)

    def unique_buffers(self) -> list:
        seen, result = set(), []
        for buffer in self.buffers.values():
            if buffer is not None and id(buffer) not in seen:
                seen.add(id(buffer))
                result.append(buffer)
        return result

    def _snapshot(self, buffer: Buffer) -> np.ndarray:
        if not buffer.sparse:
            return buffer.root.copy()
        # Only the elements of the one tensor a sparse buffer backs are ever touched.
        name = next(n for n, b in self.buffers.items() if b is buffer)
        return buffer.view(self.states[name]).copy()

    # -- the call and its checks -------------------------------------------------
    def call(self) -> int:
        return invoke(self.lib, self.function, self.values)

    def changed_buffers(self) -> list:
        """Names of buffers whose memory differs from before the call."""
        return sorted(
            name
            for name, buffer in self.buffers.items()
            if buffer is not None and self._snapshot(buffer).tobytes() != self.snapshots[id(buffer)].tobytes()
        )

    def outputs(self) -> list:
        return [name for name, b in self.buffers.items() if b is not None and is_output(self.function, name)]

    def output_bytes(self) -> dict:
        """Every output's elements as bytes, in logical order."""
        return {name: self._after(name).tobytes() for name in self.outputs()}

    def stray_writes(self) -> list:
        """Buffers written outside what an output descriptor addresses: inputs
        (unless an output shares them) and the gaps of strided outputs."""
        found = []
        written = {id(self.buffers[name]): name for name in self.outputs()}
        for name, buffer in self.buffers.items():
            if buffer is None or buffer.sparse:
                continue
            before, after = self.snapshots[id(buffer)], buffer.root
            if id(buffer) in written:
                keep = ~buffer.addressed_bytes(self.states[written[id(buffer)]])
                if not np.array_equal(before[keep], after[keep]):
                    found.append(name)
            elif before.tobytes() != after.tobytes():
                found.append(name)
        return sorted(set(found))

    def close(self) -> None:
        for desc in self.created_descs:
            assert self.lib.miopenDestroyTensorDescriptor(desc) == 0
        self.created_descs = []
        if self.handle is not None:
            assert self.lib.miopenDestroy(self.handle) == 0
            self.handle = None
        for buffer in self.unique_buffers():
            buffer.release()
        self.buffers = {}

    # -- batch norm against the reference ----------------------------------------
    def _before(self, name: str):
        buffer = self.buffers.get(name)
        if buffer is None:
            return None
        if buffer.sparse:
            return self.snapshots[id(buffer)]
        return strided_view(self.snapshots[id(buffer)], self.states[name])

    def _after(self, name: str):
        buffer = self.buffers.get(name)
        return None if buffer is None else buffer.view(self.states[name])

    def _scalar(self, name: str) -> float:
        return float(self.values[name][0])

    def well_conditioned(self) -> bool:
        """Ordinary scalars, and every statistic over values that really vary
        (a mutated view of x may make a feature nearly constant, where
        rounding noise divided by its tiny std would dominate)."""
        if not self.numerics or self.function not in BATCH_NORM:
            return False
        x = self._before("x").astype(np.float64)
        _, var = reference.batch_statistics(x, self.base.mode)
        return bool(np.all(var >= 1e-2))

    def check_batch_norm(self) -> None:
        """Outputs of a succeeding batch-norm call against the float64 reference."""
        b, a = self._before, self._after
        mode = "spatial" if self.values["bn_mode"] == 1 else "per_activation"
        epsilon = self.values["epsilon"]
        x, scale = b("x"), b("bnScale")

        def compare(name, expected, kind):
            check(a(name), expected, a(name).dtype, kind, name)

        if self.function in TRAINING:
            ref = reference.batchnorm_forward_training(
                x, scale, b("bnBias"), mode=mode, epsilon=epsilon, exp_avg_factor=self.values["expAvgFactor"],
                running_mean=b("resultRunningMean"), running_var=b("resultRunningVariance"),
                alpha=self._scalar("alpha"), beta=self._scalar("beta"), y_prior=b("y"),
            )
            compare("y", ref["y"], ELEMENTWISE)
            for name, key in (("resultSaveMean", "saved_mean"), ("resultSaveInvVariance", "saved_inv_var"),
                              ("resultRunningMean", "running_mean"), ("resultRunningVariance", "running_var")):
                if self.buffers.get(name) is not None:
                    compare(name, ref[key], REDUCTION)
        elif self.function in INFERENCE:
            ref = reference.batchnorm_forward_inference(
                x, scale, b("bnBias"), b("estimatedMean"), b("estimatedVariance"), mode=mode, epsilon=epsilon,
                alpha=self._scalar("alpha"), beta=self._scalar("beta"), y_prior=b("y"),
            )
            compare("y", ref, ELEMENTWISE)
        else:
            ref = reference.batchnorm_backward(
                x, b("dy"), scale, saved_mean=b("savedMean"), saved_inv_var=b("savedInvVariance"), mode=mode,
                epsilon=epsilon, alpha_data=self._scalar("alphaDataDiff"), beta_data=self._scalar("betaDataDiff"),
                alpha_param=self._scalar("alphaParamDiff"), beta_param=self._scalar("betaParamDiff"),
                dx_prior=b("dx"), dscale_prior=b("resultBnScaleDiff"), dbias_prior=b("resultBnBiasDiff"),
            )
            compare("dx", ref["dx"], ELEMENTWISE)
            compare("resultBnScaleDiff", ref["dscale"], REDUCTION)
            compare("resultBnBiasDiff", ref["dbias"], REDUCTION)
