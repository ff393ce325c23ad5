"""The Python API on a GPU handle with torch CUDA tensors.

Every entry point is checked against the float64 reference on fresh random
data, with NaN-poisoned outputs: both modes, fp32/fp16/bf16/fp64 inputs with
fp32 parameters, NCHW / NHWC (channels_last) / a strided view, each statistics
pattern, alpha/beta blending, in-place calls, docs/numerics.md#shapes, every op on
float16 tensors of more than 2^31 elements, host arrays refused, agreement
with PyTorch's cuDNN batch norm, calls on non-default streams, threads on
their own streams or sharing a handle (bitwise equal to serial runs), and
repeated calls giving the same bits.

The whole module skips when torch, a CUDA device or the library's GPU backend
is missing.
"""
import warnings

import numpy as np
import pytest

torch = pytest.importorskip("torch")
import miopen_bn as mbn  # noqa: E402
from miopen_bn import reference, tolerances  # noqa: E402
from miopen_bn.tolerances import ELEMENTWISE, REDUCTION  # noqa: E402
from support.torch_tensors import (  # noqa: E402
    DEVICE,
    TORCH_DTYPE,
    check,
    generator,
    host64,
    poisoned,
    random_data,
    random_param,
)

pytestmark = pytest.mark.gpu


def _why_no_gpu():
    if not mbn.lib.miopenBNHasGpuSupport():
        return "libmiopen_bn was built without a GPU backend"
    if not torch.cuda.is_available():
        return "torch sees no CUDA device"
    return None


if _why_no_gpu():
    pytest.skip(_why_no_gpu(), allow_module_level=True)

F = torch.nn.functional
EPS = 1e-5
FACTOR = 0.1
MODES = ("spatial", "per_activation")
LAYOUTS = ("nchw", "nhwc", "strided")
# Small, odd lengths: no power-of-two alignment hides an indexing slip.
SHAPE = (5, 6, 7, 9)


@pytest.fixture(scope="module")
def handle():
    with mbn.Handle(backend="gpu") as gpu_handle:
        yield gpu_handle


# --------------------------------------------------------------------------
# Data
# --------------------------------------------------------------------------
def param_shape(shape, mode):
    return (shape[1],) if mode == "spatial" else tuple(shape[1:])


# --------------------------------------------------------------------------
# Forward training
# --------------------------------------------------------------------------
STATS = ("running+saved", "running", "saved", "none")


def run_training(handle, x, mode, stats, seed, alpha=1.0, beta=0.0, y=None):
    pshape = param_shape(x.shape, mode)
    scale = random_param(pshape, seed + 1, 0.5, 1.5)
    bias = random_param(pshape, seed + 2, -0.5, 0.5)
    with_running = stats in ("running+saved", "running")
    running_mean = random_param(pshape, seed + 3, -0.2, 0.2) if with_running else None
    running_var = random_param(pshape, seed + 4, 0.5, 1.5) if with_running else None
    before = (host64(running_mean), host64(running_var)) if with_running else (None, None)
    if y is None:
        y = poisoned(x)
    prior = host64(y) if beta != 0 else None
    x64 = host64(x)
    out, saved_mean, saved_inv_std = mbn.batchnorm_forward_training(
        x, scale, bias, mode=mode, epsilon=EPS, exp_avg_factor=FACTOR,
        running_mean=running_mean, running_var=running_var,
        save_stats=stats in ("running+saved", "saved"), alpha=alpha, beta=beta, y=y,
        handle=handle)
    torch.cuda.synchronize()
    ref = reference.batchnorm_forward_training(
        x64, host64(scale), host64(bias), mode=mode, epsilon=EPS, exp_avg_factor=FACTOR,
        running_mean=before[0], running_var=before[1], alpha=alpha, beta=beta, y_prior=prior)
    assert out.data_ptr() == y.data_ptr()
    check("y", out, ref["y"], ELEMENTWISE)
    if stats in ("running+saved", "saved"):
        check("saved_mean", saved_mean, ref["saved_mean"], REDUCTION)
        check("saved_inv_std", saved_inv_std, ref["saved_inv_std"], REDUCTION)
    else:
        assert saved_mean is None and saved_inv_std is None
    if with_running:
        check("running_mean", running_mean, ref["running_mean"], REDUCTION)
        check("running_var", running_var, ref["running_var"], REDUCTION)
    return out


@pytest.mark.parametrize("stats", STATS)
@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("dtype", list(TORCH_DTYPE))
@pytest.mark.parametrize("mode", MODES)
def test_forward_training(handle, mode, dtype, layout, stats):
    x = random_data(SHAPE, dtype, 11, layout)
    run_training(handle, x, mode, stats, 11)


