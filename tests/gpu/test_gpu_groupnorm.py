"""Group norm through the Python API on a GPU handle with torch CUDA tensors.

Every call is checked against a float64 oracle computed on the GPU from the
same inputs upcast (``F.group_norm``, ``z * sigmoid(beta z)`` for Swish;
backward by the package's reference from the saved statistics the call is
given, itself checked against autograd), with NaN-poisoned outputs and fresh random data, under
the package's tolerance table: y and dx elementwise, mean / rstd / dweight /
dbias as reductions, each in its own dtype.  Covered: fp32/fp16/bf16/fp64,
NCHW / channels_last / a strided view, Swish on and off, affine on and off,
mean and rstd omitted, in place, ranks 2 to 5, the Stable-Diffusion and VAE
shapes, C/G = 1, G = 1, N = 1, C/G >= 64, N*G < 32, many tiny groups,
groups too large to stay resident (the slices, and the chunks' two-launch
forward), channel-outermost storage, bitwise-deterministic reruns, Swish where
exp overflows, Swish across pre-activations of about [-60, 60] and a first
element or channel far from the rest of its group on every forward algorithm,
and capture in a CUDA graph.  The on-chip kernels (one launch;
native/gpu/gn_tile.hpp) and the older paths each run on their own cases,
chosen by MIOPEN_BN_GPU_ALGORITHM (gn_on_chip: on chip or fail; gn_slices,
gn_chunks: never on chip).

The whole module skips when torch, a CUDA device, the library's GPU backend
or the package's group-norm API is missing.
"""
import pytest

torch = pytest.importorskip("torch")
import miopen_bn as mbn  # noqa: E402
from miopen_bn import reference  # noqa: E402
from miopen_bn.tolerances import ELEMENTWISE, REDUCTION  # noqa: E402
from support.torch_tensors import check, poisoned, random_data, random_param  # noqa: E402

pytestmark = pytest.mark.gpu


def _why_skip():
    if not (hasattr(mbn, "groupnorm_forward") and hasattr(mbn, "groupnorm_backward")):
        return "miopen_bn has no group-norm API"
    if not mbn.lib.miopenBNHasGpuSupport():
        return "libmiopen_bn was built without a GPU backend"
    if not torch.cuda.is_available():
        return "torch sees no CUDA device"
    return None


if _why_skip():
    pytest.skip(_why_skip(), allow_module_level=True)

F = torch.nn.functional
EPS = 1e-5
BETA = 1.25  # Swish's beta: not 1, so a lost beta shows
DTYPES = ("fp32", "fp16", "bf16", "fp64")
LAYOUTS = ("nchw", "nhwc", "strided")
# Small, odd lengths (C/G = 3, S = 63): no power-of-two alignment hides an
# indexing slip.
SHAPE, GROUPS = (5, 12, 7, 9), 4
# Above this many elements only a few groups are compared on the host.
SAMPLED_ABOVE = 1 << 22


@pytest.fixture(scope="module")
def handle():
    with mbn.Handle(backend="gpu") as gpu_handle:
        yield gpu_handle


# --------------------------------------------------------------------------
# The float64 oracle
# --------------------------------------------------------------------------
def swish(z, beta):
    return z * torch.sigmoid(beta * z)


def oracle_forward(x, groups, weight, bias, activation, beta=BETA):
    """y, mean and rstd in float64 from the inputs as stored."""
    x64 = x.detach().to(torch.float64)
    w64 = None if weight is None else weight.detach().to(torch.float64)
    b64 = None if bias is None else bias.detach().to(torch.float64)
    y = F.group_norm(x64, groups, w64, b64, EPS)
    if activation == "swish":
        y = swish(y, beta)
    var, mean = torch.var_mean(x64.reshape(x.shape[0], groups, -1), dim=2, correction=0)
    return y, mean, torch.rsqrt(var + EPS)


def oracle_backward(x, dy, groups, weight, bias, activation, mean, rstd):
    """dx, dweight and dbias in float64 from the saved mean and rstd the call
    is given (float32 ones: in small groups dx is ill-conditioned in them,
    e.g. 2-value groups, where their float32 rounding alone moves dx by up
    to 1e-2, so an oracle with float64 statistics would test that rounding)."""
    def wide(t):
        return None if t is None else t.detach().to(torch.float64).cpu().numpy()

    grads = reference.groupnorm_backward(wide(x), wide(dy), groups, wide(weight), wide(mean), wide(rstd),
                                         bias=wide(bias), activation=activation, swish_beta=BETA)
    return tuple(None if grads[k] is None else torch.from_numpy(grads[k]).to(x.device)
                 for k in ("dx", "dweight", "dbias"))


