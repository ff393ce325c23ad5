"""Bad arguments raise the right exception, name the argument, and write nothing.

The library checks every argument (shapes, dtypes, pairs that go together,
epsilon...) and its refusal comes back as an MIOpenError subclass naming the
argument as MIOpen's prototypes do (bnScale, estimatedMean...).  Python
refuses only what the library cannot see: objects it cannot address, outputs
it cannot write, memory on the other side of the handle, values that do not
convert.  Either way every output keeps its NaN poison (or, for running
statistics, its previous values)."""

from __future__ import annotations

import numpy as np
import pytest

import miopen_bn

SHAPE = (4, 3, 5, 2)


class Buffers:
    """One valid float32 problem plus NaN-poisoned outputs, and a check that
    nothing was written."""

    def __init__(self, rng):
        self.x = rng.normal(0.5, 2.0, SHAPE).astype(np.float32)
        self.dy = rng.standard_normal(SHAPE).astype(np.float32)
        self.scale = rng.uniform(0.5, 2.0, 3).astype(np.float32)
        self.bias = rng.uniform(-1, 1, 3).astype(np.float32)
        self.mean = rng.uniform(-1, 1, 3).astype(np.float32)
        self.var = rng.uniform(0.5, 2, 3).astype(np.float32)
        self.y = np.full(SHAPE, np.nan, np.float32)
        self.dx = np.full(SHAPE, np.nan, np.float32)
        self.dscale = np.full(3, np.nan, np.float32)
        self.dbias = np.full(3, np.nan, np.float32)
        self.running_mean = rng.uniform(-1, 1, 3).astype(np.float32)
        self.running_var = rng.uniform(0.5, 2, 3).astype(np.float32)
        self._before = {name: value.copy() for name, value in vars(self).items()}

    def assert_untouched(self):
        for name, before in self._before.items():
            np.testing.assert_array_equal(getattr(self, name), before, err_msg=f"{name} was written")


@pytest.fixture
def b(rng):
    return Buffers(rng)


def training(b, **changes):
    args = dict(
        x=b.x, scale=b.scale, bias=b.bias, running_mean=b.running_mean, running_var=b.running_var, y=b.y
    )
    args.update(changes)
    return miopen_bn.batchnorm_forward_training(**args)


def inference(b, **changes):
    args = dict(x=b.x, scale=b.scale, bias=b.bias, mean=b.mean, var=b.var, y=b.y)
    args.update(changes)
    return miopen_bn.batchnorm_forward_inference(**args)


def backward(b, **changes):
    args = dict(x=b.x, dy=b.dy, scale=b.scale, dx=b.dx, dscale=b.dscale, dbias=b.dbias)
    args.update(changes)
    return miopen_bn.batchnorm_backward(**args)


CASES = [
    # (entry point, changed arguments, exception, words the message must hold)
    (training, dict(x=np.ones((4,), np.float32)), ValueError, ["x", "2 to 5"]),
    (training, dict(x=np.ones((2, 3, 1, 1, 1, 2), np.float32)), miopen_bn.MIOpenBadParmError, ["x", "rank 6"]),
    (training, dict(x=np.ones((0, 3, 2, 2), np.float32)), miopen_bn.MIOpenBadParmError, ["x", "length 0 is 0"]),
    (training, dict(y=np.full((4, 3, 5, 3), np.nan, np.float32)), miopen_bn.MIOpenBadParmError,
     ["y", "[4, 3, 5, 3]", "same lengths"]),
    (training, dict(y=np.full(SHAPE, np.nan, np.float64)), miopen_bn.MIOpenBadParmError,
     ["y (miopenDouble)", "different types"]),
    (training, dict(scale=np.ones(4, np.float32)), miopen_bn.MIOpenBadParmError,
     ["bnScale", "[1, 4, 1, 1]", "(1, C, 1, ...)"]),
    (training, dict(scale=np.ones((3, 5, 2), np.float32)), miopen_bn.MIOpenBadParmError, ["bnScale", "spatial"]),
    (training, dict(scale=np.ones(3, np.int32)), TypeError, ["scale", "int32"]),
    (
        training,
        dict(scale=np.ones(3, np.float16), bias=np.ones(3, np.float16)),
        miopen_bn.MIOpenNotImplementedError,
        ["bnScale of type miopenHalf", "miopenFloat or x's type"],
    ),
    (training, dict(bias=np.ones(3, np.float64)), miopen_bn.MIOpenNotImplementedError,
     ["bnBias of type miopenDouble"]),
    (training, dict(running_var=None), miopen_bn.MIOpenBadParmError, ["resultRunningMean", "resultRunningVariance"]),
    (training, dict(running_mean=np.ones(3, np.float32)[::-1]), ValueError, ["running_mean", "strides"]),
    (training, dict(y=None, beta=1.0), ValueError, ["y", "beta"]),
    (training, dict(saved_mean=np.full(3, np.nan, np.float32)), miopen_bn.MIOpenBadParmError,
     ["resultSaveMean", "resultSaveInvVariance"]),
    (
        training,
        dict(save_stats=False, saved_mean=np.full(3, np.nan, np.float32), saved_inv_std=np.full(3, np.nan, np.float32)),
        ValueError,
        ["save_stats"],
    ),
    (training, dict(mode="channel"), ValueError, ["mode"]),
    (training, dict(handle="cpu"), TypeError, ["handle"]),
    (training, dict(alpha="one"), TypeError, ["alpha"]),
    (training, dict(epsilon=-1.0), miopen_bn.MIOpenBadParmError, ["epsilon"]),
    (training, dict(exp_avg_factor=float("nan")), miopen_bn.MIOpenBadParmError, ["expAvgFactor"]),
    (
        training,
        dict(x=np.ones((1, 3, 1, 1), np.float32), y=None, running_mean=None, running_var=None),
        miopen_bn.MIOpenBadParmError,
        ["more than one"],
    ),
    (inference, dict(var=None), miopen_bn.MIOpenBadParmError, ["estimatedMean", "estimatedVariance"]),
    (inference, dict(mean=np.ones((1, 3, 1), np.float32)), miopen_bn.MIOpenBadParmError,
     ["estimatedMean", "does not fit x"]),
    (inference, dict(var=np.ones(3, np.float16)), miopen_bn.MIOpenNotImplementedError,
     ["estimatedVariance of type miopenHalf"]),
    (inference, dict(epsilon=float("nan")), miopen_bn.MIOpenBadParmError, ["epsilon"]),
    (inference, dict(mode="per_activation"), miopen_bn.MIOpenBadParmError, ["bnScale", "per-activation mode"]),
    (backward, dict(dy=np.ones((4, 3, 5), np.float32)), miopen_bn.MIOpenBadParmError, ["dy", "same lengths"]),
    (backward, dict(dy=np.ones(SHAPE, np.float16)), miopen_bn.MIOpenBadParmError,
     ["dy (miopenHalf)", "different types"]),
    (backward, dict(dx=np.full(SHAPE, np.nan, np.float64)), miopen_bn.MIOpenBadParmError,
     ["dx (miopenDouble)", "different types"]),
    (backward, dict(saved_mean=np.ones(3, np.float32)), miopen_bn.MIOpenBadParmError,
     ["savedMean", "savedInvVariance"]),
    (backward, dict(dscale=None, beta_param=0.5), ValueError, ["dscale", "beta"]),
    (backward, dict(dx=None, beta_data=2.0), ValueError, ["dx", "beta"]),
    (backward, dict(dbias=np.full(4, np.nan, np.float32)), miopen_bn.MIOpenBadParmError,
     ["resultBnBiasDiff", "does not fit x"]),
    (backward, dict(epsilon=-0.5), miopen_bn.MIOpenBadParmError, ["epsilon"]),
]