# --------------------------------------------------------------------------
# Forward inference
# --------------------------------------------------------------------------
def run_inference(handle, x, mode, estimates, seed, alpha=1.0, beta=0.0, y=None, param_dtype=torch.float32):
    """param_dtype: the type of scale, bias and the estimates (MIOpen also
    takes them in x's half type)."""
    pshape = param_shape(x.shape, mode)
    scale = random_param(pshape, seed + 1, 0.5, 1.5).to(param_dtype)
    bias = random_param(pshape, seed + 2, -0.5, 0.5).to(param_dtype)
    mean = random_param(pshape, seed + 3, -2.0, 2.0).to(param_dtype) if estimates else None
    var = random_param(pshape, seed + 4, 0.3, 4.0).to(param_dtype) if estimates else None
    if y is None:
        y = poisoned(x)
    prior = host64(y) if beta != 0 else None
    x64 = host64(x)
    out = mbn.batchnorm_forward_inference(x, scale, bias, mean, var, mode=mode, epsilon=EPS,
                                          alpha=alpha, beta=beta, y=y, handle=handle)
    torch.cuda.synchronize()
    expected = reference.batchnorm_forward_inference(
        x64, host64(scale), host64(bias), None if mean is None else host64(mean),
        None if var is None else host64(var), mode=mode, epsilon=EPS, alpha=alpha, beta=beta,
        y_prior=prior)
    assert out.data_ptr() == y.data_ptr()
    check("y", out, expected, ELEMENTWISE)
    return out


@pytest.mark.parametrize("estimates", (True, False), ids=("estimates", "batch-fallback"))
@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("dtype", list(TORCH_DTYPE))
@pytest.mark.parametrize("mode", MODES)
def test_forward_inference(handle, mode, dtype, layout, estimates):
    x = random_data(SHAPE, dtype, 21, layout)
    run_inference(handle, x, mode, estimates, 21)


# --------------------------------------------------------------------------
# Backward
# --------------------------------------------------------------------------
def saved_statistics(x, mode):
    """Batch mean and inverse std in float32, as training would save them."""
    dims = (0,) if mode == "per_activation" else tuple(d for d in range(x.dim()) if d != 1)
    var, mean = torch.var_mean(x.to(torch.float64), dim=dims, correction=0)
    return mean.to(torch.float32), torch.rsqrt(var + EPS).to(torch.float32)


def run_backward(handle, x, dy, mode, saved, seed, alpha_data=1.0, beta_data=0.0,
                 alpha_param=1.0, beta_param=0.0, dx=None, priors=None):
    pshape = param_shape(x.shape, mode)
    scale = random_param(pshape, seed + 1, 0.5, 1.5)
    saved_mean, saved_inv_std = saved_statistics(x, mode) if saved else (None, None)
    dx = poisoned(dy) if dx is None else dx
    dscale, dbias = (priors if priors is not None
                     else (poisoned(scale), poisoned(scale)))
    prior_dx = host64(dx) if beta_data != 0 else None
    prior_dscale = host64(dscale) if beta_param != 0 else None
    prior_dbias = host64(dbias) if beta_param != 0 else None
    x64, dy64 = host64(x), host64(dy)
    out = mbn.batchnorm_backward(
        x, dy, scale, saved_mean=saved_mean, saved_inv_std=saved_inv_std, mode=mode,
        epsilon=EPS, alpha_data=alpha_data, beta_data=beta_data, alpha_param=alpha_param,
        beta_param=beta_param, dx=dx, dscale=dscale, dbias=dbias, handle=handle)
    torch.cuda.synchronize()
    ref = reference.batchnorm_backward(
        x64, dy64, host64(scale),
        saved_mean=None if saved_mean is None else host64(saved_mean),
        saved_inv_std=None if saved_inv_std is None else host64(saved_inv_std), mode=mode,
        epsilon=EPS, alpha_data=alpha_data, beta_data=beta_data, alpha_param=alpha_param,
        beta_param=beta_param, dx_prior=prior_dx, dscale_prior=prior_dscale,
        dbias_prior=prior_dbias)
    assert out[0].data_ptr() == dx.data_ptr()
    check("dx", out[0], ref["dx"], ELEMENTWISE)
    check("dscale", out[1], ref["dscale"], REDUCTION)
    check("dbias", out[2], ref["dbias"], REDUCTION)
    return out


