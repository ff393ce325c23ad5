"""The pointer rules (docs/conventions.md#pointers), row by row, through the raw
C entry points (V1 and V2).

Arguments are named as in the header: the calls are assembled from the
parameter names the cdef generator reads from it, so this file restates no
prototype.  Every failing call must return BadParm, leave a thread-local
message naming the problem, and leave every buffer bit-for-bit as it was
(outputs are NaN-poisoned beforehand, so any write shows)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from support.entry_points import (
    BACKWARD,
    BATCH_NORM,
    INFERENCE,
    PARAMETERS,
    TRAINING,
    descriptor_parameters,
    invoke,
    last_error,
)
from support.strategies import modes, pair_patterns, seeds

import miopen_bn
from miopen_bn import reference
from miopen_bn.tolerances import check

BAD_PARM = 3
ALL = BATCH_NORM

# Buffers by parameter name: data tensors have x's shape, the rest C values.
DATA_BUFFERS = ("x", "y", "dy", "dx")
POISONED = ("y", "dx", "resultSaveMean", "resultSaveInvVariance", "resultBnScaleDiff", "resultBnBiasDiff")
SCALINGS = ("alpha", "beta", "alphaDataDiff", "betaDataDiff", "alphaParamDiff", "betaParamDiff")
SHAPE = (4, 3, 2, 5)


class Problem:
    """Buffers for every batch-norm parameter name, and the call assembler."""

    def __init__(self, lib, ffi, handle, mode="spatial", seed=7):
        self.lib, self.ffi, self.handle, self.mode = lib, ffi, handle, mode
        rng = np.random.default_rng(seed)
        pshape = reference.param_shape(SHAPE, mode)
        self.arrays = {
            "x": rng.normal(1.0, 2.0, SHAPE).astype(np.float32),
            "dy": rng.standard_normal(SHAPE).astype(np.float32),
            "bnScale": rng.uniform(0.5, 2, pshape).astype(np.float32),
            "bnBias": rng.uniform(-1, 1, pshape).astype(np.float32),
            "resultRunningMean": rng.uniform(-1, 1, pshape).astype(np.float32),
            "resultRunningVariance": rng.uniform(0.5, 2, pshape).astype(np.float32),
            "estimatedMean": rng.uniform(-1, 1, pshape).astype(np.float32),
            "estimatedVariance": rng.uniform(0.5, 2, pshape).astype(np.float32),
            "savedMean": rng.uniform(-1, 1, pshape).astype(np.float32),
            "savedInvVariance": rng.uniform(0.5, 2, pshape).astype(np.float32),
        }
        for name in POISONED:
            shape = SHAPE if name in DATA_BUFFERS else pshape
            self.arrays[name] = np.full(shape, np.nan, np.float32)
        self.descs = [self._descriptor(SHAPE), self._descriptor(pshape)]
        data_desc, param_desc = self.descs
        self.values = {name: ffi.cast("void*", array.ctypes.data) for name, array in self.arrays.items()}
        self.values.update(
            {
                "handle": handle.ptr,
                "bn_mode": lib.miopenBNSpatial if mode == "spatial" else lib.miopenBNPerActivation,
                "epsilon": 1e-5,
                "expAvgFactor": 0.1,
                "xDesc": data_desc,
                "yDesc": data_desc,
                "dyDesc": data_desc,
                "dxDesc": data_desc,
            }
        )
        for name in (
            "bnScaleBiasMeanVarDesc",
            "bnScaleBiasDiffDesc",
            "scaleDesc",
            "biasVarDesc",
            "biasDesc",
            "savedMeanDesc",
            "savedVarDesc",
            "estMeanDesc",
            "estVarianceDesc",
        ):
            self.values[name] = param_desc
        self._scalings = {
            name: ffi.new("float*", 1.0 if name.startswith("alpha") else 0.0) for name in SCALINGS
        }
        self.values.update(self._scalings)

    def _descriptor(self, shape, strides=None):
        created = self.ffi.new("miopenTensorDescriptor_t*")
        assert self.lib.miopenCreateTensorDescriptor(created) == 0
        dims = self.ffi.new("int[]", list(shape))
        c_strides = self.ffi.NULL if strides is None else self.ffi.new("int[]", list(strides))
        assert (
            self.lib.miopenSetTensorDescriptor(created[0], self.lib.miopenFloat, len(shape), dims, c_strides)
            == 0
        )
        return created[0]

    def close(self):
        for desc in self.descs:
            self.lib.miopenDestroyTensorDescriptor(desc)

    def snapshot(self):
        return {name: array.copy() for name, array in self.arrays.items()}

    def call(self, function, **overrides):
        return invoke(self.lib, function, dict(self.values, **overrides))

    def message(self) -> str:
        return last_error(self.lib, self.ffi)

    def expect_bad_parm(self, function, *keywords, **overrides):
        before = self.snapshot()
        status = self.call(function, **overrides)
        message = self.message()
        assert status == BAD_PARM, f"{function} with {sorted(overrides)} returned {status}"
        assert message, "no thread-local message after a failing call"
        for keyword in keywords:
            assert keyword.lower() in message.lower(), f"{keyword!r} not in {message!r}"
        for name, array in self.arrays.items():
            np.testing.assert_array_equal(array, before[name], err_msg=f"{function} wrote {name}")
        return message


@pytest.fixture
def problem(lib, ffi, cpu_handle):
    p = Problem(lib, ffi, cpu_handle)
    yield p
    p.close()


def null(ffi, *names):
    return {name: ffi.NULL for name in names}


# --- any call: handle, every descriptor, alpha/beta --------------------------


@pytest.mark.parametrize("function", ALL)
def test_null_handle(problem, ffi, function):
    problem.expect_bad_parm(function, "handle", "NULL", handle=ffi.NULL)


@pytest.mark.parametrize("function, desc", [(f, d) for f in ALL for d in descriptor_parameters(f)])
def test_null_descriptor(problem, ffi, function, desc):
    # With every optional buffer present, no descriptor may be NULL.
    problem.expect_bad_parm(function, "NULL", "desc", **{desc: ffi.NULL})


@pytest.mark.parametrize("function, desc", [(f, d) for f in ALL for d in descriptor_parameters(f)])
def test_destroyed_descriptor(problem, lib, function, desc):
    dead = problem._descriptor(SHAPE)
    assert lib.miopenDestroyTensorDescriptor(dead) == 0
    problem.expect_bad_parm(function, "not a live tensor descriptor", **{desc: dead})


@pytest.mark.parametrize("function", ALL)
def test_destroyed_handle(problem, ffi, lib, function):
    created = ffi.new("miopenHandle_t*")
    assert lib.miopenBNCreateWithBackend(created, lib.miopenBNBackendCPU) == 0
    assert lib.miopenDestroy(created[0]) == 0
    problem.expect_bad_parm(function, "not a live handle", handle=created[0])


@pytest.mark.parametrize("function, scaling", [(f, s) for f in ALL for s in SCALINGS if s in PARAMETERS[f]])
def test_null_alpha_beta(problem, ffi, function, scaling):
    problem.expect_bad_parm(function, scaling, "NULL", **{scaling: ffi.NULL})


# --- required buffers ---------------------------------------------------------

REQUIRED = [(f, b) for f in TRAINING for b in ("x", "y", "bnScale", "bnBias")]
REQUIRED += [(f, b) for f in INFERENCE for b in ("x", "y", "bnScale", "bnBias")]
REQUIRED += [
    (f, b) for f in BACKWARD for b in ("x", "dy", "dx", "bnScale", "resultBnScaleDiff", "resultBnBiasDiff")
]


@pytest.mark.parametrize("function, buffer", REQUIRED)
def test_null_required_buffer(problem, ffi, function, buffer):
    problem.expect_bad_parm(function, buffer, "NULL", **{buffer: ffi.NULL})


# --- optional pairs: both used, neither fine, exactly one refused -------------

PAIRS = [(f, ("resultRunningMean", "resultRunningVariance")) for f in TRAINING]
PAIRS += [(f, ("resultSaveMean", "resultSaveInvVariance")) for f in TRAINING]
PAIRS += [(f, ("estimatedMean", "estimatedVariance")) for f in INFERENCE]
PAIRS += [(f, ("savedMean", "savedInvVariance")) for f in BACKWARD]


@pytest.mark.parametrize("function, pair", PAIRS)
@pytest.mark.parametrize("given", [0, 1])
def test_exactly_one_of_a_pair_is_refused(problem, ffi, function, pair, given):
    missing = pair[1 - given]
    problem.expect_bad_parm(function, "exactly one", *pair, **{missing: ffi.NULL})


def training_reference(problem, with_running=True):
    a = problem.arrays
    return reference.batchnorm_forward_training(
        a["x"],
        a["bnScale"],
        a["bnBias"],
        epsilon=1e-5,
        exp_avg_factor=0.1,
        running_mean=a["resultRunningMean"] if with_running else None,
        running_var=a["resultRunningVariance"] if with_running else None,
        mode=problem.mode,
    )


@pytest.mark.parametrize("function", TRAINING)
def test_training_with_both_pairs(problem, function):
    expected = training_reference(problem)
    assert problem.call(function) == 0, problem.message()
    a = problem.arrays
    check(a["y"], expected["y"], "float32", "elementwise", "y")
    check(a["resultSaveMean"], expected["saved_mean"], "float32", "reduction", "saved mean")
    check(a["resultSaveInvVariance"], expected["saved_inv_std"], "float32", "reduction", "saved inv std")
    check(a["resultRunningMean"], expected["running_mean"], "float32", "reduction", "running mean")
    check(a["resultRunningVariance"], expected["running_var"], "float32", "reduction", "running var")


@pytest.mark.parametrize("function", TRAINING)
def test_training_with_neither_pair(problem, ffi, function):
    expected = training_reference(problem, with_running=False)
    nulls = null(ffi, "resultRunningMean", "resultRunningVariance", "resultSaveMean", "resultSaveInvVariance")
    if function.endswith("_V2"):  # their descriptors may then be NULL too
        nulls.update(null(ffi, "savedMeanDesc", "savedVarDesc"))
    before = problem.snapshot()
    assert problem.call(function, **nulls) == 0, problem.message()
    check(problem.arrays["y"], expected["y"], "float32", "elementwise", "y")
    for name in ("resultRunningMean", "resultRunningVariance", "resultSaveMean", "resultSaveInvVariance"):
        np.testing.assert_array_equal(problem.arrays[name], before[name])


@pytest.mark.parametrize("function", INFERENCE)
def test_inference_with_estimates(problem, function):
    a = problem.arrays
    expected = reference.batchnorm_forward_inference(
        a["x"], a["bnScale"], a["bnBias"], a["estimatedMean"], a["estimatedVariance"], epsilon=1e-5
    )
    assert problem.call(function) == 0, problem.message()
    check(a["y"], expected, "float32", "elementwise", "y")


@pytest.mark.parametrize("function", INFERENCE)
def test_inference_without_estimates_uses_batch_statistics(problem, ffi, function):
    a = problem.arrays
    expected = reference.batchnorm_forward_inference(a["x"], a["bnScale"], a["bnBias"], epsilon=1e-5)
    nulls = null(ffi, "estimatedMean", "estimatedVariance")
    if function.endswith("_V2"):
        nulls.update(null(ffi, "estMeanDesc", "estVarianceDesc"))
    before = problem.snapshot()
    assert problem.call(function, **nulls) == 0, problem.message()
    check(a["y"], expected, "float32", "elementwise", "y")
    for name, array in a.items():  # nothing but y is written
        if name != "y":
            np.testing.assert_array_equal(array, before[name], err_msg=name)


@pytest.mark.parametrize("function", BACKWARD)
@pytest.mark.parametrize("saved", [True, False])
def test_backward_saved_statistics_used_or_recomputed(problem, ffi, function, saved):
    a = problem.arrays
    # The given saved statistics differ from the batch's, so using them shows.
    expected = reference.batchnorm_backward(
        a["x"],
        a["dy"],
        a["bnScale"],
        epsilon=1e-5,
        saved_mean=a["savedMean"] if saved else None,
        saved_inv_std=a["savedInvVariance"] if saved else None,
    )
    nulls = {}
    if not saved:
        nulls = null(ffi, "savedMean", "savedInvVariance")
        if function.endswith("_V2"):
            nulls.update(null(ffi, "savedMeanDesc", "savedVarDesc"))
    assert problem.call(function, **nulls) == 0, problem.message()
    check(a["dx"], expected["dx"], "float32", "elementwise", "dx")
    check(a["resultBnScaleDiff"], expected["dscale"], "float32", "reduction", "dscale")
    check(a["resultBnBiasDiff"], expected["dbias"], "float32", "reduction", "dbias")


# --- in place -----------------------------------------------------------------


@pytest.mark.parametrize("function", TRAINING + INFERENCE)
def test_in_place_forward(problem, function):
    a = problem.arrays
    if function in TRAINING:
        expected = training_reference(problem)["y"]
    else:
        expected = reference.batchnorm_forward_inference(
            a["x"], a["bnScale"], a["bnBias"], a["estimatedMean"], a["estimatedVariance"], epsilon=1e-5
        )
    assert problem.call(function, y=problem.values["x"]) == 0, problem.message()
    check(a["x"], expected, "float32", "elementwise", "y written over x")


@pytest.mark.parametrize("function", BACKWARD)
def test_in_place_backward(problem, function):
    a = problem.arrays
    expected = reference.batchnorm_backward(
        a["x"], a["dy"], a["bnScale"], saved_mean=a["savedMean"], saved_inv_std=a["savedInvVariance"]
    )
    assert problem.call(function, dx=problem.values["dy"]) == 0, problem.message()
    check(a["dy"], expected["dx"], "float32", "elementwise", "dx written over dy")


# --- partial aliasing -----------------------------------------------------------

ELEMENT = 4  # bytes of a float32


def shifted(problem, name, elements):
    """The address of buffer `name` moved by `elements` float32 elements."""
    return problem.ffi.cast("void*", problem.arrays[name].ctypes.data + elements * ELEMENT)


PLANE = SHAPE[2] * SHAPE[3]
X_SIZE = int(np.prod(SHAPE))
# (functions, the output moved, the buffer it is moved onto, by how many elements).
PARTIAL_ALIASES = [
    (INFERENCE, "y", "x", 1),
    (TRAINING, "y", "x", PLANE),
    (TRAINING, "y", "x", -1),
    (BACKWARD, "dx", "dy", 1),
    (BACKWARD, "dx", "x", 1),
    (TRAINING, "resultSaveInvVariance", "resultSaveMean", 0),
    (TRAINING, "resultRunningVariance", "resultRunningMean", 1),
    (TRAINING, "resultRunningMean", "bnScale", 0),
    (INFERENCE, "y", "estimatedMean", 1 - X_SIZE),  # y's last element over the mean's first
    (TRAINING, "y", "resultRunningMean", 2 - X_SIZE),
    (BACKWARD, "resultBnBiasDiff", "resultBnScaleDiff", 0),
    (BACKWARD, "resultBnScaleDiff", "savedMean", 0),
    (BACKWARD, "dx", "bnScale", 0),
]


@pytest.mark.parametrize(
    "function, output, onto, by",
    [(f, output, onto, by) for functions, output, onto, by in PARTIAL_ALIASES for f in functions],
)
def test_an_output_overlapping_another_operand_is_refused(problem, function, output, onto, by):
    """Only y over x and dx over dy or x, at the same address with the same
    strides, may share memory; every other overlap is BadParm naming both
    (the call is refused before it reads or writes anything)."""
    message = problem.expect_bad_parm(function, output, "overlaps", **{output: shifted(problem, onto, by)})
    # Moved back over a small buffer, the output may cross others the
    # allocator put before it; the one the message names must really overlap.
    begin = problem.arrays[onto].ctypes.data + by * ELEMENT
    end = begin + problem.arrays[output].nbytes
    overlapped = [
        name for name, array in problem.arrays.items()
        if name != output and array.ctypes.data < end and begin < array.ctypes.data + array.nbytes
    ]
    named = [name for name in overlapped if f"{name} (bytes" in message]
    assert onto in overlapped and named and f"{output} (bytes" in message, message


@pytest.mark.parametrize("function", TRAINING + INFERENCE)
def test_outputs_next_to_their_inputs_are_accepted(problem, function):
    """Adjacent is not overlapping: y starting one past x's last byte."""
    memory = np.full(2 * X_SIZE, np.nan, np.float32)
    memory[:X_SIZE] = problem.arrays["x"].ravel()
    x, y = (problem.ffi.cast("void*", memory.ctypes.data + i * X_SIZE * ELEMENT) for i in (0, 1))
    assert problem.call(function, x=x, y=y) == 0, problem.message()
    assert not np.isnan(memory[X_SIZE:]).any()