@pytest.mark.parametrize(
    "entry, changes, error, words",
    CASES,
    ids=[f"{c[0].__name__}-{'-'.join(c[1])}-{i}" for i, c in enumerate(CASES)],
)
def test_bad_argument(b, entry, changes, error, words):
    with pytest.raises(error) as info:
        entry(b, **changes)
    for word in words:
        assert word in str(info.value), f"{word!r} not in {info.value}"
    b.assert_untouched()


def test_read_only_output(b):
    b.y.flags.writeable = False
    with pytest.raises(ValueError, match="y is read-only"):
        training(b)
    b.y.flags.writeable = True
    b.assert_untouched()


def test_output_with_negative_strides(b):
    with pytest.raises(ValueError, match="y has strides"):
        training(b, y=b.y[:, :, ::-1])
    b.assert_untouched()


def test_output_with_overlapping_strides(b):
    storage = np.full(64, np.nan, np.float32)
    overlapping = np.lib.stride_tricks.as_strided(storage, shape=SHAPE, strides=(16, 8, 4, 4))
    with pytest.raises(miopen_bn.MIOpenBadParmError, match="strides of y let two of its elements share memory"):
        training(b, y=overlapping)
    assert np.isnan(storage).all()


def test_misaligned_output(b):
    raw = np.full(b.x.size * 4 + 1, 0xFF, np.uint8)
    misaligned = raw[1:].view(np.float32).reshape(SHAPE)
    with pytest.raises(ValueError, match="y has strides"):
        training(b, y=misaligned)
    assert (raw == 0xFF).all()


def test_closed_handle(b):
    handle = miopen_bn.Handle("cpu")
    handle.close()
    with pytest.raises(ValueError, match="closed"):
        training(b, handle=handle)
    b.assert_untouched()


class FakeDeviceArray:
    """Claims device memory through __cuda_array_interface__; never dereferenced."""

    def __init__(self, shape, typestr="<f4"):
        self.__cuda_array_interface__ = {
            "shape": shape,
            "typestr": typestr,
            "data": (0x1000, False),
            "strides": None,
            "version": 3,
        }


@pytest.mark.parametrize("argument", ["y", "scale", "running_mean"])
def test_device_array_on_a_cpu_handle(b, cpu_handle, argument):
    shape = SHAPE if argument == "y" else (3,)
    with pytest.raises(ValueError, match=f"{argument} is device .* handle runs on the CPU"):
        training(b, handle=cpu_handle, **{argument: FakeDeviceArray(shape)})
    b.assert_untouched()


def test_library_refusal_leaves_outputs_of_every_entry_point(b):
    for entry in (training, inference, backward):
        with pytest.raises(miopen_bn.MIOpenBadParmError):
            entry(b, epsilon=float("nan"))
    b.assert_untouched()
