"""miopen_bn.BatchNorm, the layer object: its computations against the
float64 reference, info(), and save/load through safetensors files (also
into the torch module), with bad and truncated files refused clearly."""

from __future__ import annotations

import json

import numpy as np
import pytest

import miopen_bn
from miopen_bn import reference, safetensors_io, tolerances


def _trained(rng, **kwargs):
    layer = miopen_bn.BatchNorm(4, **kwargs)
    layer.weight[...] = rng.uniform(0.5, 1.5, layer.param_shape)
    layer.bias[...] = rng.standard_normal(layer.param_shape)
    shape = (6, 4, 3, 2) if layer.mode == "spatial" else (6, 4) + layer.feature_shape
    steps = []
    for _ in range(2):
        x = rng.standard_normal(shape).astype(np.float32) * 2 + 1
        before = (layer.running_mean.copy(), layer.running_var.copy(), layer.num_batches_tracked)
        y = np.full_like(x, np.nan)
        y[...] = layer.forward_training(x)
        steps.append((x, y, before))
    return layer, steps


@pytest.mark.parametrize("mode,momentum", [("spatial", 0.1), ("spatial", None), ("per_activation", 0.2)])
def test_layer_trains_infers_and_differentiates_like_the_reference(rng, mode, momentum):
    feature = (3, 2) if mode == "per_activation" else ()
    layer, steps = _trained(rng, mode=mode, momentum=momentum, feature_shape=feature)
    x, y, (mean0, var0, count0) = steps[-1]
    factor = 1.0 / (count0 + 1) if momentum is None else momentum
    want = reference.batchnorm_forward_training(x, layer.weight, layer.bias, mode=mode, exp_avg_factor=factor,
                                                running_mean=mean0, running_var=var0)
    tolerances.check(y, want["y"], "float32", "elementwise", "y")
    tolerances.check(layer.running_var, want["running_var"], "float32", "reduction", "running_var")
    tolerances.check(layer.saved_inv_std, want["saved_inv_std"], "float32", "reduction", "saved_inv_std")
    dy = rng.standard_normal(x.shape).astype(np.float32)
    dx = layer.backward(x, dy)
    grads = reference.batchnorm_backward(x, dy, layer.weight, saved_mean=want["saved_mean"],
                                         saved_inv_std=want["saved_inv_std"], mode=mode)
    tolerances.check(dx, grads["dx"], "float32", "elementwise", "dx")
    tolerances.check(layer.grad_weight, grads["dscale"], "float32", "reduction", "dweight")
    got = layer.forward_inference(x)
    want = reference.batchnorm_forward_inference(x, layer.weight, layer.bias, layer.running_mean,
                                                 layer.running_var, mode=mode)
    tolerances.check(got, want, "float32", "elementwise", "inference y")


def test_info_is_json_and_save_load_round_trips(rng, tmp_path):
    layer, _ = _trained(rng, momentum=None, layout="NHWC")
    info = json.loads(json.dumps(layer.info()))
    assert info["config"]["layout"] == "NHWC" and info["config"]["momentum"] is None
    assert info["num_batches_tracked"] == 2
    assert np.allclose(info["tensors"]["running_var"], layer.running_var)
    path = tmp_path / "bn.safetensors"
    layer.save(path)
    loaded = miopen_bn.BatchNorm.load(path)
    assert loaded.config() == layer.config() and loaded.num_batches_tracked == 2
    for name in ("weight", "bias", "running_mean", "running_var", "saved_mean", "saved_inv_std"):
        assert np.array_equal(getattr(loaded, name), getattr(layer, name)), name
    x = rng.standard_normal((2, 4, 3, 3)).astype(np.float32)
    assert np.array_equal(loaded.forward_inference(x), layer.forward_inference(x))


def test_bfloat16_parameters_round_trip(rng, tmp_path):
    layer = miopen_bn.BatchNorm(3, dtype="bfloat16", param_dtype="bfloat16")
    layer.forward_training(rng.standard_normal((4, 3, 2, 2)).astype(miopen_bn.dtypes.bfloat16))
    layer.save(tmp_path / "b.safetensors")
    loaded = miopen_bn.BatchNorm.load(tmp_path / "b.safetensors")
    assert loaded.running_mean.dtype == miopen_bn.dtypes.bfloat16
    assert np.array_equal(loaded.running_mean.view(np.uint16), layer.running_mean.view(np.uint16))


def test_file_loads_into_the_torch_module(rng, tmp_path):
    torch = pytest.importorskip("torch")
    import miopen_bn.torch as mbt

    layer, _ = _trained(rng, momentum=0.3, epsilon=1e-3)
    layer.save(tmp_path / "bn.safetensors")
    module = mbt.load_layer(tmp_path / "bn.safetensors")
    assert type(module) is mbt.BatchNorm2d and module.eps == 1e-3 and module.momentum == 0.3
    assert int(module.num_batches_tracked) == 2
    assert np.array_equal(module.running_var.numpy(), layer.running_var)
    x = rng.standard_normal((2, 4, 3, 3)).astype(np.float32)
    module.eval()
    with torch.no_grad():
        got = module(torch.from_numpy(x)).numpy()
    assert np.allclose(got, layer.forward_inference(x), rtol=1e-6, atol=1e-6)


def _corrupt(path, raw: bytes):
    path.write_bytes(raw)
    return path


def test_bad_and_truncated_files_raise_clear_errors(rng, tmp_path):
    layer, _ = _trained(rng)
    good = tmp_path / "good.safetensors"
    layer.save(good)
    raw = good.read_bytes()
    length = int.from_bytes(raw[:8], "little")
    cases = {
        "fewer than the 8": raw[:5],
        "truncated": raw[:-3],
        "not JSON": raw[:8] + b"{" * length + raw[8 + length:],
        "bytes follow the last tensor": raw + b"\0" * 4,
    }
    for why, content in cases.items():
        with pytest.raises(safetensors_io.SafetensorsError, match=why):
            miopen_bn.BatchNorm.load(_corrupt(tmp_path / "bad.safetensors", content))
    header = json.loads(raw[8:8 + length])
    header["weight"]["data_offsets"][1] += 4
    text = json.dumps(header).encode()
    with pytest.raises(safetensors_io.SafetensorsError, match="weight"):
        miopen_bn.BatchNorm.load(_corrupt(tmp_path / "bad.safetensors",
                                          len(text).to_bytes(8, "little") + text + raw[8 + length:]))
    plain = tmp_path / "plain.safetensors"
    safetensors_io.save(plain, {"weight": np.ones(4, np.float32)})
    with pytest.raises(ValueError, match="not a miopen_bn.BatchNorm file"):
        miopen_bn.BatchNorm.load(plain)


def test_writer_matches_the_format_other_readers_expect(tmp_path):
    safetensors = pytest.importorskip("safetensors.numpy")
    path = tmp_path / "t.safetensors"
    safetensors_io.save(path, {"a": np.arange(3, dtype=np.float32), "b": np.eye(2)}, {"k": "v"})
    loaded = safetensors.load_file(str(path))
    assert np.array_equal(loaded["a"], np.arange(3, dtype=np.float32)) and np.array_equal(loaded["b"], np.eye(2))