# --- the other BadParm rules (docs/deviations.md) -----------------------------


@pytest.mark.parametrize("function", ALL)
def test_unknown_mode(problem, function):
    problem.expect_bad_parm(function, "bn_mode", bn_mode=2)


@pytest.mark.parametrize("function", ALL)
@pytest.mark.parametrize("epsilon", [-1e-5, float("nan")])
def test_bad_epsilon(problem, function, epsilon):
    problem.expect_bad_parm(function, "epsilon", epsilon=epsilon)


@pytest.mark.parametrize("function", TRAINING)
@pytest.mark.parametrize("factor", [float("inf"), float("nan")])
def test_non_finite_exp_avg_factor(problem, function, factor):
    problem.expect_bad_parm(function, "expAvgFactor", expAvgFactor=factor)


@pytest.mark.parametrize("function", TRAINING)
def test_training_needs_more_than_one_value(problem, ffi, lib, function):
    one = problem._descriptor((1, 3, 1, 1))  # N*H*W == 1
    problem.descs.append(one)
    problem.expect_bad_parm(function, "more than one", xDesc=one, yDesc=one)


# --- outputs need each element in its own memory --------------------------------

# (function, descriptor given overlapping strides, the output it makes refused).
# Per activation, so parameter tensors (1, C, H, W) have dimensions to overlap.
OVERLAPPING_OUTPUTS = [(f, "yDesc", "y") for f in TRAINING + INFERENCE]
OVERLAPPING_OUTPUTS += [(f, "dxDesc", "dx") for f in BACKWARD]
OVERLAPPING_OUTPUTS += [
    (TRAINING[0], "bnScaleBiasMeanVarDesc", "resultRunningMean"),
    (TRAINING[1], "savedMeanDesc", "resultRunningMean"),
    (TRAINING[1], "savedVarDesc", "resultRunningVariance"),
    (BACKWARD[0], "bnScaleBiasDiffDesc", "resultBnScaleDiff"),
    (BACKWARD[1], "scaleDesc", "resultBnScaleDiff"),
    (BACKWARD[1], "biasDesc", "resultBnBiasDiff"),
]


