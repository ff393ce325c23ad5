"""A fuzzer over the whole C ABI: hypothesis drives every entry point through cffi.

Tensor entry points (batch norm, group norm) get a valid problem
(fuzz_bases.py) with up to three mutations (fuzz_mutations.py): malformed descriptors (wrong ranks,
zero/negative/huge lengths and strides, overlapping strides, mismatched C,
type codes out of range, never set, destroyed, NULL, foreign), NULL buffers,
exactly one of a pair, in-place aliases, NULL or non-finite alpha/beta,
bad epsilon, factor, mode, group count or activation, and a NULL, destroyed
or foreign handle.  For every case:
  1. the status is a miopenStatus_t value (and nothing crashes: .ci/sanitize
     runs this file against an ASan/UBSan build of the library);
  2. a failing call writes nothing: every buffer equals its snapshot, bit for
     bit (outputs were NaN-poisoned), and a message says why;
  3. a succeeding call writes nothing but its outputs' elements (inputs and
     the gaps of strided outputs are untouched) and, for batch norm with
     ordinary scalars, matches the float64 reference within tolerances.py.
     Group norm is held to 1-3; its values are the group-norm tests' subject
     (until the CPU backend has it, NotImplemented is its usual status).
Descriptor and handle functions run as random programs checked against a
model (DescriptorPrograms); the remaining entry points take any argument.

Budget: MIOPEN_BN_FUZZ_EXAMPLES cases per test (default 500: about 20 s in
all on 2 cores).  A long run:
    MIOPEN_BN_FUZZ_EXAMPLES=20000 python -m pytest -q tests/fuzz/test_fuzz_abi.py
The number of calls made, by entry point and status, is printed at the end of
the session and written to $MIOPEN_BN_FUZZ_REPORT when that names a file.
"""

from __future__ import annotations

import os

from support import fuzz_record
import pytest
from support.entry_points import PARAMETERS, invoke, last_error
from support.fuzz_bases import batch_norm_bases, group_norm_bases
from support.fuzz_cases import Case
from support.fuzz_memory import read_state
from support.fuzz_mutations import SETTER_NAMES, call_setter, mutations, setter_calls
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.stateful import Bundle, RuleBasedStateMachine, consumes, rule
from support.strategies import INT_MAX, c_enum_codes, seeds

import miopen_bn

STATUSES = range(11)  # miopenStatus_t
SUCCESS, BAD_PARM = 0, 3
EXAMPLES = int(os.environ.get("MIOPEN_BN_FUZZ_EXAMPLES", "500"))
fuzz_settings = settings(max_examples=EXAMPLES)


def run_case(lib, ffi, base, mutation_list, seed) -> None:
    case = Case(lib, ffi, base, mutation_list, seed)
    try:
        status = case.call()
        message = last_error(lib, ffi)
        fuzz_record.record(base.function, status)
        assert status in STATUSES, f"{base.function} returned {status}, not a miopenStatus_t"
        if status != SUCCESS:
            assert message, f"{base.function} failed with {status} and no message"
            assert case.changed_buffers() == [], f"the failing call ({message}) wrote these"
            return
        assert message == "", "a succeeding call left a message"
        assert case.stray_writes() == [], "written outside the outputs' elements"
        if case.well_conditioned():
            case.check_batch_norm()
            fuzz_record.record_verified(base.function)
    finally:
        case.close()


@fuzz_settings
@given(data=st.data(), seed=seeds())
def test_batch_norm_entry_points(lib, ffi, data, seed):
    base = data.draw(batch_norm_bases(), label="base")
    run_case(lib, ffi, base, data.draw(mutations(base), label="mutations"), seed)


@fuzz_settings
@given(data=st.data(), seed=seeds())
def test_group_norm_entry_points(lib, ffi, data, seed):
    base = data.draw(group_norm_bases(), label="base")
    run_case(lib, ffi, base, data.draw(mutations(base), label="mutations"), seed)


# --------------------------------------------------------------------------- #
# Descriptors and handles: random programs against a model
# --------------------------------------------------------------------------- #
def packed(lens) -> tuple:
    strides, step = [], 1
    for n in reversed(lens):
        strides.insert(0, step)
        step *= n
    return tuple(strides)


def channels_last(lens) -> tuple:
    strides = [0] * len(lens)
    step = strides[1] = 1
    step *= lens[1]
    for i in range(len(lens) - 1, 1, -1):
        strides[i] = step
        step *= lens[i]
    strides[0] = step
    return tuple(strides)


