"""Valid calls of the tensor entry points (batch norm, group norm), as the
fuzzer's starting points and the concurrency workload's calls: built from
explicit choices (``batch_norm_base``, ``group_norm_base``) or drawn
(``batch_norm_bases``, ``group_norm_bases``).  A Base says what each
descriptor holds, the scalar arguments, which buffers are NULL and which
output shares an input's memory."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

import numpy as np
from support.entry_points import (
    ACTIVATION_DESC,
    FUZZED_BACKWARD,
    FUZZED_BATCH_NORM,
    GROUP_NORM,
    PARAMETERS,
    buffer_parameters,
    descriptor_of,
    is_tensor_descriptor,
)
from support.fuzz_memory import DescriptorState
from hypothesis import strategies as st
from support.strategies import (
    PACKED,
    alpha_betas,
    bn_shapes,
    dims,
    empty,
    epsilons,
    exp_avg_factors,
    grad_dtypes,
    io_dtypes,
    layouts,
    modes,
    param_dtypes,
)

from miopen_bn import dtypes, reference

SCALING_PAIRS = {
    "beta": ("alpha", ("y",)),
    "betaDataDiff": ("alphaDataDiff", ("dx",)),
    "betaParamDiff": ("alphaParamDiff", ("resultBnScaleDiff", "resultBnBiasDiff")),
}
SCALINGS = ("alpha", "beta", "alphaDataDiff", "betaDataDiff", "alphaParamDiff", "betaParamDiff")
# Optional pairs (both or neither); exactly one is a mutation.
PAIRS = (
    ("resultRunningMean", "resultRunningVariance"),
    ("resultSaveMean", "resultSaveInvVariance"),
    ("estimatedMean", "estimatedVariance"),
    ("savedMean", "savedInvVariance"),
    ("prevResultRunningMean", "prevResultRunningVariance"),
    ("nextResultRunningMean", "nextResultRunningVariance"),
    ("estimatedMean", "estimatedInvVariance"),
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


SHARED_PARAM_DESCS = ("bnScaleBiasMeanVarDesc", "bnScaleBiasDiffDesc")


@st.composite
def fused_activations(draw) -> tuple:
    """(mode, alpha, beta, gamma) of an activation descriptor, with
    parameters that keep derivatives bounded (power: gamma >= 1)."""
    mode = draw(st.integers(0, 10), label="activation mode")
    alpha = draw(st.sampled_from((0.1, 0.5, 1.0, 1.5)), label="activation alpha")
    beta = draw(st.sampled_from((0.5, 1.0, 2.0)), label="activation beta")
    gamma = draw(st.sampled_from((1.0, 2.0, 3.0)), label="activation gamma")
    return (mode, alpha, beta, gamma)


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
    for name in (n for n in names if is_tensor_descriptor(n)):
        if name == "xDesc":
            states[name] = state_for(shape, x_dtype, layout_of(name, PACKED))
        elif name in ("dyDesc", "dxDesc"):
            states[name] = state_for(shape, g_dtype, layout_of(name, PACKED))
        elif name == "yDesc":
            states[name] = state_for(shape, x_dtype, layout_of(name, PACKED))
        else:
            states[name] = state_for(pshape, p_dtype, layout_of(name, PACKED))
    output = "dx" if function in FUZZED_BACKWARD else "y"
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
    function = draw(st.sampled_from(FUZZED_BATCH_NORM), label="function")
    mode = draw(modes(), label="mode")
    shape = draw(bn_shapes(mode=mode, training=True), label="shape")
    x_dtype = draw(io_dtypes(), label="x dtype")
    p_dtype = draw(param_dtypes(x_dtype), label="param dtype")
    g_dtype = draw(grad_dtypes(x_dtype), label="grad dtype") if function in FUZZED_BACKWARD else x_dtype
    names = PARAMETERS[function]
    layouts_by_desc = {n: draw(layouts(len(shape)), label=n) for n in names if is_tensor_descriptor(n)}
    in_place = draw(st.sampled_from((None, "dy", "x") if function in FUZZED_BACKWARD else (None, "x")), label="in place")
    if in_place == "x" and g_dtype != x_dtype:
        in_place = None  # dx over x needs x's type
    absent = tuple(
        pair[0] for pair in PAIRS if pair[1] in names and draw(st.booleans(), label=f"no {pair[0]}/{pair[1]}")
    )
    if "prevResultRunningMean" in names:  # V3: the previous and next running statistics go together
        absent = tuple(p for p in absent if p not in ("prevResultRunningMean", "nextResultRunningMean"))
        if draw(st.booleans(), label="no running statistics"):
            absent += ("prevResultRunningMean", "nextResultRunningMean")
    scalars = {"epsilon": draw(epsilons(), label="epsilon")}
    if "expAvgFactor" in names:
        scalars["expAvgFactor"] = draw(exp_avg_factors(), label="factor")
    for beta, (alpha, _) in SCALING_PAIRS.items():
        if beta in names:
            scalars[alpha], scalars[beta] = draw(alpha_betas(), label=f"{alpha}/{beta}")
    if ACTIVATION_DESC in names:
        scalars[ACTIVATION_DESC] = draw(fused_activations(), label="activation")
        if "beta" in names and draw(st.booleans(), label="beta 0 beside the activation"):
            scalars["beta"] = 0.0  # else NotImplemented
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
    for name in (n for n in PARAMETERS[function] if is_tensor_descriptor(n)):
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