@pytest.mark.parametrize("function, desc, output", OVERLAPPING_OUTPUTS)
def test_output_with_overlapping_strides_is_refused(lib, ffi, cpu_handle, function, desc, output):
    problem = Problem(lib, ffi, cpu_handle, mode="per_activation")
    shape = SHAPE if desc in ("yDesc", "dxDesc") else reference.param_shape(SHAPE, "per_activation")
    overlapping = problem._descriptor(shape, strides=(1,) * len(shape))  # fits in the buffer, repeats elements
    problem.descs.append(overlapping)
    problem.expect_bad_parm(function, output, "share memory", **{desc: overlapping})
    problem.close()


def test_input_with_overlapping_strides_is_read_as_described(lib, ffi, cpu_handle):
    """Inputs may repeat elements (a broadcast-like view): only outputs are checked."""
    problem = Problem(lib, ffi, cpu_handle)
    strides = (1, 1, 1, 1)
    overlapping = problem._descriptor(SHAPE, strides=strides)
    problem.descs.append(overlapping)
    x = problem.arrays["x"]
    view = np.lib.stride_tricks.as_strided(x, SHAPE, [s * x.itemsize for s in strides])
    expected = reference.batchnorm_forward_inference(
        view, problem.arrays["bnScale"], problem.arrays["bnBias"], epsilon=1e-5
    )
    nulls = null(ffi, "estimatedMean", "estimatedVariance", "estMeanDesc", "estVarianceDesc")
    status = problem.call(INFERENCE[1], xDesc=overlapping, **nulls)
    assert status == 0, problem.message()
    check(problem.arrays["y"], expected, "float32", "elementwise", "y")
    problem.close()


