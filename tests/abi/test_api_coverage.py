"""Issue 25's entry points through the raw C ABI on a CPU handle, each
against the float64 reference on fresh data with NaN-poisoned outputs: size_t
descriptors, the tuning policy, V3 training (separate previous and next
running statistics), inference from an inverse std, activation descriptors,
batch norm with every fused activation (forward and backward), and fusion
plans.  test_issue25_backends.py runs the same features through the Python
API on every backend, with every combination of parameter types."""

from __future__ import annotations

import numpy as np
import pytest
from support.strategies import ACTIVATIONS, filled, nan_filled

import miopen_bn
from miopen_bn import reference
from miopen_bn.descriptor import TensorDescriptor
from miopen_bn.tolerances import check

SUCCESS, BAD_PARM, NOT_IMPLEMENTED = 0, 3, 6
SHAPE = (3, 4, 5, 6)


class Call:
    """Buffers and descriptors for one C call, kept alive until it is done."""

    def __init__(self, lib, ffi, rng, x_dtype="float32", mode="spatial"):
        self.lib, self.ffi, self.rng, self.mode = lib, ffi, rng, mode
        self.x_dtype = x_dtype
        self.pshape = reference.param_shape(SHAPE, mode)
        self.keep = []

    def data(self, values, dtype=None):
        return filled(values, dtype or self.x_dtype)

    def param(self, values, dtype):
        return filled(np.asarray(values).reshape(self.pshape), dtype)

    def poisoned(self, shape, dtype):
        return nan_filled(shape, dtype)

    def desc(self, array):
        if array is None:
            return self.ffi.NULL
        d = TensorDescriptor(array.dtype, array.shape, [s // array.itemsize for s in array.strides])
        self.keep.append(d)
        return d.ptr

    def ptr(self, array):
        return self.ffi.NULL if array is None else self.ffi.cast("void*", array.ctypes.data)

    def scalar(self, value):
        p = self.ffi.new("float*", value)
        self.keep.append(p)
        return p

    def activation(self, name, params):
        created = self.ffi.new("miopenActivationDescriptor_t*")
        assert self.lib.miopenCreateActivationDescriptor(created) == SUCCESS
        assert self.lib.miopenSetActivationDescriptor(created[0], reference.ACTIVATION_MODES.index(name), *params) == 0
        self.keep.append(_Destroy(created[0], self.lib.miopenDestroyActivationDescriptor))
        return created[0]

    def bn_mode(self):
        return self.lib.miopenBNSpatial if self.mode == "spatial" else self.lib.miopenBNPerActivation


class _Destroy:
    def __init__(self, obj, destroy):
        self.obj, self.destroy = obj, destroy

    def __del__(self):
        self.destroy(self.obj)


def _message(lib, ffi):
    return ffi.string(lib.miopenBNGetLastErrorMessage()).decode()


def _stats_input(rng, call, dtype, positive=False):
    low, high = (0.5, 2.0) if positive else (-1.0, 1.0)
    return call.param(rng.uniform(low, high, call.pshape), dtype)


# ----------------------------------------------------------------------------- descriptors, tuning policy


def test_set_tensor_descriptor_v2_reads_back(lib, ffi):
    with TensorDescriptor() as d:
        dims = ffi.new("size_t[]", [2, 3, 4, 5])
        strides = ffi.new("size_t[]", [60, 1, 15, 3])
        assert lib.miopenSetTensorDescriptorV2(d.ptr, lib.miopenHalf, 4, dims, strides) == SUCCESS
        dtype, out_dims, out_strides = ffi.new("miopenDataType_t*"), ffi.new("int[4]"), ffi.new("int[4]")
        assert lib.miopenGetTensorDescriptor(d.ptr, dtype, out_dims, out_strides) == SUCCESS
        assert dtype[0] == lib.miopenHalf and list(out_dims) == [2, 3, 4, 5] and list(out_strides) == [60, 1, 15, 3]
        assert lib.miopenSetTensorDescriptorV2(d.ptr, lib.miopenFloat, 2, dims, ffi.NULL) == SUCCESS
        assert lib.miopenGetTensorDescriptor(d.ptr, dtype, out_dims, out_strides) == SUCCESS
        assert list(out_dims)[:2] == [2, 3] and list(out_strides)[:2] == [3, 1]


def test_set_tensor_descriptor_v2_refuses_values_beyond_int64(lib, ffi):
    with TensorDescriptor("float32", (2, 3)) as d:
        huge = ffi.new("size_t[]", [2, 2**63])
        assert lib.miopenSetTensorDescriptorV2(d.ptr, lib.miopenFloat, 2, huge, ffi.NULL) == BAD_PARM
        assert "exceeds INT64_MAX" in _message(lib, ffi)
        zero = ffi.new("size_t[]", [2, 0])
        assert lib.miopenSetTensorDescriptorV2(d.ptr, lib.miopenFloat, 2, zero, ffi.NULL) == BAD_PARM


def test_tuning_policy_is_remembered_per_handle(lib, ffi):
    with miopen_bn.Handle("cpu") as first, miopen_bn.Handle("cpu") as second:
        value = ffi.new("miopenTuningPolicy_t*")
        assert lib.miopenGetTuningPolicy(first.ptr, value) == SUCCESS and value[0] == lib.miopenTuningPolicyNone
        for policy in range(lib.miopenTuningPolicyNone, lib.miopenTuningPolicyDbClean + 1):
            assert lib.miopenSetTuningPolicy(first.ptr, policy) == SUCCESS
            assert lib.miopenGetTuningPolicy(first.ptr, value) == SUCCESS and value[0] == policy
        assert lib.miopenGetTuningPolicy(second.ptr, value) == SUCCESS and value[0] == lib.miopenTuningPolicyNone
        for bad in (0, 6, 1000):
            assert lib.miopenSetTuningPolicy(first.ptr, bad) == BAD_PARM
        assert lib.miopenGetTuningPolicy(first.ptr, value) == SUCCESS and value[0] == lib.miopenTuningPolicyDbClean
        assert lib.miopenGetTuningPolicy(first.ptr, ffi.NULL) == BAD_PARM
        assert lib.miopenSetTuningPolicy(ffi.NULL, 1) == BAD_PARM


# ----------------------------------------------------------------------------- activation descriptors


def test_activation_descriptor_round_trip(lib, ffi):
    created = ffi.new("miopenActivationDescriptor_t*")
    assert lib.miopenCreateActivationDescriptor(created) == SUCCESS
    d = created[0]
    mode, a, b, g = ffi.new("miopenActivationMode_t*"), ffi.new("double*"), ffi.new("double*"), ffi.new("double*")
    assert lib.miopenGetActivationDescriptor(d, mode, a, b, g) == SUCCESS
    assert (mode[0], a[0], b[0], g[0]) == (lib.miopenActivationPASTHRU, 0.0, 0.0, 0.0)
    assert lib.miopenSetActivationDescriptor(d, lib.miopenActivationELU, 0.5, 1.5, 2.5) == SUCCESS
    assert lib.miopenGetActivationDescriptor(d, mode, a, b, g) == SUCCESS
    assert (mode[0], a[0], b[0], g[0]) == (lib.miopenActivationELU, 0.5, 1.5, 2.5)
    assert lib.miopenGetActivationDescriptor(d, ffi.NULL, ffi.NULL, ffi.NULL, ffi.NULL) == SUCCESS
    assert lib.miopenSetActivationDescriptor(d, 11, 0, 0, 0) == BAD_PARM
    assert lib.miopenSetActivationDescriptor(d, lib.miopenActivationTANH, float("nan"), 1, 0) == BAD_PARM
    assert lib.miopenGetActivationDescriptor(d, mode, a, b, g) == SUCCESS and mode[0] == lib.miopenActivationELU
    assert lib.miopenDestroyActivationDescriptor(d) == SUCCESS
    assert lib.miopenDestroyActivationDescriptor(d) == BAD_PARM
    assert lib.miopenSetActivationDescriptor(d, lib.miopenActivationRELU, 0, 0, 0) == BAD_PARM
    assert lib.miopenDestroyActivationDescriptor(ffi.NULL) == SUCCESS
    assert lib.miopenCreateActivationDescriptor(ffi.NULL) == BAD_PARM


# ----------------------------------------------------------------------------- V3 training


@pytest.mark.parametrize("in_place", [False, True])
@pytest.mark.parametrize("mode", ["spatial", "per_activation"])
def test_training_v3_reads_previous_writes_next(lib, ffi, cpu_handle, rng, mode, in_place):
    c = Call(lib, ffi, rng, mode=mode)
    x = c.data(rng.normal(0.5, 2.0, SHAPE))
    scale, bias = _stats_input(rng, c, "float32"), _stats_input(rng, c, "float32")
    prev_mean, prev_var = _stats_input(rng, c, "float32"), _stats_input(rng, c, "float32", positive=True)
    prev_copy = (prev_mean.copy(), prev_var.copy())
    next_mean, next_var = (prev_mean, prev_var) if in_place else (c.poisoned(c.pshape, "float32") for _ in "mv")
    y, saved_mean, saved_inv = c.poisoned(SHAPE, "float32"), *(c.poisoned(c.pshape, "float32") for _ in "mv")
    status = lib.miopenBatchNormalizationForwardTraining_V3(
        cpu_handle.ptr, c.bn_mode(), c.scalar(1.0), c.scalar(0.0), c.desc(x), c.ptr(x), c.desc(y), c.ptr(y),
        c.desc(scale), c.desc(bias), c.desc(next_mean), c.desc(next_var), c.ptr(scale), c.ptr(bias), 0.25,
        c.ptr(prev_mean), c.ptr(prev_var), c.ptr(next_mean), c.ptr(next_var), 1e-5, c.ptr(saved_mean),
        c.ptr(saved_inv))  # fmt: skip
    assert status == SUCCESS, _message(lib, ffi)
    expected = reference.batchnorm_forward_training(
        x, scale, bias, mode=mode, exp_avg_factor=0.25, running_mean=prev_copy[0], running_var=prev_copy[1]
    )
    check(y, expected["y"], "float32", "elementwise", "y")
    check(next_mean, expected["running_mean"], "float32", "reduction", "next running mean")
    check(next_var, expected["running_var"], "float32", "reduction", "next running variance")
    check(saved_mean, expected["saved_mean"], "float32", "reduction", "saved mean")
    if not in_place:
        assert np.array_equal(prev_mean, prev_copy[0]) and np.array_equal(prev_var, prev_copy[1])


def test_training_v3_needs_all_four_running_buffers(lib, ffi, cpu_handle, rng):
    c = Call(lib, ffi, rng)
    x = c.data(rng.standard_normal(SHAPE))
    scale = bias = _stats_input(rng, c, "float32")
    prev = _stats_input(rng, c, "float32")
    nxt = c.poisoned(c.pshape, "float32")
    y = c.poisoned(SHAPE, "float32")
    status = lib.miopenBatchNormalizationForwardTraining_V3(
        cpu_handle.ptr, c.bn_mode(), c.scalar(1.0), c.scalar(0.0), c.desc(x), c.ptr(x), c.desc(y), c.ptr(y),
        c.desc(scale), c.desc(bias), c.desc(prev), c.desc(prev), c.ptr(scale), c.ptr(bias), 0.1,
        c.ptr(prev), c.ptr(prev), ffi.NULL, ffi.NULL, 1e-5, ffi.NULL, ffi.NULL)  # fmt: skip
    assert status == BAD_PARM and "all four" in _message(lib, ffi)
    assert np.isnan(y).all() and np.isnan(nxt).all()


# ----------------------------------------------------------------------------- inverse-variance inference


@pytest.mark.parametrize("estimates", [True, False])
def test_inference_from_inverse_std(lib, ffi, cpu_handle, rng, estimates):
    c = Call(lib, ffi, rng)
    x = c.data(rng.normal(1.0, 1.5, SHAPE))
    scale, bias = _stats_input(rng, c, "float32"), _stats_input(rng, c, "float32")
    mean = _stats_input(rng, c, "float32") if estimates else None
    inv_std = _stats_input(rng, c, "float32", positive=True) if estimates else None
    y = c.poisoned(SHAPE, "float32")
    status = lib.miopenBatchNormalizationForwardInferenceInvVariance(
        cpu_handle.ptr, c.bn_mode(), c.scalar(1.0), c.scalar(0.0), c.desc(x), c.ptr(x), c.desc(y), c.ptr(y),
        c.desc(scale), c.desc(bias), c.desc(mean), c.desc(inv_std), c.ptr(scale), c.ptr(bias), c.ptr(mean),
        c.ptr(inv_std))  # fmt: skip
    assert status == SUCCESS, _message(lib, ffi)
    expected = reference.batchnorm_forward_inference(x, scale, bias, mean, inv_std, var_is_inv_std=True)
    check(y, expected, "float32", "elementwise", "y")


# ----------------------------------------------------------------------------- fused activations


def _fused(name):
    return (name,) + ACTIVATIONS[name]


@pytest.mark.parametrize("dtype", ["float32", "float16", "float64"])
@pytest.mark.parametrize("name", list(ACTIVATIONS))
def test_training_with_activation(lib, ffi, cpu_handle, rng, name, dtype):
    for entry in ("miopenBatchNormForwardTrainingActivation", "miopenBatchNormForwardTrainingActivation_V2"):
        c = Call(lib, ffi, rng, dtype)
        x = c.data(rng.normal(0.3, 1.7, SHAPE))
        scale, bias = _stats_input(rng, c, "float32"), _stats_input(rng, c, "float32")
        run_mean, run_var = _stats_input(rng, c, "float32"), _stats_input(rng, c, "float32", positive=True)
        before = (run_mean.copy(), run_var.copy())
        y, saved_mean, saved_inv = c.poisoned(SHAPE, dtype), *(c.poisoned(c.pshape, "float32") for _ in "mv")
        args = [cpu_handle.ptr, c.bn_mode(), c.scalar(0.75), c.scalar(0.0), c.desc(x), c.ptr(x), c.desc(y),
                c.ptr(y), c.desc(scale), c.desc(bias), c.desc(run_mean), c.desc(run_var), c.ptr(scale),
                c.ptr(bias), 0.1]  # fmt: skip
        if entry.endswith("_V2"):
            args += [c.ptr(run_mean), c.ptr(run_var)]
        args += [c.ptr(run_mean), c.ptr(run_var), 1e-5, c.ptr(saved_mean), c.ptr(saved_inv),
                 c.activation(name, ACTIVATIONS[name])]  # fmt: skip
        assert getattr(lib, entry)(*args) == SUCCESS, _message(lib, ffi)
        expected = reference.batchnorm_forward_training(
            x, scale, bias, alpha=0.75, running_mean=before[0], running_var=before[1], fused_activation=_fused(name)
        )
        check(y, expected["y"], dtype, "elementwise", f"{entry} y")
        check(run_mean, expected["running_mean"], "float32", "reduction", "running mean")
        check(saved_inv, expected["saved_inv_std"], "float32", "reduction", "saved inverse std")


@pytest.mark.parametrize("inverse", [False, True])
@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
@pytest.mark.parametrize("name", list(ACTIVATIONS))
def test_inference_with_activation(lib, ffi, cpu_handle, rng, name, layout, inverse):
    c = Call(lib, ffi, rng, "float32", mode="spatial")
    x = c.data(rng.normal(0.0, 1.5, SHAPE))
    if layout == "NHWC":
        x = np.ascontiguousarray(x.transpose(0, 2, 3, 1)).transpose(0, 3, 1, 2)
    scale, bias = _stats_input(rng, c, "float32"), _stats_input(rng, c, "float32")
    mean, var = _stats_input(rng, c, "float32"), _stats_input(rng, c, "float32", positive=True)
    y = np.full_like(x, np.nan)
    common = [cpu_handle.ptr, c.bn_mode(), c.scalar(1.0), c.scalar(0.0), c.desc(x), c.ptr(x), c.desc(y), c.ptr(y),
              c.desc(scale), c.desc(bias), c.desc(mean), c.desc(var), c.ptr(scale), c.ptr(bias), c.ptr(mean),
              c.ptr(var)]  # fmt: skip
    activation = c.activation(name, ACTIVATIONS[name])
    if inverse:
        status = lib.miopenBatchNormForwardInferenceActivationInvVariance(*common, activation)
    else:
        status = lib.miopenBatchNormForwardInferenceActivation(*common, 1e-3, activation)
    assert status == SUCCESS, _message(lib, ffi)
    expected = reference.batchnorm_forward_inference(
        x, scale, bias, mean, var, epsilon=1e-3, fused_activation=_fused(name), var_is_inv_std=inverse
    )
    check(y, expected, "float32", "elementwise", "y")


@pytest.mark.parametrize("saved", [True, False])
@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "float64"])
@pytest.mark.parametrize("name", list(ACTIVATIONS))
def test_backward_with_activation(lib, ffi, cpu_handle, rng, name, dtype, saved):
    mode = "per_activation" if name in ("relu", "abs") else "spatial"
    c = Call(lib, ffi, rng, dtype, mode=mode)
    x = c.data(rng.normal(0.2, 1.3, SHAPE))
    dy = c.data(rng.standard_normal(SHAPE))
    scale, bias = _stats_input(rng, c, dtype), _stats_input(rng, c, "float32")
    stats = reference.batchnorm_forward_training(x, scale, bias, mode=mode)
    saved_mean = c.param(stats["saved_mean"], "float32") if saved else None
    saved_inv = c.param(stats["saved_inv_std"], "float32") if saved else None
    dx = c.poisoned(SHAPE, dtype)
    dscale, dbias = c.poisoned(c.pshape, dtype), c.poisoned(c.pshape, "float32")
    status = lib.miopenBatchNormBackwardActivation(
        cpu_handle.ptr, c.bn_mode(), c.scalar(1.0), c.scalar(0.0), c.scalar(1.0), c.scalar(0.0), c.desc(x),
        c.ptr(x), c.desc(dy), c.ptr(dy), c.desc(dx), c.ptr(dx), c.desc(scale), c.desc(bias), c.desc(saved_mean),
        c.desc(saved_inv), c.ptr(scale), c.ptr(bias), c.ptr(dscale), c.ptr(dbias), 1e-5, c.ptr(saved_mean),
        c.ptr(saved_inv), c.activation(name, ACTIVATIONS[name]))  # fmt: skip
    assert status == SUCCESS, _message(lib, ffi)
    expected = reference.batchnorm_backward(
        x, dy, scale, saved_mean=saved_mean, saved_inv_std=saved_inv, mode=mode, bias=bias,
        fused_activation=_fused(name))  # fmt: skip
    check(dx, expected["dx"], dtype, "elementwise", "dx")
    check(dscale, expected["dscale"], dtype, "reduction", "dscale")
    check(dbias, expected["dbias"], "float32", "reduction", "dbias")