def test_backward_oracle_is_autograd_of_the_forward():
    """The backward oracle, fed float64 statistics, is autograd of F.group_norm
    (with Swish), to float64 rounding: it states the same derivative."""
    shape, groups = (3, 12, 5, 7), 4
    x = random_data(shape, "fp64", 61)
    dy = random_data(shape, "fp64", 62)
    weight, bias = make_params(shape[1], 61, True, torch.float64)
    leaves = [t.detach().clone().requires_grad_(True) for t in (x, weight, bias)]
    y = swish(F.group_norm(leaves[0], groups, leaves[1], leaves[2], EPS), BETA)
    expected = torch.autograd.grad(y, leaves, dy)
    mean, rstd = saved_statistics(x, groups)
    got = oracle_backward(x, dy, groups, weight, bias, "swish", mean, rstd)
    for name, g, e in zip(("dx", "dweight", "dbias"), got, expected):
        assert torch.allclose(g, e, rtol=1e-10, atol=1e-12), name


def saved_statistics(x, groups):
    """mean and rstd as a forward saves them: float32, float64 for float64 x."""
    var, mean = torch.var_mean(x.detach().to(torch.float64).reshape(x.shape[0], groups, -1), dim=2, correction=0)
    stats_dtype = torch.float64 if x.dtype == torch.float64 else torch.float32
    return mean.to(stats_dtype), torch.rsqrt(var + EPS).to(stats_dtype)