# --- the pair rules as properties: every NULL pattern, both modes, V1 and V2 ---


def pattern_nulls(ffi, pattern, pair, descs=()):
    """NULL overrides for one drawn pattern of an optional pair.  With
    "neither", the pair's V2 descriptors (``descs``) are NULL too."""
    first, second = pair
    if pattern == "first_only":
        return {second: ffi.NULL}
    if pattern == "second_only":
        return {first: ffi.NULL}
    if pattern == "neither":
        return {name: ffi.NULL for name in (first, second) + tuple(descs)}
    return {}


def run_pattern_case(lib, ffi, function, mode, seed, patterns):
    """Calls ``function`` with the NULL patterns {pair: pattern}; returns the
    problem, the snapshot before, the status and the message."""
    handle = miopen_bn.Handle("cpu")
    problem = Problem(lib, ffi, handle, mode=mode, seed=seed)
    overrides = {}
    shares_descs = function.endswith("_V2") and len(patterns) == 1  # both V2 descs belong to the one pair
    for pair, pattern in patterns.items():
        descs = ("savedMeanDesc", "savedVarDesc", "estMeanDesc", "estVarianceDesc") if shares_descs else ()
        overrides.update(pattern_nulls(ffi, pattern, pair, [d for d in descs if d in PARAMETERS[function]]))
    before = problem.snapshot()
    status = problem.call(function, **overrides)
    message = problem.message()
    problem.close()
    handle.close()
    return problem, before, status, message


