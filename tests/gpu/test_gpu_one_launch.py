"""The one-launch GPU paths on the shapes that take them.

Batch-norm training and backward on packed NCHW / NHWC tensors of fp16,
bf16 or fp32 that fit in the shared memory of a resident grid run as one
launch (native/gpu/bn_resident.hip); inference on such tensors as one dense
pass (bn_dense_inference.hip).  The shapes below are picked to reach every
branch of those kernels: one block and many, NHWC with C from 8 to the
2048-channel limit, NCHW planes split into segments (few planes, large
planes), odd plane lengths that leave vectors straddling planes, 3-D
tensors, reductions short enough for the double-precision dx, tensors near
the on-chip capacity, in-place calls, blending, repeatability and CUDA graph
replay (the barrier counters must be back at zero after every launch).
By default, packed NHWC training and backward from 1 MB and 1024 rows take the NHWC
columns (bn_nhwc_columns.hip: a column's blocks fold flat, in fewer and
fuller blocks where the registers allow, as 8x16x64x64's and half
4x16x128x128's, or as a tree of teams where a column has too many rows for
that, as float 4x16x128x128's) unless the channel tiles hold them on a
small grid (4x320x20x20's: clusters of at most 4 blocks on at most 2/3 of
the multiprocessors), and shapes whose channels
fit a block's or a cluster's registers the channel tiles (bn_channel_tile.hip: one channel
per tile in NCHW, 8-16 in NHWC; 64x256x14x14 and 16x128x56x56 NCHW need
clusters of blocks; NCHW channels as small as 2x64x7x7's, 8x2048x7x7's and
2x64x4x4's are each held by one wave) and the rest of these shapes the size
rules of the other paths, and inference the dense pass.  Each test also runs
with each one-launch algorithm forced (MIOPEN_BN_GPU_ALGORITHM, read at each
call): every shape it can take then goes to it (the tiles in clusters of
large shares included, the resident grid below its size rule, the NHWC
columns below theirs); a shape it cannot take is skipped here (tests/gpu/
test_gpu_algorithms.py checks the refusals).  Each result is checked against
the float64 reference with NaN-poisoned outputs.  The device run repeats the
C GPU-versus-CPU program with MIOPEN_BN_GPU_ALGORITHM=multi_pass so the
multi-pass kernels stay checked on every shape too.
"""
import pytest

torch = pytest.importorskip("torch")
import miopen_bn as mbn  # noqa: E402
from support.torch_tensors import random_data  # noqa: E402

pytestmark = pytest.mark.gpu

if not (mbn.lib.miopenBNHasGpuSupport() and torch.cuda.is_available()):
    pytest.skip("needs the GPU backend and a CUDA device", allow_module_level=True)

from test_gpu_batchnorm import run_backward, run_inference, run_training  # noqa: E402

SHAPES = [
    (2, 64, 7, 7),        # one block; NCHW vectors straddle planes of 49
    (2, 64, 4, 4),        # M = 32: dx in double
    (3, 40, 13, 11),      # odd plane, C a multiple of 8 for NHWC
    (1, 4, 96, 96),       # 4 planes split into segments
    (8, 2048, 7, 7),      # the channel limit, many blocks
    (2, 16, 3, 5, 7),     # NCDHW / NDHWC
    (64, 256, 14, 14),    # 3.2M values: every multiprocessor busy
    (16, 128, 56, 56),    # 6.4M values: fp32 training near the on-chip capacity
    (4, 320, 20, 20),     # NHWC: tiles in clusters of 4 (half) or 2 (float); forced columns of 32 channels
    (8, 16, 64, 64),      # NHWC columns folding flat in fewer, fuller blocks (float: 8 register rows)
    (4, 16, 128, 128),    # the same with 8 register rows (half, bfloat16); float's column folds as a tree
]
DTYPES = ("fp16", "bf16", "fp32")
LAYOUTS = ("nchw", "nhwc")
# "default": each call's own choice.
ONE_LAUNCH = ("default", "nhwc_columns", "wave_tiles", "channel_tiles", "resident")
INFERENCE = ("default", "dense_inference")


def ids(shape):
    return "x".join(map(str, shape))


@pytest.fixture(scope="module")
def handle():
    with mbn.Handle(backend="gpu") as gpu_handle:
        yield gpu_handle


def forced(monkeypatch, algorithm, run, *args, **options):
    """`run` with `algorithm` forced, skipped where it cannot take the shape."""
    if algorithm != "default":
        monkeypatch.setenv("MIOPEN_BN_GPU_ALGORITHM", algorithm)
    try:
        return run(*args, **options)
    except mbn.MIOpenNotImplementedError as error:
        if algorithm == "default" or "cannot serve this" not in str(error):
            raise
        pytest.skip(f"{algorithm} cannot take this shape")


@pytest.mark.parametrize("algorithm", ONE_LAUNCH)
@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", SHAPES, ids=ids)
def test_training(handle, monkeypatch, shape, dtype, layout, algorithm):
    x = random_data(shape, dtype, 11, layout)
    forced(monkeypatch, algorithm, run_training, handle, x, "spatial", "running+saved", 11)


@pytest.mark.parametrize("algorithm", ONE_LAUNCH)
@pytest.mark.parametrize("saved", (True, False), ids=("saved", "recomputed"))
@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", SHAPES, ids=ids)
def test_backward(handle, monkeypatch, shape, dtype, layout, saved, algorithm):
    x = random_data(shape, dtype, 21, layout)
    dy = random_data(shape, dtype, 22, layout)
    forced(monkeypatch, algorithm, run_backward, handle, x, dy, "spatial", saved, 21)