def expected_after_setter(call: tuple):
    """(dtype, lens, strides) a successful setter call leaves."""
    setter, dtype, args = call
    if setter == "4d":
        return dtype, args, packed(args)
    if setter == "4dEx":
        return dtype, args[:4], args[4:]
    if setter == "nd":
        count, lens, strides = args
        return dtype, lens[:count], strides[:count] if strides else packed(lens[:count])
    layout, lens, count = args
    lens = lens[:count]
    return dtype, lens, channels_last(lens) if layout in (1, 8) else packed(lens)


class DescriptorPrograms(RuleBasedStateMachine):
    """Create, set (through every setter, with malformed values), read,
    derive, destroy; make, configure and destroy handles.  The model says
    what each live descriptor holds: a failing setter changes nothing, a
    succeeding one stores exactly its arguments, and every object destroyed
    is refused from then on, a second destroy included."""

    descriptors = Bundle("descriptors")
    dead_descriptors = Bundle("dead_descriptors")
    handles = Bundle("handles")
    dead_handles = Bundle("dead_handles")

    def __init__(self):
        super().__init__()
        import miopen_bn

        self.lib, self.ffi = miopen_bn.lib, miopen_bn.ffi
        self.model = {}  # descriptor -> (dtype, lens, strides) or None (unset)
        self.live_handles = set()

    def call(self, function: str, *args) -> int:
        status = getattr(self.lib, function)(*args)
        fuzz_record.record(function, status)
        assert status in STATUSES
        return status

    def verify(self, desc) -> None:
        expected = self.model[desc]
        rank = self.ffi.new("int*")
        assert self.call("miopenGetTensorDescriptorSize", desc, rank) == SUCCESS
        if expected is None:
            assert rank[0] == 0
            assert self.call("miopenGetTensorNumBytes", desc, self.ffi.new("size_t*")) == BAD_PARM
            return
        dtype, lens, strides = expected
        assert rank[0] == len(lens)
        size = self.ffi.new("size_t*")
        assert self.call("miopenGetTensorNumBytes", desc, size) == SUCCESS
        state = read_state(self.lib, self.ffi, desc)
        if max(strides) > INT_MAX:  # the int getters refuse it; the byte size still tells
            assert state is None
            return
        assert state is not None and (state.dtype_code, state.lens, state.strides) == (dtype, tuple(lens), strides)
        assert size[0] == state.span_bytes

    @rule(target=descriptors)
    def create(self):
        created = self.ffi.new("miopenTensorDescriptor_t*")
        assert self.call("miopenCreateTensorDescriptor", created) == SUCCESS
        self.model[created[0]] = None
        return created[0]

    @rule(desc=descriptors, call=setter_calls())
    def set(self, desc, call):
        status = call_setter(self.lib, self.ffi, desc, call)
        fuzz_record.record(SETTER_NAMES[call[0]], status)
        assert status in STATUSES
        if status == SUCCESS:
            self.model[desc] = expected_after_setter(call)
        else:
            assert last_error(self.lib, self.ffi)
        self.verify(desc)

    @rule(derived=descriptors, x=descriptors, mode=c_enum_codes(2))
    def derive(self, derived, x, mode):
        status = self.call("miopenDeriveBNTensorDescriptor", derived, x, mode)
        if status == SUCCESS:
            _, lens, _ = self.model[x]
            kept = lens[1:2] + ((1,) * (len(lens) - 2) if mode == 1 else lens[2:])
            self.model[derived] = (1, (1,) + kept, packed((1,) + kept))
        self.verify(derived)
        if x != derived:
            self.verify(x)

    @rule(target=dead_descriptors, desc=consumes(descriptors))
    def destroy(self, desc):
        assert self.call("miopenDestroyTensorDescriptor", desc) == SUCCESS
        del self.model[desc]
        return desc

    @rule(desc=dead_descriptors, call=setter_calls())
    def dead_descriptors_are_refused(self, desc, call):
        if desc in self.model:  # a later create reused the address: live again
            return
        ffi = self.ffi
        assert self.call("miopenSet4dTensorDescriptor", desc, call[1], 2, 3, 4, 5) == BAD_PARM
        assert self.call("miopenGetTensorDescriptorSize", desc, ffi.new("int*")) == BAD_PARM
        assert self.call("miopenGetTensorNumBytes", desc, ffi.new("size_t*")) == BAD_PARM
        assert self.call("miopenGetTensorDescriptor", desc, ffi.NULL, ffi.NULL, ffi.NULL) == BAD_PARM
        assert self.call("miopenDestroyTensorDescriptor", desc) == BAD_PARM

    @rule(target=handles, backend=c_enum_codes(3))
    def create_handle(self, backend):
        created = self.ffi.new("miopenHandle_t*")
        if self.call("miopenBNCreateWithBackend", created, backend) != SUCCESS:
            return None  # unknown backend, or a GPU asked for and none there
        self.live_handles.add(created[0])
        return created[0]

    @rule(handle=handles, stream=st.sampled_from((0, 1, 0x1234, 2**63)), profile=st.booleans())
    def use_handle(self, handle, stream, profile):
        ffi = self.ffi
        if handle is None or handle not in self.live_handles:
            return
        backend = ffi.new("miopenBNBackend_t*")
        assert self.call("miopenBNGetBackend", handle, backend) == SUCCESS and backend[0] in (1, 2)
        if backend[0] == 1:  # a CPU handle keeps any value; a GPU one needs a real stream
            assert self.call("miopenSetStream", handle, ffi.cast("miopenAcceleratorQueue_t", stream)) == SUCCESS
            got = ffi.new("miopenAcceleratorQueue_t*")
            assert self.call("miopenGetStream", handle, got) == SUCCESS
            assert int(ffi.cast("uintptr_t", got[0])) == stream
        assert self.call("miopenEnableProfiling", handle, profile) == SUCCESS
        assert self.call("miopenGetKernelTime", handle, ffi.new("float*")) == SUCCESS

    @rule(target=dead_handles, handle=consumes(handles))
    def destroy_handle(self, handle):
        if handle is None:
            return None
        assert self.call("miopenDestroy", handle) == SUCCESS
        self.live_handles.discard(handle)
        return handle

    @rule(handle=dead_handles)
    def dead_handles_are_refused(self, handle):
        if handle is None or handle in self.live_handles:  # None; or the address went to a new handle
            return
        ffi = self.ffi
        assert self.call("miopenSetStream", handle, ffi.NULL) == BAD_PARM
        assert self.call("miopenGetKernelTime", handle, ffi.new("float*")) == BAD_PARM
        assert self.call("miopenDestroy", handle) == BAD_PARM

    def teardown(self):
        for desc in self.model:
            assert self.lib.miopenDestroyTensorDescriptor(desc) == SUCCESS
        for handle in self.live_handles:
            assert self.lib.miopenDestroy(handle) == SUCCESS