def assert_refused_untouched(problem, before, status, message, pairs):
    assert status == BAD_PARM and "exactly one" in message
    assert any(first in message and second in message for first, second in pairs), message
    for name, array in problem.arrays.items():
        np.testing.assert_array_equal(array, before[name], err_msg=f"{name} written by a refused call")


@given(
    function=st.sampled_from(TRAINING),
    mode=modes(),
    seed=seeds(),
    running=pair_patterns(),
    saved=pair_patterns(),
)
def test_training_pair_patterns(lib, ffi, function, mode, seed, running, saved):
    run_pair, save_pair = (
        ("resultRunningMean", "resultRunningVariance"),
        ("resultSaveMean", "resultSaveInvVariance"),
    )
    problem, before, status, message = run_pattern_case(
        lib, ffi, function, mode, seed, {run_pair: running, save_pair: saved}
    )
    if running in ("first_only", "second_only") or saved in ("first_only", "second_only"):
        assert_refused_untouched(problem, before, status, message, [run_pair, save_pair])
        return
    assert status == 0, message
    a = problem.arrays
    expected = reference.batchnorm_forward_training(
        before["x"],
        before["bnScale"],
        before["bnBias"],
        mode=mode,
        epsilon=1e-5,
        exp_avg_factor=0.1,
        running_mean=before["resultRunningMean"],
        running_var=before["resultRunningVariance"],
    )
    check(a["y"], expected["y"], "float32", "elementwise", "y")
    for name, key, used in [
        ("resultRunningMean", "running_mean", running == "both"),
        ("resultRunningVariance", "running_var", running == "both"),
        ("resultSaveMean", "saved_mean", saved == "both"),
        ("resultSaveInvVariance", "saved_inv_std", saved == "both"),
    ]:
        if used:
            check(a[name], expected[key], "float32", "reduction", name)
        else:
            np.testing.assert_array_equal(a[name], before[name], err_msg=f"{name} written though NULL")


