"""What the fuzzer does to a valid call (fuzz_bases.py): up to three
mutations, each (kind, target, payload), applied by fuzz_cases.Case: a
descriptor re-set through a random setter with malformed values, given huge
strides, another type or other lengths, or replaced by NULL, a never-set, a
destroyed or a foreign one; a buffer made NULL or aliased; a scalar made
NaN, infinite, extreme or out of its enum; alpha/beta pointers NULL; the
handle NULL, destroyed or foreign."""

from __future__ import annotations

from support.entry_points import ACTIVATION_DESC, PARAMETERS, buffer_parameters, descriptor_parameters
from support.fuzz_bases import PAIRS, SCALINGS, Base
from hypothesis import strategies as st
from support.strategies import (
    c_counts,
    c_dtype_codes,
    c_enum_codes,
    c_epsilons,
    c_factors,
    c_lengths,
    c_scalings,
    c_strides,
    huge_strides,
)

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
    pairs = [pair for pair in PAIRS if pair[0] in names and pair[1] in names]
    kinds = ["setter", "restride", "retype", "relength", "descriptor", "null_buffer", "scalar", "handle"]
    kinds += ["scaling", "null_scaling"] if scalings else []
    kinds += ["pair"] if pairs else []
    kinds += ["activation"] if ACTIVATION_DESC in names else []
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
        elif kind == "activation":  # the activation descriptor: NULL, destroyed, foreign, or a bad mode
            result.append((kind, ACTIVATION_DESC, draw(st.sampled_from(("null", "dead", "foreign", "bad_mode")))))
        else:  # alias an output onto an input with possibly other addressing
            output, source = ("y", "x") if "y" in buffers else draw(st.sampled_from((("dx", "dy"), ("dx", "x"))))
            result.append((kind, output, source))
    return result
