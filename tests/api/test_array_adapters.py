"""Array adapters: NumPy views of any stride, DLPack, __cuda_array_interface__,
and outputs allocated in the caller's array library."""

from __future__ import annotations

import numpy as np
import pytest

import miopen_bn
from miopen_bn import arrays, reference
from miopen_bn.tolerances import check


def problem(rng, shape=(4, 3, 6, 5), dtype=np.float32):
    x = rng.normal(1.0, 2.0, shape).astype(dtype)
    scale = rng.uniform(0.5, 2, shape[1]).astype(np.float32)
    bias = rng.uniform(-1, 1, shape[1]).astype(np.float32)
    return x, scale, bias


def test_nhwc_transposed_view_stays_nhwc(rng):
    x, scale, bias = problem(rng)
    x_nhwc = np.ascontiguousarray(x.transpose(0, 2, 3, 1)).transpose(0, 3, 1, 2)
    y, _, _ = miopen_bn.batchnorm_forward_training(x_nhwc, scale, bias)
    assert y.strides == x_nhwc.strides
    check(y, reference.batchnorm_forward_training(x, scale, bias)["y"], "float32", "elementwise", "y")


@pytest.mark.parametrize(
    "make_view",
    [
        lambda x: x[:, :, ::-1],  # negative stride
        lambda x: x[::2],  # gaps between samples
        lambda x: np.asfortranarray(x),  # reversed axis order
        lambda x: np.broadcast_to(x[:1], x.shape),  # zero stride
    ],
    ids=["negative", "gapped", "fortran", "broadcast"],
)
def test_inputs_of_any_strides(rng, make_view):
    x, scale, bias = problem(rng)
    view = make_view(x)
    y, _, _ = miopen_bn.batchnorm_forward_training(view, scale, bias)
    expected = reference.batchnorm_forward_training(view, scale, bias)["y"]
    if np.ptp(view[:, 0]) == 0:  # broadcast: every sample equal, y = bias
        expected = np.broadcast_to(bias.reshape(1, 3, 1, 1), view.shape)
    check(y, expected, "float32", "elementwise", "y")


def test_misaligned_input_is_copied(rng):
    x, scale, bias = problem(rng)
    raw = np.zeros(x.nbytes + 1, np.uint8)
    misaligned = raw[1:].view(np.float32).reshape(x.shape)
    misaligned[...] = x
    y, _, _ = miopen_bn.batchnorm_forward_training(misaligned, scale, bias)
    check(y, reference.batchnorm_forward_training(x, scale, bias)["y"], "float32", "elementwise", "y")


def test_broadcast_parameters(rng):
    x, _, _ = problem(rng)
    scale = np.broadcast_to(np.float32(1.5), (3,))
    bias = np.broadcast_to(np.float32(0.25), (1, 3, 1, 1))
    y, mean, _ = miopen_bn.batchnorm_forward_training(x, scale, bias)
    assert mean.shape == (3,)
    check(y, reference.batchnorm_forward_training(x, scale, bias)["y"], "float32", "elementwise", "y")


@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float64"])
def test_other_dtypes_via_numpy(rng, dtype):
    np_dtype = miopen_bn.dtypes.NUMPY_DTYPE[dtype]
    x, scale, bias = problem(rng, dtype=np_dtype)
    y, mean, inv_std = miopen_bn.batchnorm_forward_training(x, scale, bias)
    assert y.dtype == np_dtype and mean.dtype == np.float32
    check(y, reference.batchnorm_forward_training(x, scale, bias)["y"], dtype, "elementwise", "y")


class DLPackOnly:
    """Exposes a NumPy array through DLPack alone (no NumPy type, no CAI)."""

    def __init__(self, array):
        self._array = array

    def __dlpack__(self, stream=None):
        return self._array.__dlpack__()

    def __dlpack_device__(self):
        return self._array.__dlpack_device__()