def test_activation_with_blended_output_is_not_implemented(lib, ffi, cpu_handle, rng):
    c = Call(lib, ffi, rng)
    x = c.data(rng.standard_normal(SHAPE))
    scale = bias = mean = var = _stats_input(rng, c, "float32", positive=True)
    y = c.data(rng.standard_normal(SHAPE))
    before = y.copy()
    status = lib.miopenBatchNormForwardInferenceActivation(
        cpu_handle.ptr, c.bn_mode(), c.scalar(1.0), c.scalar(0.5), c.desc(x), c.ptr(x), c.desc(y), c.ptr(y),
        c.desc(scale), c.desc(bias), c.desc(mean), c.desc(var), c.ptr(scale), c.ptr(bias), c.ptr(mean),
        c.ptr(var), 1e-5, c.activation("relu", (0, 0, 0)))  # fmt: skip
    assert status == NOT_IMPLEMENTED and "fused activation" in _message(lib, ffi)
    assert np.array_equal(y, before)
    status = lib.miopenBatchNormForwardInferenceActivation(
        cpu_handle.ptr, c.bn_mode(), c.scalar(1.0), c.scalar(0.0), c.desc(x), c.ptr(x), c.desc(y), c.ptr(y),
        c.desc(scale), c.desc(bias), c.desc(mean), c.desc(var), c.ptr(scale), c.ptr(bias), c.ptr(mean),
        c.ptr(var), 1e-5, ffi.NULL)  # fmt: skip
    assert status == BAD_PARM and "activDesc" in _message(lib, ffi)