DescriptorPrograms.TestCase.settings = settings(max_examples=max(1, EXAMPLES // 3), stateful_step_count=30)
test_descriptor_programs = DescriptorPrograms.TestCase


# --------------------------------------------------------------------------- #
# The rest: entry points with no object to get wrong
# --------------------------------------------------------------------------- #
@fuzz_settings
@given(status=st.integers(0, 12) | st.integers(0, 2**32 - 1), nulls=st.tuples(*[st.booleans()] * 3))
def test_small_entry_points(lib, ffi, status, nulls):
    name = ffi.string(lib.miopenGetErrorString(status)).decode()
    assert name.startswith("miopenStatus") if status in STATUSES else name == "Unknown error status"
    for function in ("miopenGetVersion", "miopenBNGetLibraryVersion"):
        parts = [ffi.NULL if null else ffi.new("size_t*", 99) for null in nulls]
        assert invoke(lib, function, dict(zip(PARAMETERS[function], parts))) == SUCCESS
        assert all(part == ffi.NULL or part[0] != 99 for part in parts)
        fuzz_record.record(function, SUCCESS)
    assert lib.miopenBNHasGpuSupport() in (0, 1)
    # Creating into a NULL handle pointer, reading a backend into NULL.
    for function, values in (
        ("miopenCreate", {"handle": ffi.NULL}),
        ("miopenCreateWithStream", {"handle": ffi.NULL, "stream": ffi.NULL}),
        ("miopenBNCreateWithBackend", {"handle": ffi.NULL, "backend": status % 4}),
        ("miopenBNGetBackend", {"handle": ffi.NULL, "backend": ffi.NULL}),
    ):
        got = invoke(lib, function, values)
        fuzz_record.record(function, got)
        assert got == BAD_PARM



# --------------------------------------------------------------------------- #
# Issue 25's objects: tuning policy, size_t descriptors, activation
# descriptors, fusion plans (their tensor math is the batch-norm cases')
# --------------------------------------------------------------------------- #
ANY_DOUBLE = st.floats(allow_nan=True, allow_infinity=True)
FUSION_OPS = ("bn_inference", "bn_forward", "bn_backward", "activation_forward", "activation_backward", "bias")
# Plans that compile: a batch-norm op, optionally followed by the activation of its direction.
COMPILING_PLANS = {
    ("bn_inference",), ("bn_forward",), ("bn_backward",), ("bn_inference", "activation_forward"),
    ("bn_forward", "activation_forward"), ("bn_backward", "activation_backward"),
}  # fmt: skip


@pytest.fixture(scope="module")
def module_handle():
    with miopen_bn.Handle("cpu") as handle:
        yield handle


@fuzz_settings
@given(
    policy=st.integers(0, 2**32 - 1),
    mode=st.integers(0, 2**32 - 1),
    params=st.tuples(ANY_DOUBLE, ANY_DOUBLE, ANY_DOUBLE),
    lens=st.lists(st.integers(0, 2**64 - 1) | st.integers(1, 8), min_size=0, max_size=6),
    ops=st.lists(st.sampled_from(FUSION_OPS), max_size=3),
    horizontal=st.booleans(),
)
def test_issue25_objects(lib, ffi, module_handle, policy, mode, params, lens, ops, horizontal):
    value = ffi.new("miopenTuningPolicy_t*")
    status = lib.miopenSetTuningPolicy(module_handle.ptr, policy)
    assert status == (SUCCESS if 1 <= policy <= 5 else BAD_PARM)
    assert lib.miopenGetTuningPolicy(module_handle.ptr, value) == SUCCESS
    assert value[0] == policy if status == SUCCESS else 1 <= value[0] <= 5
    fuzz_record.record("miopenSetTuningPolicy", status)

    with_desc = ffi.new("miopenTensorDescriptor_t*")
    assert lib.miopenCreateTensorDescriptor(with_desc) == SUCCESS
    desc = with_desc[0]
    c_lens = ffi.new("size_t[]", lens or [1])
    status = lib.miopenSetTensorDescriptorV2(desc, lib.miopenFloat, len(lens), c_lens, ffi.NULL)
    fuzz_record.record("miopenSetTensorDescriptorV2", status)
    valid = 1 <= len(lens) <= 5 and all(n >= 1 for n in lens)
    if status == SUCCESS:  # read back through the int getter, which refuses lengths beyond INT_MAX
        dims = ffi.new("int[]", len(lens))
        got = lib.miopenGetTensorDescriptor(desc, ffi.NULL, dims, ffi.NULL)
        assert valid and got == (SUCCESS if max(lens) <= INT_MAX else BAD_PARM)
        assert got != SUCCESS or list(dims) == lens
    else:
        assert status in (2, BAD_PARM) and last_error(lib, ffi)

    created = ffi.new("miopenActivationDescriptor_t*")
    assert lib.miopenCreateActivationDescriptor(created) == SUCCESS
    status = lib.miopenSetActivationDescriptor(created[0], mode, *params)
    fuzz_record.record("miopenSetActivationDescriptor", status)
    finite = all(p == p and abs(p) != float("inf") for p in params)
    assert status == (SUCCESS if mode <= 10 and finite else BAD_PARM)
    got = ffi.new("miopenActivationMode_t*")
    assert lib.miopenGetActivationDescriptor(created[0], got, ffi.NULL, ffi.NULL, ffi.NULL) == SUCCESS
    assert got[0] == (mode if status == SUCCESS else 0)
    assert lib.miopenDestroyActivationDescriptor(created[0]) == SUCCESS

    plan = ffi.new("miopenFusionPlanDescriptor_t*")
    status = lib.miopenCreateFusionPlan(plan, 1 if horizontal else 0, desc)
    fuzz_record.record("miopenCreateFusionPlan", status)
    if status != SUCCESS:  # the descriptor was left unset
        assert status == BAD_PARM and lib.miopenDestroyTensorDescriptor(desc) == SUCCESS
        return
    op = ffi.new("miopenFusionOpDescriptor_t*")
    for kind in ops:
        if kind == "bn_inference":
            status = lib.miopenCreateOpBatchNormInference(plan[0], op, lib.miopenBNSpatial, desc)
        elif kind == "bn_forward":
            status = lib.miopenCreateOpBatchNormForward(plan[0], op, lib.miopenBNSpatial, True)
        elif kind == "bn_backward":
            status = lib.miopenCreateOpBatchNormBackward(plan[0], op, lib.miopenBNSpatial)
        elif kind == "activation_forward":
            status = lib.miopenCreateOpActivationForward(plan[0], op, mode % 12)
        elif kind == "activation_backward":
            status = lib.miopenCreateOpActivationBackward(plan[0], op, mode % 12)
        else:
            status = lib.miopenCreateOpBiasForward(plan[0], op, desc)
        assert status == (BAD_PARM if kind.startswith("activation") and mode % 12 > 10 else SUCCESS)
    added = tuple(k for k in ops if not (k.startswith("activation") and mode % 12 > 10))
    status = lib.miopenCompileFusionPlan(module_handle.ptr, plan[0])
    fuzz_record.record("miopenCompileFusionPlan", status)
    assert status == (SUCCESS if added in COMPILING_PLANS and not horizontal else 8)
    assert lib.miopenDestroyFusionPlan(plan[0]) == SUCCESS
    assert lib.miopenDestroyTensorDescriptor(desc) == SUCCESS