def test_dlpack_view_reads_shape_strides_and_offset(rng):
    base = rng.standard_normal((6, 5, 4)).astype(np.float32)
    view = base[1:, :, ::2].transpose(0, 2, 1)
    parsed = arrays.view_of(DLPackOnly(view), "x")
    assert parsed.ptr == view.__array_interface__["data"][0]
    assert parsed.shape == view.shape
    assert parsed.strides == tuple(s // 4 for s in view.strides)
    assert parsed.dtype == "float32" and parsed.location == arrays.HOST


def test_dlpack_inputs_with_given_outputs(rng):
    x, scale, bias = problem(rng)
    y = np.full_like(x, np.nan)
    out, mean, _ = miopen_bn.batchnorm_forward_training(
        DLPackOnly(x), DLPackOnly(scale), DLPackOnly(bias), y=DLPackOnly(y), save_stats=False
    )
    assert isinstance(out, DLPackOnly) and mean is None
    check(y, reference.batchnorm_forward_training(x, scale, bias)["y"], "float32", "elementwise", "y")


def test_unallocatable_output_asks_for_it(rng):
    x, scale, bias = problem(rng)
    with pytest.raises(ValueError, match="pass y= explicitly"):
        miopen_bn.batchnorm_forward_training(DLPackOnly(x), scale, bias)


def test_cuda_array_interface_parsing():
    class Device:
        __cuda_array_interface__ = {
            "shape": (2, 3, 4),
            "typestr": "<f2",
            "data": (0x10000, True),
            "strides": (2, 48, 12),
            "version": 3,
        }

    view = arrays.view_of(Device(), "x")
    assert view.location == arrays.DEVICE and view.dtype == "float16"
    assert view.strides == (1, 24, 6) and view.shape == (2, 3, 4) and not view.writable
    with pytest.raises(TypeError, match="not supported"):
        Device.__cuda_array_interface__ = dict(Device.__cuda_array_interface__, typestr="<i4")
        arrays.view_of(Device(), "x")


def test_raw_tensor_belongs_to_whatever_handle(rng, cpu_handle):
    x, scale, bias = problem(rng)
    raw = miopen_bn.RawTensor(x.ctypes.data, shape=x.shape, dtype="float32")
    with pytest.raises(ValueError, match="y was not given"):
        miopen_bn.batchnorm_forward_training(raw, scale, bias, handle=cpu_handle)


# --- PyTorch CPU tensors travel through DLPack --------------------------------


@pytest.fixture
def torch():
    return pytest.importorskip("torch")


@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "float16"])
def test_torch_cpu_tensors(rng, torch, dtype):
    x, scale, bias = problem(rng)
    tx = torch.from_numpy(x).to(getattr(torch, dtype)).contiguous(memory_format=torch.channels_last)
    y, mean, inv_std = miopen_bn.batchnorm_forward_training(
        tx, torch.from_numpy(scale), torch.from_numpy(bias)
    )
    assert isinstance(y, torch.Tensor) and y.dtype == tx.dtype and y.stride() == tx.stride()
    assert isinstance(mean, torch.Tensor) and mean.dtype == torch.float32
    expected = reference.batchnorm_forward_training(tx.float().numpy(), scale, bias)
    check(y.float().numpy(), expected["y"], dtype, "elementwise", "y")
    check(inv_std.numpy(), expected["saved_inv_std"], "float32", "reduction", "inv std")
    dx, dscale, dbias = miopen_bn.batchnorm_backward(
        tx, torch.ones_like(tx), torch.from_numpy(scale), saved_mean=mean, saved_inv_std=inv_std
    )
    assert isinstance(dx, torch.Tensor) and dx.stride() == tx.stride()
    grads = reference.batchnorm_backward(
        tx.float().numpy(), np.ones(x.shape), scale, saved_mean=mean.numpy(), saved_inv_std=inv_std.numpy()
    )
    check(dbias.numpy(), grads["dbias"], "float32", "reduction", "dbias")


def test_torch_matches_its_own_batch_norm(rng, torch):
    """An independent oracle for the conventions: torch's functional batch norm."""
    x, scale, bias = problem(rng)
    running_mean, running_var = np.zeros(3, np.float32), np.ones(3, np.float32)
    y, _, _ = miopen_bn.batchnorm_forward_training(
        x,
        scale,
        bias,
        running_mean=running_mean,
        running_var=running_var,
        exp_avg_factor=0.1,
        save_stats=False,
    )
    t_mean, t_var = torch.zeros(3), torch.ones(3)
    expected = torch.nn.functional.batch_norm(
        torch.from_numpy(x),
        t_mean,
        t_var,
        torch.from_numpy(scale),
        torch.from_numpy(bias),
        training=True,
        momentum=0.1,
        eps=1e-5,
    )
    check(y, expected.double().numpy(), "float32", "elementwise", "y")
    check(running_mean, t_mean.double().numpy(), "float32", "reduction", "running mean")
    check(running_var, t_var.double().numpy(), "float32", "reduction", "running var (unbiased)")