@given(function=st.sampled_from(INFERENCE), mode=modes(), seed=seeds(), estimates=pair_patterns())
def test_inference_pair_patterns(lib, ffi, function, mode, seed, estimates):
    pair = ("estimatedMean", "estimatedVariance")
    problem, before, status, message = run_pattern_case(lib, ffi, function, mode, seed, {pair: estimates})
    if estimates in ("first_only", "second_only"):
        assert_refused_untouched(problem, before, status, message, [pair])
        return
    assert status == 0, message
    mean, var = (
        (before["estimatedMean"], before["estimatedVariance"]) if estimates == "both" else (None, None)
    )
    expected = reference.batchnorm_forward_inference(
        before["x"], before["bnScale"], before["bnBias"], mean, var, mode=mode, epsilon=1e-5
    )
    check(problem.arrays["y"], expected, "float32", "elementwise", "y")


@given(function=st.sampled_from(BACKWARD), mode=modes(), seed=seeds(), saved=pair_patterns())
def test_backward_pair_patterns(lib, ffi, function, mode, seed, saved):
    pair = ("savedMean", "savedInvVariance")
    problem, before, status, message = run_pattern_case(lib, ffi, function, mode, seed, {pair: saved})
    if saved in ("first_only", "second_only"):
        assert_refused_untouched(problem, before, status, message, [pair])
        return
    assert status == 0, message
    stats = (before["savedMean"], before["savedInvVariance"]) if saved == "both" else (None, None)
    expected = reference.batchnorm_backward(
        before["x"],
        before["dy"],
        before["bnScale"],
        saved_mean=stats[0],
        saved_inv_std=stats[1],
        mode=mode,
        epsilon=1e-5,
    )
    check(problem.arrays["dx"], expected["dx"], "float32", "elementwise", "dx")
    check(problem.arrays["resultBnScaleDiff"], expected["dscale"], "float32", "reduction", "dscale")
    check(problem.arrays["resultBnBiasDiff"], expected["dbias"], "float32", "reduction", "dbias")
