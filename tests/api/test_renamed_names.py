"""Names the Python API replaced still work, with a DeprecationWarning that
points at the caller: ``saved_inv_var`` (the inverse std under MIOpen's
"inverse variance") as a keyword of the batch-norm functions and of the
reference, as the layer's attribute, as the reference's result key and as
the tensor name in layer files written before the rename."""

from __future__ import annotations

import numpy as np
import pytest

import miopen_bn
from miopen_bn import reference, safetensors_io
from miopen_bn.tolerances import check

SHAPE = (4, 3, 5, 2)


def _data(rng):
    x = rng.standard_normal(SHAPE).astype(np.float32) * 2 + 1
    return x, rng.uniform(0.5, 1.5, 3).astype(np.float32), rng.standard_normal(3).astype(np.float32)


def test_training_writes_the_inverse_std_given_under_its_old_name(rng, cpu_handle):
    x, scale, bias = _data(rng)
    mean, inv_std = np.full(3, np.nan, np.float32), np.full(3, np.nan, np.float32)
    with pytest.deprecated_call(match="'saved_inv_var' is deprecated, use 'saved_inv_std'") as record:
        _, got_mean, got_inv_std = miopen_bn.batchnorm_forward_training(
            x, scale, bias, saved_mean=mean, saved_inv_var=inv_std, handle=cpu_handle)
    assert record[0].filename == __file__
    assert got_inv_std is inv_std and got_mean is mean
    want = reference.batchnorm_forward_training(x, scale, bias)
    check(inv_std, want["saved_inv_std"].reshape(3), "float32", "reduction", "saved_inv_std")


def test_backward_reads_the_inverse_std_given_under_its_old_name(rng, cpu_handle):
    x, scale, _ = _data(rng)
    dy = rng.standard_normal(SHAPE).astype(np.float32)
    _, mean, inv_std = miopen_bn.batchnorm_forward_training(x, scale, np.zeros(3, np.float32), handle=cpu_handle)
    new = miopen_bn.batchnorm_backward(x, dy, scale, saved_mean=mean, saved_inv_std=inv_std, handle=cpu_handle)
    dx = np.full_like(x, np.nan)
    with pytest.deprecated_call() as record:
        old = miopen_bn.batchnorm_backward(x, dy, scale, saved_mean=mean, saved_inv_var=inv_std, dx=dx,
                                           handle=cpu_handle)
    assert record[0].filename == __file__
    for got, want in zip(old, new):
        assert np.array_equal(got, want)
    with pytest.deprecated_call() as record:
        grads = reference.batchnorm_backward(x, dy, scale, saved_mean=mean, saved_inv_var=inv_std)
    assert record[0].filename == __file__
    check(dx, grads["dx"], "float32", "elementwise", "dx")


@pytest.mark.parametrize("function", [miopen_bn.batchnorm_forward_training, miopen_bn.batchnorm_backward])
def test_both_names_or_an_unknown_keyword_are_type_errors(rng, function):
    x, scale, bias = _data(rng)
    stats = np.ones(3, np.float32)
    first = (x, scale, bias) if function is miopen_bn.batchnorm_forward_training else (x, x, scale)
    with pytest.raises(TypeError, match="'saved_inv_std' and its old name 'saved_inv_var'"):
        function(*first, saved_mean=stats, saved_inv_std=stats, saved_inv_var=stats)
    with pytest.raises(TypeError, match="unexpected keyword argument 'saved_inv_variance'"):
        function(*first, saved_mean=stats, saved_inv_variance=stats)


def test_reference_result_key_and_layer_attribute_keep_their_old_names(rng):
    x, scale, bias = _data(rng)
    out = reference.batchnorm_forward_training(x, scale, bias)
    with pytest.deprecated_call() as record:
        old = out["saved_inv_var"]
    assert record[0].filename == __file__
    assert old is out["saved_inv_std"]
    with pytest.raises(KeyError):
        out["saved_inv"]
    layer = miopen_bn.BatchNorm(3)
    layer.forward_training(x)
    with pytest.deprecated_call() as record:
        assert layer.saved_inv_var is layer.saved_inv_std
    assert record[0].filename == __file__
    replacement = np.full(3, 2.0, np.float32)
    with pytest.deprecated_call():
        layer.saved_inv_var = replacement
    assert layer.saved_inv_std is replacement


def test_a_layer_file_that_names_the_inverse_std_saved_inv_var_loads(rng, tmp_path):
    x, _, _ = _data(rng)
    layer = miopen_bn.BatchNorm(3)
    layer.forward_training(x)
    path = tmp_path / "new.safetensors"
    layer.save(path)
    tensors, metadata = safetensors_io.load(path)
    assert "saved_inv_std" in tensors and "saved_inv_var" not in tensors
    tensors["saved_inv_var"] = tensors.pop("saved_inv_std")
    old_path = tmp_path / "old.safetensors"
    safetensors_io.save(old_path, tensors, metadata)
    loaded = miopen_bn.BatchNorm.load(old_path)
    assert np.array_equal(loaded.saved_inv_std, layer.saved_inv_std)
    assert np.array_equal(loaded.saved_mean, layer.saved_mean)