def test_backward_activation_needs_bias(lib, ffi, cpu_handle, rng):
    c = Call(lib, ffi, rng)
    x, dy = c.data(rng.standard_normal(SHAPE)), c.data(rng.standard_normal(SHAPE))
    scale = _stats_input(rng, c, "float32")
    dx, dscale, dbias = c.poisoned(SHAPE, "float32"), *(c.poisoned(c.pshape, "float32") for _ in "sb")
    args = lambda bias_ptr, activation: (  # noqa: E731
        cpu_handle.ptr, c.bn_mode(), c.scalar(1.0), c.scalar(0.0), c.scalar(1.0), c.scalar(0.0), c.desc(x),
        c.ptr(x), c.desc(dy), c.ptr(dy), c.desc(dx), c.ptr(dx), c.desc(scale), c.desc(dbias), ffi.NULL,
        ffi.NULL, c.ptr(scale), bias_ptr, c.ptr(dscale), c.ptr(dbias), 1e-5, ffi.NULL, ffi.NULL, activation)
    assert lib.miopenBatchNormBackwardActivation(*args(ffi.NULL, c.activation("elu", (1, 0, 0)))) == BAD_PARM
    assert "bnBias" in _message(lib, ffi) and np.isnan(dx).all()
    # Pass-through never reads bias: plain backward.
    assert lib.miopenBatchNormBackwardActivation(*args(ffi.NULL, c.activation("pasthru", (0, 0, 0)))) == SUCCESS
    expected = reference.batchnorm_backward(x, dy, scale)
    check(dx, expected["dx"], "float32", "elementwise", "dx")