# Channels-last backward whose rows the NHWC columns hold in 6 register rows a
# thread (the instance between 4 and the streamed form; the counts are for a
# 132-multiprocessor device): 64-byte columns of 33 blocks folding flat (half,
# bfloat16), 128-byte columns (float), one column of one vector folding as a
# tree of teams.
SIX_REGISTER_ROWS = [((16, 256, 28, 28), "fp16"), ((16, 256, 28, 28), "bf16"), ((6, 256, 31, 31), "fp32"),
                     ((90, 8, 64, 64), "fp16")]


@pytest.mark.parametrize("saved", (True, False), ids=("saved", "recomputed"))
@pytest.mark.parametrize("shape,dtype", SIX_REGISTER_ROWS, ids=[f"{ids(s)}-{d}" for s, d in SIX_REGISTER_ROWS])
def test_backward_six_register_rows(handle, monkeypatch, shape, dtype, saved):
    x = random_data(shape, dtype, 23, "nhwc")
    dy = random_data(shape, dtype, 24, "nhwc")
    monkeypatch.setenv("MIOPEN_BN_GPU_ALGORITHM", "nhwc_columns")
    run_backward(handle, x, dy, "spatial", saved, 23)


@pytest.mark.parametrize("algorithm", INFERENCE)
@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", SHAPES, ids=ids)
def test_inference(handle, monkeypatch, shape, dtype, layout, algorithm):
    x = random_data(shape, dtype, 31, layout)
    forced(monkeypatch, algorithm, run_inference, handle, x, "spatial", True, 31)


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("dtype", ("fp16", "fp32"))
def test_inference_over_many_row_steps(handle, layout, dtype):
    """2x8x1024x1024: in NHWC a grid of 2048 (half) or 4096 (float) blocks,
    one row step each; in NCHW planes of 2^20 elements.  Plain, then
    blended into a prior y."""
    x = random_data((2, 8, 1024, 1024), dtype, 51, layout)
    run_inference(handle, x, "spatial", True, 51)
    prior = random_data(x.shape, dtype, 52, layout)
    run_inference(handle, x, "spatial", True, 53, alpha=0.75, beta=0.5, y=prior)


@pytest.mark.parametrize("algorithm", ONE_LAUNCH)
@pytest.mark.parametrize("layout", LAYOUTS)
def test_in_place_and_blending(handle, monkeypatch, layout, algorithm):
    forced(monkeypatch, algorithm, in_place_and_blending, handle, layout)


def in_place_and_blending(handle, layout):
    shape = (4, 32, 9, 9)
    x = random_data(shape, "fp16", 41, layout)
    run_training(handle, x, "spatial", "running+saved", 41, y=x)
    x = random_data(shape, "fp16", 42, layout)
    dy = random_data(shape, "fp16", 43, layout)
    run_backward(handle, x, dy, "spatial", False, 42, dx=dy)
    x = random_data(shape, "fp32", 44, layout)
    prior = random_data(shape, "fp32", 45, layout)
    run_training(handle, x, "spatial", "saved", 44, alpha=0.75, beta=0.5, y=prior.clone())
    dy = random_data(shape, "fp32", 46, layout)
    run_backward(handle, x, dy, "spatial", True, 44, alpha_data=0.5, beta_data=0.25,
                 dx=prior.clone())


def _training_and_backward(handle, x, dy, scale, bias, y, dx):
    _, mean, inv_std = mbn.batchnorm_forward_training(x, scale, bias, y=y, handle=handle)
    mbn.batchnorm_backward(x, dy, scale, saved_mean=mean, saved_inv_std=inv_std, dx=dx,
                           handle=handle)
    return mean, inv_std


@pytest.mark.parametrize("algorithm", ONE_LAUNCH)
@pytest.mark.parametrize("layout", LAYOUTS)
def test_repeatable_and_graph_replay(handle, monkeypatch, layout, algorithm):
    """Bitwise equal results from repeated calls and from CUDA graph replays
    on the handle's stream (a barrier counter left non-zero would hang or
    desynchronize the second replay)."""
    forced(monkeypatch, algorithm, repeatable_and_graph_replay, handle, layout)


def repeatable_and_graph_replay(handle, layout):
    shape = (32, 128, 28, 28)
    x = random_data(shape, "fp16", 51, layout)
    dy = random_data(shape, "fp16", 52, layout)
    scale = torch.rand(shape[1], device="cuda", dtype=torch.float32) + 0.5
    bias = torch.rand(shape[1], device="cuda", dtype=torch.float32) - 0.5
    y0, dx0 = torch.empty_like(x), torch.empty_like(x)
    first = _training_and_backward(handle, x, dy, scale, bias, y0, dx0)
    torch.cuda.synchronize()
    for _ in range(3):
        y1, dx1 = torch.empty_like(x), torch.empty_like(x)
        again = _training_and_backward(handle, x, dy, scale, bias, y1, dx1)
        torch.cuda.synchronize()
        assert torch.equal(y0, y1) and torch.equal(dx0, dx1)
        assert all(torch.equal(a, b) for a, b in zip(first, again))

    stream = torch.cuda.Stream()
    with mbn.Handle(backend="gpu", stream=stream.cuda_stream) as graph_handle:
        y2, dx2 = torch.empty_like(x), torch.empty_like(x)
        with torch.cuda.stream(stream):
            _training_and_backward(graph_handle, x, dy, scale, bias, y2, dx2)  # warm-up: scratch grows
        stream.synchronize()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, stream=stream):
            _training_and_backward(graph_handle, x, dy, scale, bias, y2, dx2)
        for _ in range(3):
            y2.fill_(float("nan"))
            dx2.fill_(float("nan"))
            graph.replay()
            torch.cuda.synchronize()
            assert torch.equal(y0, y2) and torch.equal(dx0, dx2)