@pytest.mark.parametrize("saved", (True, False), ids=("saved", "recomputed"))
@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("dtype", list(TORCH_DTYPE))
@pytest.mark.parametrize("mode", MODES)
def test_backward(handle, mode, dtype, layout, saved):
    x = random_data(SHAPE, dtype, 31, layout)
    dy = random_data(SHAPE, dtype, 32, layout)
    run_backward(handle, x, dy, mode, saved, 31)


@pytest.mark.parametrize("dtype", ("fp16", "bf16"))
def test_backward_float32_gradients_of_half_input(handle, dtype):
    """CK's mixed precision: fp16/bf16 x with fp32 dy and dx."""
    x = random_data(SHAPE, dtype, 35, "nhwc")
    dy = random_data(SHAPE, "fp32", 36, "nchw")
    run_backward(handle, x, dy, "spatial", True, 35)


def test_mixed_layouts_in_one_call(handle):
    """x NHWC, y NCHW; x strided, dy NHWC, dx NCHW."""
    x = random_data(SHAPE, "fp32", 37, "nhwc")
    run_training(handle, x, "spatial", "running+saved", 37,
                 y=poisoned(x.contiguous()))
    xs = random_data(SHAPE, "fp32", 38, "strided")
    dy = random_data(SHAPE, "fp32", 39, "nhwc")
    run_backward(handle, xs, dy, "spatial", True, 38, dx=poisoned(dy.contiguous()))