# ----------------------------------------------------------------------------- fusion plans


class Plan:
    """A fusion plan for x's descriptor, with its ops and an arguments object."""

    def __init__(self, lib, ffi, x_desc, direction=0):
        self.lib, self.ffi = lib, ffi
        created = ffi.new("miopenFusionPlanDescriptor_t*")
        assert lib.miopenCreateFusionPlan(created, direction, x_desc) == SUCCESS
        self.plan = created[0]
        args = ffi.new("miopenOperatorArgs_t*")
        assert lib.miopenCreateOperatorArgs(args) == SUCCESS
        self.args = args[0]

    def op(self, constructor, *extra):
        created = self.ffi.new("miopenFusionOpDescriptor_t*")
        assert getattr(self.lib, constructor)(self.plan, created, *extra) == SUCCESS
        return created[0]

    def close(self):
        assert self.lib.miopenDestroyOperatorArgs(self.args) == SUCCESS
        assert self.lib.miopenDestroyFusionPlan(self.plan) == SUCCESS


@pytest.mark.parametrize("name", ["relu", "elu", "clamp", None])
def test_fusion_plan_inference_with_activation(lib, ffi, cpu_handle, rng, name):
    c = Call(lib, ffi, rng)
    x = c.data(rng.normal(0.0, 1.5, SHAPE))
    scale, bias = _stats_input(rng, c, "float32"), _stats_input(rng, c, "float32")
    mean, var = _stats_input(rng, c, "float32"), _stats_input(rng, c, "float32", positive=True)
    y = c.poisoned(SHAPE, "float32")
    plan = Plan(lib, ffi, c.desc(x))
    bn = plan.op("miopenCreateOpBatchNormInference", c.bn_mode(), c.desc(scale))
    one, zero = c.scalar(1.0), c.scalar(0.0)
    assert lib.miopenSetOpArgsBatchNormInference(plan.args, bn, one, zero, c.ptr(scale), c.ptr(bias), c.ptr(mean),
                                                 c.ptr(var), 1e-4) == SUCCESS  # fmt: skip
    if name is not None:
        act = plan.op("miopenCreateOpActivationForward", reference.ACTIVATION_MODES.index(name))
        assert lib.miopenSetOpArgsActivForward(plan.args, act, one, zero, *ACTIVATIONS[name]) == SUCCESS
    assert lib.miopenExecuteFusionPlan(cpu_handle.ptr, plan.plan, c.desc(x), c.ptr(x), c.desc(y), c.ptr(y),
                                       plan.args) == BAD_PARM  # fmt: skip
    assert "not compiled" in _message(lib, ffi) and np.isnan(y).all()
    assert lib.miopenCompileFusionPlan(cpu_handle.ptr, plan.plan) == SUCCESS
    assert lib.miopenExecuteFusionPlan(cpu_handle.ptr, plan.plan, c.desc(x), c.ptr(x), c.desc(y), c.ptr(y),
                                       plan.args) == SUCCESS, _message(lib, ffi)  # fmt: skip
    fused = None if name is None else _fused(name)
    expected = reference.batchnorm_forward_inference(x, scale, bias, mean, var, epsilon=1e-4, fused_activation=fused)
    check(y, expected, "float32", "elementwise", "y")
    plan.close()


