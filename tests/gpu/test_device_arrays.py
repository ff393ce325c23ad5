"""Device arrays reach the GPU backend through every adapter: DLPack (PyTorch),
__cuda_array_interface__ alone, CuPy, and RawTensor device pointers.

All tests carry the ``gpu`` marker: they skip without a GPU build and a device
(conftest.py), and without PyTorch CUDA."""

from __future__ import annotations

import numpy as np
import pytest

import miopen_bn
from miopen_bn import reference
from miopen_bn.tolerances import check

pytestmark = pytest.mark.gpu


@pytest.fixture
def torch():
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("PyTorch has no CUDA/ROCm device")
    return torch


@pytest.fixture
def gpu_handle():
    with miopen_bn.Handle("gpu") as handle:
        yield handle


class InterfaceOnly:
    """A torch CUDA tensor seen only through __cuda_array_interface__ (as
    Numba's or hip-python's device arrays are)."""

    def __init__(self, tensor):
        self.tensor = tensor
        self.__cuda_array_interface__ = tensor.__cuda_array_interface__


def problem(torch, rng, shape=(8, 6, 7, 5), dtype="float32", channels_last=False):
    x = rng.normal(0.5, 2.0, shape)
    t_x = torch.tensor(x, dtype=getattr(torch, dtype), device="cuda")
    if channels_last:
        t_x = t_x.contiguous(memory_format=torch.channels_last)
    scale = torch.tensor(rng.uniform(0.5, 2, shape[1]), dtype=torch.float32, device="cuda")
    bias = torch.tensor(rng.uniform(-1, 1, shape[1]), dtype=torch.float32, device="cuda")
    return t_x, scale, bias


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16", "float64"])
@pytest.mark.parametrize("channels_last", [False, True])
def test_torch_tensors_with_the_default_gpu_handle(torch, rng, dtype, channels_last):
    x, scale, bias = problem(torch, rng, dtype=dtype, channels_last=channels_last)
    y = torch.full_like(x, float("nan"))
    out, mean, inv_std = miopen_bn.batchnorm_forward_training(x, scale, bias, y=y)
    torch.cuda.synchronize()
    assert out is y and mean.is_cuda
    x_host = x.cpu().double().numpy()
    expected = reference.batchnorm_forward_training(x_host, scale.cpu().numpy(), bias.cpu().numpy())
    check(y.cpu().double().numpy(), expected["y"], dtype, "elementwise", "y")
    check(inv_std.cpu().numpy(), expected["saved_inv_std"], "float32", "reduction", "saved_inv_std")
    dy = torch.randn_like(x)
    dx, dscale, _ = miopen_bn.batchnorm_backward(x, dy, scale, saved_mean=mean, saved_inv_std=inv_std)
    torch.cuda.synchronize()
    assert dx.stride() == x.stride()
    grads = reference.batchnorm_backward(
        x_host,
        dy.cpu().double().numpy(),
        scale.cpu().numpy(),
        saved_mean=mean.cpu().numpy(),
        saved_inv_std=inv_std.cpu().numpy(),
    )
    check(dx.cpu().double().numpy(), grads["dx"], dtype, "elementwise", "dx")
    check(dscale.cpu().numpy(), grads["dscale"], "float32", "reduction", "dscale")


def test_cuda_array_interface_only(torch, rng, gpu_handle):
    x, scale, bias = problem(torch, rng)
    y = torch.full_like(x, float("nan"))
    mean, var = torch.zeros_like(scale), torch.ones_like(scale)
    out = miopen_bn.batchnorm_forward_inference(
        InterfaceOnly(x),
        InterfaceOnly(scale),
        InterfaceOnly(bias),
        InterfaceOnly(mean),
        InterfaceOnly(var),
        y=InterfaceOnly(y),
        handle=gpu_handle,
    )
    torch.cuda.synchronize()
    assert isinstance(out, InterfaceOnly)
    expected = reference.batchnorm_forward_inference(
        x.cpu().numpy(), scale.cpu().numpy(), bias.cpu().numpy(), mean.cpu().numpy(), var.cpu().numpy()
    )
    check(y.cpu().numpy(), expected, "float32", "elementwise", "y")


def test_raw_device_pointers(torch, rng, gpu_handle):
    x, scale, bias = problem(torch, rng)
    y = torch.full_like(x, float("nan"))

    def raw(t):
        return miopen_bn.RawTensor(t.data_ptr(), shape=tuple(t.shape), dtype="float32", strides=t.stride())

    miopen_bn.batchnorm_forward_training(
        raw(x), raw(scale), raw(bias), y=raw(y), save_stats=False, handle=gpu_handle
    )
    torch.cuda.synchronize()
    expected = reference.batchnorm_forward_training(x.cpu().numpy(), scale.cpu().numpy(), bias.cpu().numpy())
    check(y.cpu().numpy(), expected["y"], "float32", "elementwise", "y")


def test_work_goes_to_the_handle_stream(torch, rng):
    x, scale, bias = problem(torch, rng, shape=(32, 16, 32, 32))
    stream = torch.cuda.Stream()
    with miopen_bn.Handle("gpu", stream=stream) as handle:
        assert handle.stream == stream.cuda_stream
        y, _, _ = miopen_bn.batchnorm_forward_training(x, scale, bias, handle=handle)
        stream.synchronize()
    expected = reference.batchnorm_forward_training(x.cpu().numpy(), scale.cpu().numpy(), bias.cpu().numpy())
    check(y.cpu().numpy(), expected["y"], "float32", "elementwise", "y")