# --------------------------------------------------------------------------
# Comparing (whole tensors, or a few groups of a large one)
# --------------------------------------------------------------------------
def picked_groups(shape, groups):
    if torch.Size(shape).numel() <= SAMPLED_ABOVE:
        return list(range(groups))
    return sorted({0, groups // 2, groups - 1})


def channels_of(picked, channels, groups):
    per_group = channels // groups
    return [g * per_group + k for g in picked for k in range(per_group)]


def compare(name, out, expected, kind, picked_channels, channel_dim):
    """`out` against the float64 `expected` on the picked channels."""
    index = torch.tensor(picked_channels, device=out.device)
    check(name, out.index_select(channel_dim, index), expected.index_select(channel_dim, index).cpu().numpy(), kind)


def compare_statistic(name, out, expected, picked):
    index = torch.tensor(picked, device=out.device)
    check(name, out.index_select(1, index), expected.index_select(1, index).cpu().numpy(), REDUCTION)


# --------------------------------------------------------------------------
# Running one forward / backward and checking it
# --------------------------------------------------------------------------
def make_params(channels, seed, affine, dtype=torch.float32):
    if not affine:
        return None, None
    weight = random_param((channels,), seed + 1, 0.5, 1.5).to(dtype)
    bias = random_param((channels,), seed + 2, -0.5, 0.5).to(dtype)
    return weight, bias


def run_forward(handle, x, groups, seed, *, affine=True, activation=None, param_dtype=torch.float32, y=None):
    channels = x.shape[1]
    weight, bias = make_params(channels, seed, affine, param_dtype)
    y = poisoned(x) if y is None else y
    expected = oracle_forward(x, groups, weight, bias, activation)  # before the call: y may be x
    out, mean, rstd = mbn.groupnorm_forward(x, groups, weight, bias, epsilon=EPS, activation=activation,
                                            swish_beta=BETA, y=y, handle=handle)
    torch.cuda.synchronize()
    assert out.data_ptr() == y.data_ptr()
    picked = picked_groups(x.shape, groups)
    compare("y", out, expected[0], ELEMENTWISE, channels_of(picked, channels, groups), 1)
    compare_statistic("mean", mean, expected[1], picked)
    compare_statistic("rstd", rstd, expected[2], picked)
    return out


def run_backward(handle, x, dy, groups, seed, *, affine=True, activation=None, dx=None):
    channels = x.shape[1]
    weight, bias = make_params(channels, seed, affine)
    mean, rstd = saved_statistics(x, groups)
    expected = oracle_backward(x, dy, groups, weight, bias, activation, mean, rstd)  # before the call: dx may be dy
    dx = poisoned(dy) if dx is None else dx
    dweight = None if weight is None else poisoned(weight)
    dbias = None if weight is None else poisoned(weight)
    out = mbn.groupnorm_backward(x, dy, groups, weight, mean, rstd, bias=bias, activation=activation,
                                 swish_beta=BETA, dx=dx, dweight=dweight, dbias=dbias, handle=handle)
    torch.cuda.synchronize()
    assert out[0].data_ptr() == dx.data_ptr()
    picked_channels = channels_of(picked_groups(x.shape, groups), channels, groups)
    compare("dx", out[0], expected[0], ELEMENTWISE, picked_channels, 1)
    if weight is not None:
        compare("dweight", out[1], expected[1], REDUCTION, picked_channels, 0)
        compare("dbias", out[2], expected[2], REDUCTION, picked_channels, 0)
    return out


def run_both(handle, shape, groups, dtype, layout, seed, **options):
    x = random_data(shape, dtype, seed, layout)
    dy = random_data(shape, dtype, seed + 10, layout)
    run_forward(handle, x, groups, seed, **options)
    run_backward(handle, x, dy, groups, seed, **options)


# --------------------------------------------------------------------------
# Every dtype, layout, activation and affine mode
# --------------------------------------------------------------------------
def every_variant(test):
    """Parametrizes `test` over dtype, layout, activation and affine mode."""
    for name, values, ids in (("affine", (True, False), ("affine", "plain")),
                              ("activation", (None, "swish"), ("none", "swish")),
                              ("layout", LAYOUTS, None),
                              ("dtype", DTYPES, None)):
        test = pytest.mark.parametrize(name, values, ids=ids)(test)
    return test


@every_variant
def test_forward(handle, dtype, layout, activation, affine):
    x = random_data(SHAPE, dtype, 11, layout)
    run_forward(handle, x, GROUPS, 11, affine=affine, activation=activation)


@every_variant
def test_backward(handle, dtype, layout, activation, affine):
    x = random_data(SHAPE, dtype, 21, layout)
    dy = random_data(SHAPE, dtype, 22, layout)
    run_backward(handle, x, dy, GROUPS, 21, affine=affine, activation=activation)


@pytest.mark.parametrize("dtype", ("fp16", "bf16", "fp64"))
def test_parameters_of_the_input_type(handle, dtype):
    """weight and bias in x's own type instead of float32."""
    x = random_data(SHAPE, dtype, 31, "nhwc")
    run_forward(handle, x, GROUPS, 31, activation="swish", param_dtype=x.dtype)


# --------------------------------------------------------------------------
# Shapes: Stable Diffusion, its VAE, and the corners
# --------------------------------------------------------------------------
SHAPES = [
    ((2, 320, 64, 64), 32),    # Stable Diffusion UNet
    ((2, 640, 32, 32), 32),
    ((2, 1280, 16, 16), 32),
    ((1, 512, 128, 128), 32),  # its VAE decoder
    ((1, 128, 512, 512), 32),  # 32 huge groups: 4 channels x 262144 positions
    ((4, 16, 9, 11), 16),      # C/G = 1 (instance norm)
    ((3, 24, 7, 5), 1),        # G = 1 (layer norm)
    ((1, 64, 33, 17), 8),      # N = 1
    ((2, 256, 9, 9), 2),       # C/G = 128
    ((2, 12, 13, 13), 3),      # N*G = 6
    ((64, 128, 2, 2), 64),     # 4096 groups of 8 values
    ((7, 6, 2), 6),            # rank 3, groups of 2 values
    ((6, 8), 2),               # rank 2: no positions
    ((4, 6, 50), 3),           # rank 3
    ((2, 8, 3, 9, 10), 4),     # rank 5
]


@pytest.mark.parametrize("layout", ("nchw", "nhwc"))
@pytest.mark.parametrize("dtype", ("fp32", "fp16"))
@pytest.mark.parametrize("shape, groups", SHAPES, ids=lambda v: "x".join(map(str, v)) if isinstance(v, tuple) else f"G{v}")
def test_shapes(handle, shape, groups, dtype, layout):
    if layout == "nhwc" and torch.Size(shape[2:]).numel() == 1:
        pytest.skip("NHWC is NCHW for this shape")
    run_both(handle, shape, groups, dtype, layout, 41, activation="swish")


@pytest.mark.parametrize("algorithm", ("default", "gn_chunks"))
def test_groups_too_large_to_stay_resident(handle, monkeypatch, algorithm):
    """One group of 2^24 values: by default the slices (a group of 1024
    chunks), forced to the chunks their two-launch forward."""
    if algorithm != "default":
        monkeypatch.setenv("MIOPEN_BN_GPU_ALGORITHM", algorithm)
    run_both(handle, (1, 64, 512, 512), 1, "fp16", "nchw", 51)


def test_channels_last_huge_groups(handle):
    """C/G = 4 channels-last: no 16-byte vectors fit, the scalar walk."""
    run_both(handle, (1, 128, 512, 512), 32, "fp32", "nhwc", 52)


# --------------------------------------------------------------------------
# Statistics omitted, in place, mixed layouts, determinism
# --------------------------------------------------------------------------
def _pointer(tensor):
    return mbn.ffi.cast("void*", tensor.data_ptr())


def _descriptor(tensor):
    return mbn.TensorDescriptor(tensor.dtype, tuple(tensor.shape), tuple(tensor.stride()))


@pytest.mark.parametrize("layout", ("nchw", "nhwc"))
def test_forward_without_mean_and_rstd(handle, layout):
    """MIOpen's entry point with NULL mean and rstd: y alone is written."""
    x = random_data(SHAPE, "fp32", 61, layout)
    weight, bias = make_params(SHAPE[1], 61, True)
    y = poisoned(x)
    weight_bias_mode = 1  # MIOPEN_WEIGHT_BIAS
    with _descriptor(x) as xd, _descriptor(y) as yd, _descriptor(weight) as wd, _descriptor(bias) as bd:
        mbn.check(mbn.lib.miopenGroupNormForward(
            handle.ptr, weight_bias_mode, xd.ptr, _pointer(x), wd.ptr, _pointer(weight), bd.ptr, _pointer(bias),
            GROUPS, EPS, yd.ptr, _pointer(y), mbn.ffi.NULL, mbn.ffi.NULL, mbn.ffi.NULL, mbn.ffi.NULL))
    torch.cuda.synchronize()
    expected = oracle_forward(x, GROUPS, weight, bias, None)[0]
    check("y", y, expected.cpu().numpy(), ELEMENTWISE)


@pytest.mark.parametrize("shape, groups", [(SHAPE, GROUPS), ((2, 320, 64, 64), 32)], ids=("small", "sd"))
def test_in_place(handle, shape, groups):
    """y == x forward, dx == dy backward."""
    x = random_data(shape, "fp32", 71, "nhwc")
    run_forward(handle, x, groups, 71, activation="swish", y=x)
    x = random_data(shape, "fp32", 72, "nchw")
    dy = random_data(shape, "fp32", 73, "nchw")
    run_backward(handle, x, dy, groups, 72, activation="swish", dx=dy)


def test_outputs_in_another_layout(handle):
    """x channels-last with y / dx NCHW, and the other way round."""
    x = random_data(SHAPE, "fp16", 81, "nhwc")
    run_forward(handle, x, GROUPS, 81, y=poisoned(x.contiguous()))
    x = random_data(SHAPE, "fp16", 82, "nchw")
    dy = random_data(SHAPE, "fp16", 83, "nhwc")
    run_backward(handle, x, dy, GROUPS, 82, dx=poisoned(x).contiguous(memory_format=torch.channels_last))


def test_channels_outermost(handle):
    """CNHW storage: channels outside samples (the backward's slices then
    run channel-major)."""
    x = random_data(SHAPE, "fp32", 85).transpose(0, 1).contiguous().transpose(0, 1)
    dy = random_data(SHAPE, "fp32", 86).transpose(0, 1).contiguous().transpose(0, 1)
    assert x.stride(1) > x.stride(0)
    run_forward(handle, x, GROUPS, 85, activation="swish")
    run_backward(handle, x, dy, GROUPS, 85, activation="swish")


def test_results_are_deterministic(handle):
    """Groups split over many blocks merge in a fixed order: bitwise equal reruns."""
    shape, groups = (1, 128, 512, 512), 32
    x = random_data(shape, "fp32", 91, "nchw")
    dy = random_data(shape, "fp32", 92, "nchw")
    weight, bias = make_params(shape[1], 91, True)
    first = mbn.groupnorm_forward(x, groups, weight, bias, epsilon=EPS, handle=handle)
    second = mbn.groupnorm_forward(x, groups, weight, bias, epsilon=EPS, handle=handle)
    for a, b in zip(first, second):
        assert torch.equal(a, b)
    mean, rstd = first[1], first[2]
    first = mbn.groupnorm_backward(x, dy, groups, weight, mean, rstd, handle=handle)
    second = mbn.groupnorm_backward(x, dy, groups, weight, mean, rstd, handle=handle)
    for a, b in zip(first, second):
        assert torch.equal(a, b)


def test_swish_at_extreme_values(handle):
    """Huge pre-activations: exp overflows, yet no NaN (the limits are 0 and z)."""
    x = torch.zeros(2, 4, 3, 5, device="cuda", dtype=torch.float32)
    x[:, :, 0, 0] = 1.0  # one spike per channel: the normalized values are large
    weight = torch.full((4,), 500.0, device="cuda")
    bias = torch.tensor([0.0, -1e4, 1e4, 0.0], device="cuda")
    y, _, _ = mbn.groupnorm_forward(x, 2, weight, bias, epsilon=EPS, activation="swish", swish_beta=1.0,
                                    y=poisoned(x), handle=handle)
    torch.cuda.synchronize()
    assert not torch.isnan(y).any()
    expected = oracle_forward(x, 2, weight, bias, "swish", beta=1.0)[0]
    check("y", y, expected.cpu().numpy(), ELEMENTWISE)


@pytest.mark.parametrize("layout", ("nchw", "nhwc"))
@pytest.mark.parametrize("dtype", ("fp16", "bf16", "fp32"))
@pytest.mark.parametrize("algorithm", ("gn_on_chip", "gn_persistent", "gn_slices", "gn_chunks"))
def test_swish_over_its_range(handle, monkeypatch, algorithm, dtype, layout):
    """Pre-activations across about [-60, 60] (channel biases from -40 to 40):
    each forward kernel's swish within the tolerance table at every z, where
    16-bit results take the tanh form on NVIDIA (native/gpu/gn_activation.h),
    whose error grows with |z|."""
    monkeypatch.setenv("MIOPEN_BN_GPU_ALGORITHM", algorithm)
    shape, groups = (2, 64, 16, 16), 8
    x = random_data(shape, dtype, 211, layout)
    weight = torch.full((shape[1],), 6.0, device="cuda")
    bias = torch.linspace(-40.0, 40.0, shape[1], device="cuda")
    y, _, _ = mbn.groupnorm_forward(x, groups, weight, bias, epsilon=EPS, activation="swish", swish_beta=BETA,
                                    y=poisoned(x), handle=handle)
    torch.cuda.synchronize()
    check("y", y, oracle_forward(x, groups, weight, bias, "swish")[0].cpu().numpy(), ELEMENTWISE)


@pytest.mark.parametrize("far", ("first_element", "first_channel"))
@pytest.mark.parametrize("layout", ("nchw", "nhwc"))
@pytest.mark.parametrize("dtype", ("fp16", "fp32"))
@pytest.mark.parametrize("algorithm", ("gn_on_chip", "gn_persistent", "gn_slices", "gn_chunks"))
def test_values_far_from_the_rest(handle, monkeypatch, algorithm, dtype, layout, far):
    """Each group's first element (the kernels' shift), or its whole first
    channel, thousands of units from the rest: every forward algorithm's y,
    mean and rstd within the tolerance table.  Sums of deviations from such
    a reference are large, and their float rounding must not reach the
    statistics (it did, past float32's tolerance, in a block form that took
    the mean from one float pass about the first element)."""
    monkeypatch.setenv("MIOPEN_BN_GPU_ALGORITHM", algorithm)
    shape, groups = (2, 64, 16, 16), 8
    x = random_data(shape, dtype, 223, layout)
    first_channels = slice(None, None, shape[1] // groups)
    if far == "first_element":
        x[:, first_channels, 0, 0] = 3000.0
    else:
        x[:, first_channels] += 3000.0
    run_forward(handle, x, groups, 223)


def test_captured_in_a_cuda_graph():
    """Forward and backward captured on a stream and replayed with fresh dy:
    once a first call has grown the handle's scratch, a call neither waits on
    the host nor allocates (groups split over blocks, so the hand-over
    counters are captured too)."""
    shape, groups = (2, 320, 64, 64), 32
    x = random_data(shape, "fp16", 111, "nchw")
    dy = random_data(shape, "fp16", 112, "nchw")
    weight, bias = make_params(shape[1], 111, True)
    mean, rstd = saved_statistics(x, groups)
    y, dx, dweight, dbias = poisoned(x), poisoned(dy), poisoned(weight), poisoned(weight)
    stream = torch.cuda.Stream()
    with mbn.Handle(backend="gpu", stream=stream.cuda_stream) as side:
        def calls():
            mbn.groupnorm_forward(x, groups, weight, bias, epsilon=EPS, activation="swish", swish_beta=BETA, y=y,
                                  handle=side)
            mbn.groupnorm_backward(x, dy, groups, weight, mean, rstd, bias=bias, activation="swish",
                                   swish_beta=BETA, dx=dx, dweight=dweight, dbias=dbias, handle=side)

        torch.cuda.synchronize()
        with torch.cuda.stream(stream):
            calls()
        stream.synchronize()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, stream=stream):
            calls()
        for output in (y, dx, dweight, dbias):
            output.fill_(float("nan"))
        dy.copy_(random_data(shape, "fp16", 113, "nchw"))
        torch.cuda.synchronize()
        graph.replay()
        torch.cuda.synchronize()
    check("y", y, oracle_forward(x, groups, weight, bias, "swish")[0].cpu().numpy(), ELEMENTWISE)
    expected = oracle_backward(x, dy, groups, weight, bias, "swish", mean, rstd)
    check("dx", dx, expected[0].cpu().numpy(), ELEMENTWISE)
    check("dweight", dweight, expected[1].cpu().numpy(), REDUCTION)
    check("dbias", dbias, expected[2].cpu().numpy(), REDUCTION)


# --------------------------------------------------------------------------
# The on-chip kernels (MIOPEN_BN_GPU_ALGORITHM=gn_on_chip: a problem they
# cannot take fails instead of falling back) and, beside them, the older
# paths (gn_slices; gn_chunks, a forward only)
# --------------------------------------------------------------------------
ON_CHIP_DTYPES = ("fp32", "fp16", "bf16")
# Fits both layouts for every on-chip dtype: C/G = 10 (NHWC rows of 2 or 4
# groups, vectors straddling groups), 24 positions (NCHW: whole vectors).
ON_CHIP_SMALL, ON_CHIP_SMALL_GROUPS = (3, 40, 4, 6), 4
# The UNet shapes (G = 32); one sample makes the NHWC tiles of 4 groups
# split over clusters of 8 blocks.
UNET_SHAPES = [(2, 320, 64, 64), (1, 320, 64, 64), (1, 640, 32, 32), (2, 1280, 16, 16), (2, 1280, 8, 8)]


def clusters_expected():
    """Hopper and later launch thread-block clusters: large groups must fit."""
    return torch.cuda.get_device_capability() >= (9, 0)


@pytest.fixture
def on_chip(monkeypatch):
    """Every call must run on chip (the library reads the variable per call)."""
    monkeypatch.setenv("MIOPEN_BN_GPU_ALGORITHM", "gn_on_chip")


@pytest.fixture(params=("gn_slices", "gn_chunks"))
def off_chip(monkeypatch, request):
    """The forward off chip by either older path; the backward by the slices
    (gn_chunks has no backward: with it the backward chooses as usual)."""
    monkeypatch.setenv("MIOPEN_BN_GPU_ALGORITHM", request.param)


def run_on_chip(run, *args, **options):
    """`run`, skipping where no cluster can hold the groups on this device."""
    try:
        return run(*args, **options)
    except mbn.MIOpenError as error:
        if "cannot take this problem" in str(error) and not clusters_expected():
            pytest.skip(f"no thread-block clusters on this device: {error}")
        raise


@pytest.mark.parametrize("param_dtype", ("fp32", "x"))
@pytest.mark.parametrize("affine", (True, False), ids=("affine", "plain"))
@pytest.mark.parametrize("activation", (None, "swish"), ids=("none", "swish"))
@pytest.mark.parametrize("layout", ("nchw", "nhwc"))
@pytest.mark.parametrize("dtype", ON_CHIP_DTYPES)
def test_on_chip_small(handle, on_chip, dtype, layout, activation, affine, param_dtype):
    """Every variant of both kernels on a small odd shape, one block per tile."""
    if param_dtype == "x" and (dtype == "fp32" or not affine):
        pytest.skip("the same as float32 parameters")
    x = random_data(ON_CHIP_SMALL, dtype, 121, layout)
    dy = random_data(ON_CHIP_SMALL, dtype, 122, layout)
    run_forward(handle, x, ON_CHIP_SMALL_GROUPS, 121, affine=affine, activation=activation,
                param_dtype=x.dtype if param_dtype == "x" else torch.float32)
    run_backward(handle, x, dy, ON_CHIP_SMALL_GROUPS, 121, affine=affine, activation=activation)


@pytest.mark.parametrize("shape, groups", [
    ((1, 48), 4),             # rank 2: one position, rows of 2 groups (fp16)
    ((2, 32, 9), 2),          # rank 3, odd positions (NHWC-like storage only)
    ((2, 16, 2, 2, 4), 1),    # rank 5, G = 1
    ((1, 64, 4, 6), 4),       # N = 1, C/G = 16
    ((2, 80, 8, 8), 8),       # C/G = 10 over 64 positions
], ids=lambda v: "x".join(map(str, v)) if isinstance(v, tuple) else f"G{v}")
@pytest.mark.parametrize("dtype", ON_CHIP_DTYPES)
def test_on_chip_corners(handle, on_chip, shape, groups, dtype):
    # Rank 3 with 9 positions fits only channels innermost (NCHW needs whole
    # 16-byte vectors of positions).
    for layout in ("nhwc",) if len(shape) == 3 else ("nchw", "nhwc"):
        run_both(handle, shape, groups, dtype, layout, 131, activation="swish")


@pytest.mark.parametrize("activation", (None, "swish"), ids=("none", "swish"))
@pytest.mark.parametrize("layout", ("nchw", "nhwc"))
@pytest.mark.parametrize("dtype", ON_CHIP_DTYPES)
@pytest.mark.parametrize("shape", UNET_SHAPES, ids=lambda v: "x".join(map(str, v)))
def test_on_chip_unet(handle, on_chip, shape, dtype, layout, activation):
    """The UNet shapes: tiles split over clusters of up to 8 blocks, each
    backward form with and without the activation (2x320x64x64 NHWC takes
    the two-block form's dx factors on an H100 or H200)."""
    run_on_chip(run_both, handle, shape, 32, dtype, layout, 141, activation=activation)


# Shapes whose on-chip backward streams on an H100 or H200 (gn_tile.hpp):
# the wide blocks with positions fastest (2x640x64x64) and with channels
# fastest where no register-only plan exists (1x320x128x128), the two-block
# form (1x1280x64x64).  Other devices may plan them otherwise; every plan
# must still hold.  In float32 the groups of 1x1280x64x64 NCHW and
# 1x320x128x128 NHWC are too large to stay on those chips (the call is
# refused: H200, run128), so those two run in 16 bits only.
STREAMED_CASES = [(shape, layout, dtype)
                  for shape, layout, types in [((2, 640, 64, 64), "nchw", ON_CHIP_DTYPES),
                                               ((1, 1280, 64, 64), "nchw", ("fp16", "bf16")),
                                               ((1, 320, 128, 128), "nhwc", ("fp16", "bf16")),
                                               ((1, 1280, 64, 64), "nhwc", ON_CHIP_DTYPES)]
                  for dtype in types]


@pytest.mark.parametrize("shape, layout, dtype", STREAMED_CASES,
                         ids=lambda v: "x".join(map(str, v)) if isinstance(v, tuple) else v)
def test_on_chip_streamed(handle, on_chip, shape, layout, dtype):
    run_on_chip(run_both, handle, shape, 32, dtype, layout, 145, activation="swish")


def test_on_chip_in_place(handle, on_chip):
    x = random_data((2, 640, 32, 32), "fp16", 151, "nhwc")
    run_forward(handle, x, 32, 151, activation="swish", y=x)
    x = random_data((2, 640, 32, 32), "bf16", 152, "nchw")
    dy = random_data((2, 640, 32, 32), "bf16", 153, "nchw")
    run_backward(handle, x, dy, 32, 152, activation="swish", dx=dy)
    x = random_data(ON_CHIP_SMALL, "fp32", 154, "nhwc")
    dy = random_data(ON_CHIP_SMALL, "fp32", 155, "nhwc")
    run_backward(handle, x, dy, ON_CHIP_SMALL_GROUPS, 154, dx=x)


def backward_of_cancelling_groups(handle, layout, activation, seed):
    """16-value float32 groups, x close together and dy nearly 1 + its
    deviation: dx nearly cancels, which float element arithmetic misses
    (the on-chip exact mode and the slices of such groups work in double;
    gn_tile.hpp).  Whether a value is missed depends on the data: on the
    host emulator, 6 seeds of 12 failed before the on-chip swish derivative
    went to double, hence several seeds here."""
    shape, groups = (4, 32, 2, 2), 8
    gen = torch.Generator(device="cuda").manual_seed(seed)
    z = torch.randn(shape, generator=gen, device="cuda", dtype=torch.float64)
    noise = torch.randn(shape, generator=gen, device="cuda", dtype=torch.float64)
    x = (3.0 + 1e-3 * z).to(torch.float32)
    dy = (1.0 + z + 1e-3 * noise).to(torch.float32)
    if layout == "nhwc":
        x, dy = (t.contiguous(memory_format=torch.channels_last) for t in (x, dy))
    run_backward(handle, x, dy, groups, seed, activation=activation)


CANCELLING_SEEDS = range(191, 199)


@pytest.mark.parametrize("seed", CANCELLING_SEEDS)
@pytest.mark.parametrize("activation", (None, "swish"))
@pytest.mark.parametrize("layout", ("nchw", "nhwc"))
def test_on_chip_small_float_groups_that_cancel(handle, on_chip, layout, activation, seed):
    backward_of_cancelling_groups(handle, layout, activation, seed)


@pytest.mark.parametrize("seed", CANCELLING_SEEDS)
@pytest.mark.parametrize("activation", (None, "swish"))
@pytest.mark.parametrize("layout", ("nchw", "nhwc"))
def test_slices_small_float_groups_that_cancel(handle, monkeypatch, layout, activation, seed):
    monkeypatch.setenv("MIOPEN_BN_GPU_ALGORITHM", "gn_slices")
    backward_of_cancelling_groups(handle, layout, activation, seed)


@pytest.mark.parametrize("shape", ((2, 320, 64, 64), (3, 320, 8, 8)), ids=lambda v: "x".join(map(str, v)))
@pytest.mark.parametrize("layout", ("nchw", "nhwc"))
def test_on_chip_is_deterministic(handle, on_chip, layout, shape):
    """Clusters add their blocks' sums in rank order, dweight in sample order
    (through the arrival, and for one-block tiles from the samples' cluster)."""
    groups = 32
    x = random_data(shape, "fp16", 161, layout)
    dy = random_data(shape, "fp16", 162, layout)
    weight, bias = make_params(shape[1], 161, True)
    runs = [mbn.groupnorm_forward(x, groups, weight, bias, epsilon=EPS, activation="swish", handle=handle)
            for _ in range(2)]
    for a, b in zip(*runs):
        assert torch.equal(a, b)
    mean, rstd = runs[0][1], runs[0][2]
    runs = [mbn.groupnorm_backward(x, dy, groups, weight, mean, rstd, bias=bias, activation="swish", handle=handle)
            for _ in range(2)]
    for a, b in zip(*runs):
        assert torch.equal(a, b)


def test_on_chip_refuses_what_it_cannot_take(handle, on_chip):
    """A forced gn_on_chip turns a fallback into an error saying why."""
    x = random_data(ON_CHIP_SMALL, "fp64", 171)
    with pytest.raises(NotImplementedError, match="gn_on_chip cannot serve .*: its data are float64"):
        mbn.groupnorm_forward(x, ON_CHIP_SMALL_GROUPS, None, None, epsilon=EPS, handle=handle)


@pytest.fixture
def persistent(monkeypatch):
    """Every call must run as one persistent launch (both directions)."""
    monkeypatch.setenv("MIOPEN_BN_GPU_ALGORITHM", "gn_persistent")


@pytest.mark.parametrize("affine", (True, False), ids=("affine", "plain"))
@pytest.mark.parametrize("activation", (None, "swish"), ids=("none", "swish"))
@pytest.mark.parametrize("layout", ("nchw", "nhwc"))
@pytest.mark.parametrize("dtype", ON_CHIP_DTYPES)
def test_persistent(handle, persistent, dtype, layout, activation, affine):
    """gn_persistent forced both ways: NCHW blocks across slices and groups,
    channels-last two groups in a half vector and rows of 12 float vectors."""
    run_both(handle, (3, 96, 40, 48), 24, dtype, layout, 191, affine=affine, activation=activation)


@pytest.mark.parametrize("layout", ("nchw", "nhwc"))
@pytest.mark.parametrize("dtype, shape", [("fp16", (1, 256, 256, 256)), ("fp32", (1, 128, 256, 256))])
def test_persistent_streams(handle, persistent, dtype, shape, layout):
    """x and dy of 64 MB together, past what the grid holds on chip (about 44
    MB on an H100 or H200): part of each block's share is read again from L2."""
    run_both(handle, shape, 32, dtype, layout, 193, activation="swish")


@pytest.mark.parametrize("in_place", (False, True), ids=("apart", "in_place"))
@pytest.mark.parametrize("dtype, shape", [("fp32", (1, 128, 512, 512)), ("fp16", (2, 128, 512, 512)),
                                          ("fp16", (8, 320, 128, 128))],
                         ids=("groups", "samples", "many_samples"))
def test_persistent_rounds(handle, dtype, shape, in_place):
    """NCHW forwards of 128 MB, past what the grid holds on chip and half the
    L2 (about 44 + 25 MB on an H100 or H200), and of 80 MB whose groups are
    smaller than a block's share of the whole: there the persistent forward
    runs as launches over halves of the sample's groups, a sample, or four
    samples each (plan_gn_persistent_rounds), elsewhere whatever the planner
    takes.  The picked groups lie in every round."""
    x = random_data(shape, dtype, 199, "nchw")
    run_forward(handle, x, 32, 199, activation="swish", y=x if in_place else None)


@pytest.mark.parametrize("dtype, shape", [("fp16", (2, 1280, 64, 64)), ("bf16", (2, 1280, 64, 64)),
                                          ("fp32", (2, 640, 64, 64))])
def test_channels_last_backward_past_the_tiles(handle, dtype, shape):
    """The default choice where channels-last backward tiles would take
    three rounds of clusters: on an H100 or H200 the persistent backward
    (gn_backward_tiles_yield), elsewhere whatever the planner takes."""
    run_both(handle, shape, 32, dtype, "nhwc", 197, activation="swish")


@pytest.mark.parametrize("layout", ("nchw", "nhwc"))
@pytest.mark.parametrize("dtype", ("fp32", "fp16"))
@pytest.mark.parametrize("shape, groups", [(ON_CHIP_SMALL, ON_CHIP_SMALL_GROUPS), ((2, 320, 64, 64), 32),
                                           ((2, 1280, 8, 8), 32)], ids=("small", "sd", "sd8"))
def test_off_chip(handle, off_chip, shape, groups, dtype, layout):
    """The older kernels on problems the on-chip ones take by default."""
    run_both(handle, shape, groups, dtype, layout, 181, activation="swish")