@pytest.mark.parametrize("running", [True, False])
def test_fusion_plan_training_with_activation(lib, ffi, cpu_handle, rng, running):
    c = Call(lib, ffi, rng)
    x = c.data(rng.normal(0.5, 1.5, SHAPE))
    scale, bias = _stats_input(rng, c, "float32"), _stats_input(rng, c, "float32")
    run_mean, run_var = _stats_input(rng, c, "float32"), _stats_input(rng, c, "float32", positive=True)
    before = (run_mean.copy(), run_var.copy())
    y, saved_mean, saved_inv = c.poisoned(SHAPE, "float32"), *(c.poisoned(c.pshape, "float32") for _ in "mv")
    plan = Plan(lib, ffi, c.desc(x))
    bn = plan.op("miopenCreateOpBatchNormForward", c.bn_mode(), running)
    act = plan.op("miopenCreateOpActivationForward", lib.miopenActivationLEAKYRELU)
    one, zero = c.scalar(1.0), c.scalar(0.0)
    assert lib.miopenSetOpArgsBatchNormForward(plan.args, bn, one, zero, c.ptr(scale), c.ptr(bias), c.ptr(saved_mean),
                                               c.ptr(saved_inv), c.ptr(run_mean), c.ptr(run_var), 0.2,
                                               1e-5) == SUCCESS  # fmt: skip
    assert lib.miopenSetOpArgsActivForward(plan.args, act, one, zero, 0.2, 0.0, 0.0) == SUCCESS
    assert lib.miopenCompileFusionPlan(cpu_handle.ptr, plan.plan) == SUCCESS
    assert lib.miopenExecuteFusionPlan(cpu_handle.ptr, plan.plan, c.desc(x), c.ptr(x), c.desc(y), c.ptr(y),
                                       plan.args) == SUCCESS, _message(lib, ffi)  # fmt: skip
    expected = reference.batchnorm_forward_training(
        x, scale, bias, exp_avg_factor=0.2, running_mean=before[0], running_var=before[1],
        fused_activation=("leakyrelu", 0.2, 0.0, 0.0))  # fmt: skip
    check(y, expected["y"], "float32", "elementwise", "y")
    check(saved_inv, expected["saved_inv_std"], "float32", "reduction", "saved inverse std")
    if running:
        check(run_var, expected["running_var"], "float32", "reduction", "running variance")
    else:
        assert np.array_equal(run_mean, before[0]) and np.array_equal(run_var, before[1])
    plan.close()