def test_host_arrays_on_a_gpu_handle_are_refused(gpu_handle):
    x = np.ones((4, 3, 2, 2), np.float32)
    with pytest.raises(ValueError, match="x is host memory but the handle runs on the GPU"):
        miopen_bn.batchnorm_forward_training(
            x, np.ones(3, np.float32), np.zeros(3, np.float32), handle=gpu_handle
        )


def test_cupy_arrays(rng, gpu_handle):
    cupy = pytest.importorskip("cupy")
    x = cupy.asarray(rng.normal(0.5, 2.0, (8, 6, 7, 5)).astype(np.float32))
    scale, bias = cupy.ones(6, cupy.float32), cupy.zeros(6, cupy.float32)
    y, mean, inv_std = miopen_bn.batchnorm_forward_training(x, scale, bias, handle=gpu_handle)
    cupy.cuda.Device().synchronize()
    assert isinstance(y, cupy.ndarray)
    expected = reference.batchnorm_forward_training(cupy.asnumpy(x), np.ones(6), np.zeros(6))
    check(cupy.asnumpy(y), expected["y"], "float32", "elementwise", "y")


def test_repeated_calls_on_cuda_tensors_follow_torch_streams(torch, rng, monkeypatch):
    """A second call with the same layout takes its plan (prepared.py) on
    torch's current stream; from a side stream, with a handle on another
    stream, it takes the first-call path, whose DLPack export makes the
    handle's stream wait for the side stream's work (x written there)."""
    from miopen_bn import batchnorm, prepared

    first_calls = []
    original = batchnorm._adapted_inference
    monkeypatch.setattr(batchnorm, "_adapted_inference", lambda *a: first_calls.append(1) or original(*a))
    x, scale, bias = problem(torch, rng, shape=(32, 16, 64, 64))
    prepared._plans().clear()
    handle_stream = torch.cuda.Stream()
    side = torch.cuda.Stream()
    with miopen_bn.Handle("gpu", stream=handle_stream) as handle:
        with torch.cuda.stream(handle_stream):
            for _ in range(2):
                y = miopen_bn.batchnorm_forward_inference(x, scale, bias, handle=handle)
        assert len(first_calls) == 1  # the second call was planned
        with torch.cuda.stream(side):
            torch.cuda._sleep(50_000_000)  # the side stream is busy when x2 is written on it
            x2 = x * 2
            y2 = miopen_bn.batchnorm_forward_inference(x2, scale, bias, handle=handle)
        assert len(first_calls) == 2  # another stream than the handle's: not planned
        handle_stream.synchronize()
    torch.cuda.synchronize()
    scale_np, bias_np = scale.cpu().numpy(), bias.cpu().numpy()
    for out, data in ((y, x), (y2, x2)):
        expected = reference.batchnorm_forward_inference(data.cpu().numpy(), scale_np, bias_np)
        check(out.cpu().numpy(), expected, "float32", "elementwise", "y")


@pytest.mark.parametrize("channels_last", [False, True])
def test_repeated_calls_make_cuda_outputs_like_the_first(torch, rng, channels_last):
    """A planned call on CUDA tensors makes its outputs without torch's
    dispatcher where torch allows, its per-channel (and group norm's (N, G))
    outputs as rows of one buffer (arrays.joint_allocators): each laid out
    as the first call's, apart from the others, with the same values, and
    usable as the next call's inputs."""
    from miopen_bn import prepared

    prepared._plans().clear()
    x, scale, bias = problem(torch, rng, channels_last=channels_last)
    dy = torch.randn_like(x)
    mean, var = torch.zeros_like(scale), torch.ones_like(scale)

    def calls():
        y, saved_mean, saved_inv_std = miopen_bn.batchnorm_forward_training(x, scale, bias)
        grads = miopen_bn.batchnorm_backward(x, dy, scale, saved_mean=saved_mean, saved_inv_std=saved_inv_std)
        gy, gn_mean, gn_rstd = miopen_bn.groupnorm_forward(x, 3, scale, bias)
        gn_grads = miopen_bn.groupnorm_backward(x, dy, 3, scale, gn_mean, gn_rstd)
        inferred = miopen_bn.batchnorm_forward_inference(x, scale, bias, mean, var)
        return (y, saved_mean, saved_inv_std, *grads, gy, gn_mean, gn_rstd, *gn_grads, inferred)

    first, second = calls(), calls()
    torch.cuda.synchronize()
    for a, b in zip(first, second):
        assert (a.dtype, a.shape, a.stride(), a.device) == (b.dtype, b.shape, b.stride(), b.device)
        assert a.data_ptr() != b.data_ptr()
        assert torch.equal(a, b)
    for pair in ((1, 2), (4, 5), (7, 8), (10, 11)):  # saved stats, dscale/dbias, mean/rstd, dweight/dbias
        one, other = (second[i] for i in pair)
        assert one.untyped_storage().data_ptr() == other.untyped_storage().data_ptr()
        assert abs(one.data_ptr() - other.data_ptr()) >= one.numel() * one.element_size()
    expected = reference.batchnorm_backward(x.cpu().double().numpy(), dy.cpu().double().numpy(),
                                            scale.cpu().double().numpy())
    check(second[3].cpu().numpy(), expected["dx"], "float32", "elementwise", "dx")
    check(second[4].cpu().numpy(), expected["dscale"], "float32", "reduction", "dscale")
