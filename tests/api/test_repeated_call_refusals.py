"""Repeated calls check nothing in Python (prepared.py's plans, the torch
layer's cached descriptors): the library alone refuses what is wrong with
them.  Each test makes a good first call, then repeats it with a bad
argument of the same layout and asserts the library's exception and that
no memory was written.
"""

from __future__ import annotations

import numpy as np
import pytest

import miopen_bn
from miopen_bn import batchnorm, groupnorm, prepared

SHAPE = (4, 6, 5, 2)
COUNT = int(np.prod(SHAPE))


@pytest.fixture(autouse=True)
def no_plans():
    prepared._plans().clear()
    yield
    prepared._plans().clear()


def _arrays(rng, family):
    """x, dy, scale, bias, mean, var (positive) as NumPy arrays or torch tensors."""
    values = [rng.standard_normal(SHAPE), rng.standard_normal(SHAPE), rng.uniform(0.5, 2, 6),
              rng.uniform(-1, 1, 6), rng.uniform(-1, 1, 6), rng.uniform(0.5, 2, 6)]
    arrays = [v.astype(np.float32) for v in values]
    if family == "torch":
        torch = pytest.importorskip("torch")
        arrays = [torch.from_numpy(a) for a in arrays]
    return arrays


def _overlapping(rng, family, length, shape):
    """Two views of one buffer of ``length + 1`` values, one element apart,
    each laid out like a new array of ``shape``; and the buffer."""
    buffer = rng.standard_normal(length + 1).astype(np.float32)
    if family == "torch":
        buffer = pytest.importorskip("torch").from_numpy(buffer)
    return buffer[:length].reshape(shape), buffer[1:].reshape(shape), buffer


def _values(array) -> np.ndarray:
    return array.copy() if isinstance(array, np.ndarray) else array.numpy().copy()


def _gn_stats(x, scale, bias):
    _, mean, rstd = miopen_bn.groupnorm_forward(x, 3, scale, bias)
    return mean, rstd


# name: (the call with the input and the output that overlap, the module and
# first-call function that must not run again, the overlapping pair's length
# and shape).
CALLS = {
    "inference y over x": (
        lambda a, inp, out: miopen_bn.batchnorm_forward_inference(inp, *a[2:6], y=out),
        batchnorm, "_adapted_inference", COUNT, SHAPE),
    "training y over x": (
        lambda a, inp, out: miopen_bn.batchnorm_forward_training(inp, a[2], a[3], y=out),
        batchnorm, "_adapted_training", COUNT, SHAPE),
    "backward dx over dy": (
        lambda a, inp, out: miopen_bn.batchnorm_backward(a[0], inp, a[2], dx=out),
        batchnorm, "_adapted_backward", COUNT, SHAPE),
    "backward dscale over scale": (
        lambda a, inp, out: miopen_bn.batchnorm_backward(a[0], a[1], inp, dscale=out),
        batchnorm, "_adapted_backward", 6, (6,)),
    "group norm y over x": (
        lambda a, inp, out: miopen_bn.groupnorm_forward(inp, 3, a[2], a[3], y=out),
        groupnorm, "_adapted_forward", COUNT, SHAPE),
    "group norm backward dx over dy": (
        lambda a, inp, out: miopen_bn.groupnorm_backward(a[0], inp, 3, a[2], *_gn_stats(a[0], a[2], a[3]), dx=out),
        groupnorm, "_adapted_backward", COUNT, SHAPE),
}


@pytest.mark.parametrize("family", ["numpy", "torch"])
@pytest.mark.parametrize("name", list(CALLS))
def test_a_planned_call_with_overlapping_output_is_refused_by_the_library(rng, monkeypatch, family, name):
    call, module, adapted, length, shape = CALLS[name]
    arrays = _arrays(rng, family)
    first_input, first_output, _ = _overlapping(rng, family, length, shape)
    first_output = first_output.copy() if family == "numpy" else first_output.clone()  # apart from the input
    call(arrays, first_input, first_output)
    planned = len(prepared._plans())
    monkeypatch.setattr(module, adapted, lambda *a: pytest.fail("the first-call path ran again"))
    inp, out, buffer = _overlapping(rng, family, length, shape)
    before = _values(buffer)
    with pytest.raises(miopen_bn.MIOpenBadParmError, match="overlaps"):
        call(arrays, inp, out)
    np.testing.assert_array_equal(_values(buffer), before)
    assert len(prepared._plans()) == planned


def test_the_torch_layer_refuses_again_through_its_cached_descriptors():
    """The torch layer caches descriptors by layout: a bad argument is
    refused by the library on every call, not only on the first, and what
    was refused writes nothing (the running statistics here)."""
    torch = pytest.importorskip("torch")
    import miopen_bn.torch as mbt

    x = torch.randn(SHAPE)
    running_mean, running_var = torch.zeros(6), torch.ones(6)
    for weight in (torch.ones(7), torch.ones(7)):  # 7 values for 6 channels
        with pytest.raises(miopen_bn.MIOpenBadParmError):
            mbt.batch_norm(x, running_mean, running_var, weight, torch.zeros(7), True)
        assert torch.equal(running_mean, torch.zeros(6)) and torch.equal(running_var, torch.ones(6))
    for _ in range(2):  # groups that do not divide the channels
        with pytest.raises(miopen_bn.MIOpenBadParmError):
            mbt.group_norm(x, 4, torch.ones(6), torch.zeros(6))