def test_fusion_plan_backward_with_activation(lib, ffi, cpu_handle, rng):
    c = Call(lib, ffi, rng)
    x, dy = c.data(rng.normal(0.2, 1.2, SHAPE)), c.data(rng.standard_normal(SHAPE))
    scale, bias = _stats_input(rng, c, "float32"), _stats_input(rng, c, "float32")
    stats = reference.batchnorm_forward_training(x, scale, bias)
    saved_mean, saved_inv = c.param(stats["saved_mean"], "float32"), c.param(stats["saved_inv_std"], "float32")
    dx, dscale, dbias = c.poisoned(SHAPE, "float32"), *(c.poisoned(c.pshape, "float32") for _ in "sb")
    plan = Plan(lib, ffi, c.desc(x))
    bn = plan.op("miopenCreateOpBatchNormBackward", c.bn_mode())
    act = plan.op("miopenCreateOpActivationBackward", lib.miopenActivationTANH)
    one, zero = c.scalar(1.0), c.scalar(0.0)
    assert lib.miopenSetOpArgsBatchNormBackward(plan.args, bn, one, zero, c.ptr(x), c.ptr(scale), c.ptr(bias),
                                                c.ptr(dscale), c.ptr(dbias), c.ptr(saved_mean),
                                                c.ptr(saved_inv)) == SUCCESS  # fmt: skip
    assert lib.miopenSetOpArgsActivBackward(plan.args, act, one, zero, ffi.NULL, ffi.NULL, 0.9, 1.1, 0.0) == SUCCESS
    assert lib.miopenCompileFusionPlan(cpu_handle.ptr, plan.plan) == SUCCESS
    assert lib.miopenExecuteFusionPlan(cpu_handle.ptr, plan.plan, c.desc(dy), c.ptr(dy), c.desc(dx), c.ptr(dx),
                                       plan.args) == SUCCESS, _message(lib, ffi)  # fmt: skip
    expected = reference.batchnorm_backward(
        x, dy, scale, saved_mean=saved_mean, saved_inv_std=saved_inv, bias=bias,
        fused_activation=("tanh", 0.9, 1.1, 0.0))  # fmt: skip
    check(dx, expected["dx"], "float32", "elementwise", "dx")
    check(dscale, expected["dscale"], "float32", "reduction", "dscale")
    check(dbias, expected["dbias"], "float32", "reduction", "dbias")
    plan.close()