# --------------------------------------------------------------------------
# Ranks 2, 3 and 5
# --------------------------------------------------------------------------
@pytest.mark.parametrize("layout", ("nchw", "nhwc"))
@pytest.mark.parametrize("shape", [(13, 79), (3, 4, 11), (2, 3, 4, 5, 6)],
                         ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("mode", MODES)
def test_other_ranks(handle, shape, mode, layout):
    if len(shape) == 2 and layout == "nhwc":
        pytest.skip("a rank-2 tensor has one layout")
    x = random_data(shape, "fp32", 41, layout)
    dy = random_data(shape, "fp32", 42, layout)
    run_training(handle, x, mode, "running+saved", 41)
    run_inference(handle, x, mode, True, 41)
    run_backward(handle, x, dy, mode, True, 41)


# --------------------------------------------------------------------------
# alpha / beta, in-place, allocation of outputs
# --------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", ("fp32", "fp16"))
def test_alpha_beta_blend_with_prior_outputs(handle, dtype):
    x = random_data(SHAPE, dtype, 51, "nhwc")
    dy = random_data(SHAPE, dtype, 52, "nhwc")
    prior = random_data(SHAPE, dtype, 53, "nhwc")
    run_training(handle, x, "spatial", "running+saved", 51, alpha=0.75, beta=0.5,
                 y=prior.clone())
    run_inference(handle, x, "spatial", True, 51, alpha=1.5, beta=-0.25,
                  y=prior.clone())
    priors = (random_param((SHAPE[1],), 54, -1, 1), random_param((SHAPE[1],), 55, -1, 1))
    run_backward(handle, x, dy, "spatial", True, 51, alpha_data=0.5, beta_data=0.25,
                 alpha_param=2.0, beta_param=0.5, dx=prior.clone(), priors=priors)


@pytest.mark.parametrize("layout", ("nchw", "nhwc"))
def test_in_place(handle, layout):
    """y == x for both forwards, dx == dy for backward."""
    x = random_data(SHAPE, "fp32", 61, layout)
    run_inference(handle, x, "spatial", True, 61, y=x)
    x = random_data(SHAPE, "fp32", 62, layout)
    run_training(handle, x, "spatial", "running+saved", 62, y=x)
    x = random_data(SHAPE, "fp32", 63, layout)
    dy = random_data(SHAPE, "fp32", 64, layout)
    run_backward(handle, x, dy, "spatial", True, 63, dx=dy)


def test_outputs_are_allocated_like_the_input(handle):
    x = random_data(SHAPE, "fp16", 71, "nhwc")
    scale, bias = random_param((SHAPE[1],), 72, 0.5, 1.5), random_param((SHAPE[1],), 73, -1, 1)
    y, saved_mean, saved_inv_std = mbn.batchnorm_forward_training(x, scale, bias, handle=handle)
    assert isinstance(y, torch.Tensor) and y.device == x.device and y.dtype == x.dtype
    assert y.stride() == x.stride()
    assert saved_mean.device == x.device and saved_mean.shape == (SHAPE[1],)
    dx, dscale, dbias = mbn.batchnorm_backward(x, y, scale, saved_mean=saved_mean,
                                               saved_inv_std=saved_inv_std, handle=handle)
    assert dx.device == x.device and dx.stride() == x.stride()
    assert dscale.device == x.device and dbias.device == x.device
    torch.cuda.synchronize()
    assert torch.isfinite(y).all() and torch.isfinite(dx).all()


# --------------------------------------------------------------------------
# docs/numerics.md#shapes, checked on a sample of whole channels
# --------------------------------------------------------------------------
SAMPLE_ELEMENTS = 1 << 22


def sample_channels(shape):
    channels = shape[1]
    per_channel = int(np.prod(shape)) // channels
    count = max(1, min(channels, SAMPLE_ELEMENTS // per_channel))
    if count == 1:
        return [channels - 1]
    return sorted({round(i * (channels - 1) / (count - 1)) for i in range(count)})


def select(tensor, picked, dim):
    """The picked channels (dim 1 of data, dim 0 of parameters), on the device."""
    return tensor.index_select(dim, torch.tensor(picked, device=tensor.device))


def select64(tensor, picked, dim):
    return host64(select(tensor, picked, dim))


def check_all_ops_sampled(handle, x, dy, dtype, seed, picked=None):
    """Spatial training, inference and backward on big tensors; the reference
    runs on the sampled channels only (spatial BN keeps channels apart):
    `picked`, or a spread sample."""
    channels = x.shape[1]
    picked = picked or sample_channels(tuple(x.shape))
    scale = random_param((channels,), seed + 1, 0.5, 1.5)
    bias = random_param((channels,), seed + 2, -0.5, 0.5)
    running_mean = random_param((channels,), seed + 3, -0.2, 0.2)
    running_var = random_param((channels,), seed + 4, 0.5, 1.5)
    before = (select64(running_mean, picked, 0), select64(running_var, picked, 0))
    xs, ss, bs = select64(x, picked, 1), select64(scale, picked, 0), select64(bias, picked, 0)

    y = poisoned(x)
    _, saved_mean, saved_inv_std = mbn.batchnorm_forward_training(
        x, scale, bias, epsilon=EPS, exp_avg_factor=FACTOR, running_mean=running_mean,
        running_var=running_var, y=y, handle=handle)
    torch.cuda.synchronize()
    ref = reference.batchnorm_forward_training(xs, ss, bs, epsilon=EPS, exp_avg_factor=FACTOR,
                                               running_mean=before[0], running_var=before[1])
    check("train y", select(y, picked, 1), ref["y"], ELEMENTWISE)
    check("saved_mean", select(saved_mean, picked, 0), ref["saved_mean"], REDUCTION)
    check("saved_inv_std", select(saved_inv_std, picked, 0), ref["saved_inv_std"], REDUCTION)
    check("running_mean", select(running_mean, picked, 0), ref["running_mean"], REDUCTION)
    check("running_var", select(running_var, picked, 0), ref["running_var"], REDUCTION)
    assert not torch.isnan(y).any()  # every element written, unsampled and far ones too

    y = poisoned(x)
    mbn.batchnorm_forward_inference(x, scale, bias, running_mean, running_var, epsilon=EPS, y=y,
                                    handle=handle)
    torch.cuda.synchronize()
    expected = reference.batchnorm_forward_inference(
        xs, ss, bs, select64(running_mean, picked, 0), select64(running_var, picked, 0),
        epsilon=EPS)
    check("infer y", select(y, picked, 1), expected, ELEMENTWISE)
    assert not torch.isnan(y).any()
    del y

    if dy is None:
        return
    dx, dscale, dbias = poisoned(dy), poisoned(scale), poisoned(scale)
    mbn.batchnorm_backward(x, dy, scale, saved_mean=saved_mean, saved_inv_std=saved_inv_std,
                           epsilon=EPS, dx=dx, dscale=dscale, dbias=dbias, handle=handle)
    torch.cuda.synchronize()
    ref = reference.batchnorm_backward(xs, select64(dy, picked, 1), ss,
                                       saved_mean=select64(saved_mean, picked, 0),
                                       saved_inv_std=select64(saved_inv_std, picked, 0),
                                       epsilon=EPS)
    check("dx", select(dx, picked, 1), ref["dx"], ELEMENTWISE)
    assert not torch.isnan(dx).any()
    check("dscale", select(dscale, picked, 0), ref["dscale"], REDUCTION)
    check("dbias", select(dbias, picked, 0), ref["dbias"], REDUCTION)


REQUIRED_SHAPES = [
    (64, 1, 1024, 1024),    # C = 1, huge H*W
    (69328, 1, 22, 22),     # huge N, C = 1
    (1000, 64, 1, 1),       # H = W = 1, N > 768
    (1, 32, 512, 512),      # N = 1, large H*W
    (16, 80, 73, 73),       # odd primes
    (16, 96, 35, 35),
    (13, 79),
    (2, 2, 3, 224, 224),    # 5-D
]


@pytest.mark.parametrize("layout", ("nchw", "nhwc"))
@pytest.mark.parametrize("dtype", ("fp32", "fp16"))
@pytest.mark.parametrize("shape", REQUIRED_SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_required_shapes(handle, shape, dtype, layout):
    if layout == "nhwc" and (len(shape) == 2 or shape[1] == 1 or np.prod(shape[2:]) == 1):
        pytest.skip("NHWC is NCHW for this shape")
    if shape == (69328, 1, 22, 22) and dtype == "fp16":
        pytest.skip("the fp16 huge-channel case is 64x1x1024x1024 (host reference time)")
    x = random_data(shape, dtype, 81, layout)
    dy = random_data(shape, dtype, 82, layout)
    check_all_ops_sampled(handle, x, dy, dtype, 81)


@pytest.mark.slow
def test_tensor_over_2_31_elements(handle):
    """Training, inference and backward on float16 tensors of 2^31 + 69M
    elements each: 64-bit offsets.  Every channel has elements beyond 2^31
    (sample n = 1023); the last channel, whose far end is the tensors' last
    element, is checked against the host reference (34M values per op)."""
    shape = (1024, 64, 182, 182)
    numel = int(np.prod(shape))
    assert numel > 2**31
    free, _ = torch.cuda.mem_get_info()
    needed = 5 * numel * 2  # x, dy, dx and two y at once
    if free < needed:
        pytest.skip(f"needs {needed / 2**30:.1f} GiB of GPU memory, {free / 2**30:.1f} free")
    gen = generator(91)
    x = torch.randn(shape, generator=gen, device=DEVICE, dtype=torch.float16)
    x.mul_(torch.linspace(0.5, 2.0, 64, device=DEVICE, dtype=torch.float16).view(1, 64, 1, 1))
    x.add_(torch.linspace(-2.0, 2.0, 64, device=DEVICE, dtype=torch.float16).view(1, 64, 1, 1))
    dy = torch.randn(shape, generator=gen, device=DEVICE, dtype=torch.float16)
    torch.cuda.synchronize()
    check_all_ops_sampled(handle, x, dy, "fp16", 91, picked=[shape[1] - 1])


# --------------------------------------------------------------------------
# Agreement with PyTorch's cuDNN batch norm
# --------------------------------------------------------------------------
RESNET_SHAPES = [(32, 64, 56, 56), (32, 256, 14, 14), (32, 2048, 7, 7)]
AGREEMENT = 20


@pytest.mark.parametrize("layout", ("nchw", "nhwc"))
@pytest.mark.parametrize("dtype", ("fp32", "fp16"))
@pytest.mark.parametrize("shape", RESNET_SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_matches_torch_cudnn(handle, shape, dtype, layout):
    """Training forward (y, running stats) and backward (dx, dscale, dbias)
    agree with F.batch_norm + autograd under cuDNN.  A cross-check of the
    conventions (saved inverse std, unbiased running variance, layouts), not
    of accuracy -- that is measured against the float64 reference above: the
    bound is AGREEMENT times the table's, its atol scaled by the largest
    value, because PyTorch's float32 sums over 10^5 values are themselves off
    by more than our table allows."""
    channels = shape[1]
    x = random_data(shape, dtype, 111, layout)
    dy = random_data(shape, dtype, 112, layout)
    scale = random_param((channels,), 113, 0.5, 1.5)
    bias = random_param((channels,), 114, -0.5, 0.5)
    running = (random_param((channels,), 115, -0.2, 0.2), random_param((channels,), 116, 0.5, 1.5))
    theirs_running = tuple(t.clone() for t in running)
    assert torch.backends.cudnn.enabled  # PyTorch's default: F.batch_norm goes to cuDNN
    xg = x.detach().requires_grad_(True)
    wg = scale.detach().clone().requires_grad_(True)
    bg = bias.detach().clone().requires_grad_(True)
    y_theirs = F.batch_norm(xg, theirs_running[0], theirs_running[1], wg, bg, True, FACTOR, EPS)
    dx_theirs, dscale_theirs, dbias_theirs = torch.autograd.grad(y_theirs, (xg, wg, bg), dy)
    y, saved_mean, saved_inv_std = mbn.batchnorm_forward_training(
        x, scale, bias, epsilon=EPS, exp_avg_factor=FACTOR, running_mean=running[0],
        running_var=running[1], y=poisoned(x), handle=handle)
    dx, dscale, dbias = mbn.batchnorm_backward(
        x, dy, scale, saved_mean=saved_mean, saved_inv_std=saved_inv_std, epsilon=EPS,
        dx=poisoned(dy), dscale=poisoned(scale), dbias=poisoned(scale), handle=handle)
    torch.cuda.synchronize()
    for name, ours, theirs, kind in (("y", y, y_theirs, ELEMENTWISE),
                                     ("running_mean", running[0], theirs_running[0], REDUCTION),
                                     ("running_var", running[1], theirs_running[1], REDUCTION),
                                     ("dx", dx, dx_theirs, ELEMENTWISE),
                                     ("dscale", dscale, dscale_theirs, REDUCTION),
                                     ("dbias", dbias, dbias_theirs, REDUCTION)):
        expected = host64(theirs)
        table = tolerances.tolerance(ours.dtype, kind)
        scale_of_values = max(1.0, float(np.abs(expected).max()))
        check(name, ours, expected, kind,
              tol=tolerances.Tolerance(AGREEMENT * table.atol * scale_of_values,
                                       AGREEMENT * table.rtol))


# --------------------------------------------------------------------------
# Other device-array protocols
# --------------------------------------------------------------------------
class CudaArrayInterfaceOnly:
    """A device array offering only __cuda_array_interface__ (no DLPack), as
    Numba's or hip-python's arrays do."""

    def __init__(self, tensor):
        self.__cuda_array_interface__ = tensor.__cuda_array_interface__
        self.tensor = tensor  # keeps the memory alive


@pytest.mark.parametrize("dtype", ("fp32", "fp16"))
def test_cuda_array_interface_arrays(handle, dtype):
    wrap = CudaArrayInterfaceOnly
    x = random_data(SHAPE, dtype, 131, "nhwc")
    scale = random_param((SHAPE[1],), 132, 0.5, 1.5)
    bias = random_param((SHAPE[1],), 133, -0.5, 0.5)
    y = poisoned(x)
    out, _, _ = mbn.batchnorm_forward_training(wrap(x), wrap(scale), wrap(bias), epsilon=EPS,
                                               save_stats=False, y=wrap(y), handle=handle)
    assert out.tensor is y
    torch.cuda.synchronize()
    ref = reference.batchnorm_forward_training(host64(x), host64(scale), host64(bias),
                                               epsilon=EPS)
    check("y", y, ref["y"], ELEMENTWISE)


def test_cupy_arrays_with_outputs_allocated_by_cupy(handle):
    with warnings.catch_warnings():  # e.g. CuPy guessing at CUDA_PATH: not our concern
        warnings.simplefilter("ignore")
        cupy = pytest.importorskip("cupy")
    x = cupy.from_dlpack(random_data(SHAPE, "fp32", 141))
    scale = cupy.from_dlpack(random_param((SHAPE[1],), 142, 0.5, 1.5))
    bias = cupy.from_dlpack(random_param((SHAPE[1],), 143, -0.5, 0.5))
    torch.cuda.synchronize()
    y, saved_mean, saved_inv_std = mbn.batchnorm_forward_training(x, scale, bias, epsilon=EPS,
                                                                  handle=handle)
    assert isinstance(y, cupy.ndarray) and isinstance(saved_mean, cupy.ndarray)
    cupy.cuda.Device().synchronize()
    ref = reference.batchnorm_forward_training(cupy.asnumpy(x), cupy.asnumpy(scale),
                                               cupy.asnumpy(bias), epsilon=EPS)
    tolerances.check(cupy.asnumpy(y), ref["y"], "float32", ELEMENTWISE, name="y")
    tolerances.check(cupy.asnumpy(saved_mean), ref["saved_mean"], "float32", REDUCTION,
                     name="saved_mean")
    tolerances.check(cupy.asnumpy(saved_inv_std), ref["saved_inv_std"], "float32", REDUCTION,
                     name="saved_inv_std")


# --------------------------------------------------------------------------
# Streams
# --------------------------------------------------------------------------
def _keep_stream_busy():
    """About 10 ms of work on the current stream."""
    if hasattr(torch.cuda, "_sleep"):
        torch.cuda._sleep(20_000_000)
    else:
        a = torch.randn(4096, 4096, device=DEVICE)
        for _ in range(20):
            a = a @ a * 1e-3


def test_calls_on_a_non_default_stream(handle):
    """Work queued on a side stream behind a long kernel: correct results after
    stream.synchronize() show the library ran on that stream, in order."""
    stream = torch.cuda.Stream()
    source = random_data((64, 32, 28, 28), "fp32", 121)
    scale = random_param((32,), 122, 0.5, 1.5)
    bias = random_param((32,), 123, -0.5, 0.5)
    torch.cuda.synchronize()
    with mbn.Handle(backend="gpu", stream=stream.cuda_stream) as side_handle:
        with torch.cuda.stream(stream):
            x = torch.full_like(source, float("nan"))
            y = poisoned(source)
            _keep_stream_busy()  # a call on the wrong stream would now read NaN x
            x.copy_(source)
            mbn.batchnorm_forward_training(x, scale, bias, epsilon=EPS, save_stats=False, y=y,
                                           handle=side_handle)
        stream.synchronize()
    ref = reference.batchnorm_forward_training(host64(source), host64(scale), host64(bias),
                                               epsilon=EPS)
    check("y", y, ref["y"], ELEMENTWISE)


# --------------------------------------------------------------------------
# Concurrency on streams, and determinism
# --------------------------------------------------------------------------
# (op, shape, dtype, layout, mode): every op, big enough for many blocks per feature.
CONCURRENT_JOBS = [
    ("train", (16, 32, 28, 28), "fp32", "nchw", "spatial"),
    ("train", (16, 32, 28, 28), "fp16", "nhwc", "spatial"),
    ("infer", (16, 32, 28, 28), "fp32", "nhwc", "spatial"),
    ("infer", (64, 8, 14, 14), "bf16", "nchw", "per_activation"),
    ("backward", (16, 32, 28, 28), "fp32", "nchw", "spatial"),
    ("backward", (16, 32, 28, 28), "fp16", "nhwc", "spatial"),
    ("train", (64, 8, 14, 14), "fp32", "strided", "per_activation"),
    ("backward", (64, 8, 14, 14), "fp32", "nchw", "per_activation"),
]
STREAM_THREADS = 6
STREAM_ROUNDS = 3


def job_inputs(index):
    """Inputs of CONCURRENT_JOBS[index], made once and only read afterwards."""
    op, shape, dtype, layout, mode = CONCURRENT_JOBS[index]
    seed = 200 + 10 * index
    pshape = param_shape(shape, mode)
    inputs = {"x": random_data(shape, dtype, seed, layout), "dy": random_data(shape, dtype, seed + 1, layout),
              "scale": random_param(pshape, seed + 2, 0.5, 1.5), "bias": random_param(pshape, seed + 3, -0.5, 0.5),
              "mean": random_param(pshape, seed + 4, -0.2, 0.2), "var": random_param(pshape, seed + 5, 0.5, 1.5)}
    inputs["saved"] = saved_statistics(inputs["x"], mode)
    return inputs


def run_job(index, inputs, handle):
    """The job's outputs, allocated on the current stream (running
    statistics updated in copies, so the job can run again)."""
    op, _, _, _, mode = CONCURRENT_JOBS[index]
    a = inputs
    if op == "train":
        running_mean, running_var = a["mean"].clone(), a["var"].clone()
        out = mbn.batchnorm_forward_training(a["x"], a["scale"], a["bias"], mode=mode, running_mean=running_mean,
                                             running_var=running_var, handle=handle)
        return (*out, running_mean, running_var)
    if op == "infer":
        return (mbn.batchnorm_forward_inference(a["x"], a["scale"], a["bias"], a["mean"], a["var"], mode=mode,
                                                handle=handle),)
    return mbn.batchnorm_backward(a["x"], a["dy"], a["scale"], saved_mean=a["saved"][0],
                                  saved_inv_std=a["saved"][1], mode=mode, handle=handle)


def bits(tensors):
    """The outputs' bytes on the host, for bitwise comparison."""
    return [t.contiguous().view(torch.uint8).cpu() for t in tensors]


def same_bits(a, b):
    return len(a) == len(b) and all(torch.equal(x, y) for x, y in zip(a, b))


@pytest.fixture(scope="module")
def serial_jobs(handle):
    inputs = [job_inputs(i) for i in range(len(CONCURRENT_JOBS))]
    torch.cuda.synchronize()
    expected = [bits(run_job(i, inputs[i], handle)) for i in range(len(CONCURRENT_JOBS))]
    return inputs, expected


def test_threads_on_their_own_streams_match_serial_runs(serial_jobs):
    """Six threads, each with its own handle on its own stream, run every job
    three times at once: each result is bitwise the serial one."""
    from concurrent.futures import ThreadPoolExecutor

    inputs, expected = serial_jobs

    def body(thread):
        stream = torch.cuda.Stream()
        outputs = []
        with mbn.Handle(backend="gpu", stream=stream.cuda_stream) as own, torch.cuda.stream(stream):
            for step in range(STREAM_ROUNDS * len(CONCURRENT_JOBS)):
                index = (step + thread) % len(CONCURRENT_JOBS)
                outputs.append((index, run_job(index, inputs[index], own)))
            stream.synchronize()
            return [(index, bits(out)) for index, out in outputs]

    with ThreadPoolExecutor(STREAM_THREADS) as pool:
        results = [r for future in [pool.submit(body, t) for t in range(STREAM_THREADS)] for r in future.result()]
    assert len(results) == STREAM_THREADS * STREAM_ROUNDS * len(CONCURRENT_JOBS)
    for index, got in results:
        assert same_bits(got, expected[index]), f"job {CONCURRENT_JOBS[index]} differs from its serial run"


def test_threads_sharing_one_handle_match_serial_runs(handle, serial_jobs):
    """The module's handle (default stream) shared by six threads at once."""
    from concurrent.futures import ThreadPoolExecutor

    inputs, expected = serial_jobs

    def body(thread):
        got = []
        for step in range(len(CONCURRENT_JOBS)):
            index = (step + thread) % len(CONCURRENT_JOBS)
            got.append((index, run_job(index, inputs[index], handle)))
        torch.cuda.synchronize()
        return [(index, bits(out)) for index, out in got]

    with ThreadPoolExecutor(STREAM_THREADS) as pool:
        results = [r for future in [pool.submit(body, t) for t in range(STREAM_THREADS)] for r in future.result()]
    for index, got in results:
        assert same_bits(got, expected[index]), f"job {CONCURRENT_JOBS[index]} differs from its serial run"


def test_repeated_calls_are_bitwise_identical(handle, serial_jobs):
    """Fixed-order merges, no atomics: the same call on the same device gives
    the same bits, every time and through any handle or stream."""
    inputs, expected = serial_jobs
    stream = torch.cuda.Stream()
    with mbn.Handle(backend="gpu", stream=stream.cuda_stream) as other, torch.cuda.stream(stream):
        for index in range(len(CONCURRENT_JOBS)):
            for _ in range(3):
                assert same_bits(bits(run_job(index, inputs[index], other)), expected[index]), CONCURRENT_JOBS[index]


# --------------------------------------------------------------------------
# Bad input on the GPU (last in the file: should the library fault on a host
# pointer after all, the CUDA context is lost for every later test)
# --------------------------------------------------------------------------
def test_host_arrays_on_a_gpu_handle_are_refused(handle):
    channels = SHAPE[1]
    x_host = np.random.default_rng(1).standard_normal(SHAPE).astype(np.float32)
    scale_host = np.ones(channels, np.float32)
    bias_host = np.zeros(channels, np.float32)
    x = random_data(SHAPE, "fp32", 101)
    scale = random_param((channels,), 102, 0.5, 1.5)
    bias = random_param((channels,), 103, -0.5, 0.5)
    y = poisoned(x)
    with pytest.raises(ValueError):  # everything on the host
        mbn.batchnorm_forward_training(x_host, scale_host, bias_host, handle=handle)
    with pytest.raises(ValueError):  # device x and y, host parameters
        mbn.batchnorm_forward_inference(x, scale_host, bias_host, scale_host, scale_host, y=y,
                                        handle=handle)
    with pytest.raises(ValueError):  # torch CPU tensors
        mbn.batchnorm_backward(x.cpu(), x.cpu(), scale.cpu(), handle=handle)
    with pytest.raises(ValueError):  # a host output for device inputs
        mbn.batchnorm_forward_inference(x, scale, bias, None, None,
                                        y=np.empty(SHAPE, np.float32), handle=handle)
    # Past the Python checks (a raw pointer says nothing about where it
    # points): the library itself must refuse host memory with BadParm.
    raw_host_x = mbn.RawTensor(x_host.ctypes.data, shape=SHAPE, dtype="float32")
    with pytest.raises(mbn.MIOpenBadParmError):
        mbn.batchnorm_forward_inference(raw_host_x, scale, bias, scale, scale, y=y,
                                        handle=handle)
    torch.cuda.synchronize()
    assert torch.isnan(y).all()  # no refused call wrote anything
    run_inference(handle, x, "spatial", True, 101)  # and the handle still works