@pytest.mark.parametrize("ops", ["bias", "activation_first", "two_batch_norms", "wrong_direction", "horizontal", "empty"])
def test_other_fusion_plans_are_unsupported(lib, ffi, cpu_handle, rng, ops):
    c = Call(lib, ffi, rng)
    x = c.data(rng.standard_normal(SHAPE))
    scale = _stats_input(rng, c, "float32")
    plan = Plan(lib, ffi, c.desc(x), direction=lib.miopenHorizontalFusion if ops == "horizontal" else 0)
    relu = lib.miopenActivationRELU
    if ops == "bias":
        plan.op("miopenCreateOpBiasForward", c.desc(scale))
        plan.op("miopenCreateOpActivationForward", relu)
    elif ops == "activation_first":
        plan.op("miopenCreateOpActivationForward", relu)
        plan.op("miopenCreateOpBatchNormInference", c.bn_mode(), c.desc(scale))
    elif ops == "two_batch_norms":
        plan.op("miopenCreateOpBatchNormForward", c.bn_mode(), False)
        plan.op("miopenCreateOpBatchNormForward", c.bn_mode(), False)
    elif ops == "wrong_direction":
        plan.op("miopenCreateOpBatchNormBackward", c.bn_mode())
        plan.op("miopenCreateOpActivationForward", relu)
    elif ops == "horizontal":
        plan.op("miopenCreateOpBatchNormForward", c.bn_mode(), False)
    assert lib.miopenCompileFusionPlan(cpu_handle.ptr, plan.plan) == 8  # miopenStatusUnsupportedOp
    assert "not supported" in _message(lib, ffi)
    plan.close()


def test_fusion_objects_are_checked(lib, ffi, cpu_handle, rng):
    c = Call(lib, ffi, rng)
    x = c.data(rng.standard_normal(SHAPE))
    plan = Plan(lib, ffi, c.desc(x))
    bn = plan.op("miopenCreateOpBatchNormForward", c.bn_mode(), False)
    one = c.scalar(1.0)
    # An op of another kind, and NULL alpha.
    assert lib.miopenSetOpArgsBatchNormInference(plan.args, bn, one, one, *[ffi.NULL] * 4, 1e-5) == BAD_PARM
    assert lib.miopenSetOpArgsBatchNormForward(plan.args, bn, ffi.NULL, one, *[ffi.NULL] * 6, 0.1, 1e-5) == BAD_PARM
    assert lib.miopenCompileFusionPlan(cpu_handle.ptr, plan.plan) == SUCCESS
    y = c.poisoned(SHAPE, "float32")
    status = lib.miopenExecuteFusionPlan(cpu_handle.ptr, plan.plan, c.desc(x), c.ptr(x), c.desc(y), c.ptr(y), plan.args)
    assert status == BAD_PARM and "no arguments" in _message(lib, ffi)
    plan.close()
    assert lib.miopenDestroyFusionPlan(plan.plan) == BAD_PARM
    assert lib.miopenDestroyOperatorArgs(plan.args) == BAD_PARM
    args = ffi.new("miopenOperatorArgs_t*")
    assert lib.miopenCreateOperatorArgs(args) == SUCCESS
    # The op died with its plan.
    assert lib.miopenSetOpArgsBatchNormForward(args[0], bn, one, one, *[ffi.NULL] * 6, 0.1, 1e-5) == BAD_PARM
    assert lib.miopenDestroyOperatorArgs(args[0]) == SUCCESS


# ----------------------------------------------------------------------------- the Python API over them


def test_activation_descriptor_object():
    with miopen_bn.ActivationDescriptor("power", (0.5, 2.0, 3.0)) as d:
        assert d.get() == ("power", 0.5, 2.0, 3.0)
    with pytest.raises(ValueError, match="activation must be one of"):
        miopen_bn.ActivationDescriptor("gelu")
    with pytest.raises(miopen_bn.MIOpenError):
        miopen_bn.ActivationDescriptor("tanh", (float("inf"), 1.0, 0.0))
    with pytest.raises(miopen_bn.MIOpenBadParmError, match="11 is not a miopenActivationMode_t"):  # the library's check
        miopen_bn.ActivationDescriptor(11)
    with miopen_bn.ActivationDescriptor(3) as d:
        assert d.get()[0] == "relu"
