"""miopen_bn.torch on CUDA tensors: modules against torch.nn's, torch's
current stream, CUDA graph capture (torch.cuda.graph and torch.compile's
mode="reduce-overhead"), inductor, gradcheck in float64.  Device runs only."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

import miopen_bn.torch as mbt  # noqa: E402

pytestmark = pytest.mark.gpu

if not torch.cuda.is_available():  # pragma: no cover - the gpu marker skips first on machines without one
    pytest.skip("torch sees no CUDA device", allow_module_level=True)

DEVICE = "cuda"


def _model(norm_cls, gn_cls, **gn_kwargs):
    torch.manual_seed(0)
    return torch.nn.Sequential(
        torch.nn.Conv2d(3, 16, 3, padding=1), norm_cls(16), torch.nn.ReLU(),
        torch.nn.Conv2d(16, 16, 3, padding=1), gn_cls(4, 16, **gn_kwargs),
        torch.nn.Flatten(), torch.nn.Linear(16 * 8 * 8, 5),
    ).to(DEVICE)


def _pair():
    theirs = _model(torch.nn.BatchNorm2d, torch.nn.GroupNorm)
    ours = mbt.convert(_model(torch.nn.BatchNorm2d, torch.nn.GroupNorm))
    return theirs, ours


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
@pytest.mark.parametrize("channels_last", [False, True])
def test_modules_match_torch_on_cuda(dtype, channels_last):
    gen = torch.Generator(device=DEVICE).manual_seed(1)
    fmt = torch.channels_last if channels_last else torch.contiguous_format
    for cls_t, cls_o, shape in ((torch.nn.BatchNorm2d, mbt.BatchNorm2d, (8, 6, 5, 7)),
                                (torch.nn.GroupNorm, mbt.GroupNorm, (8, 6, 5, 7))):
        args = (3, 6) if cls_t is torch.nn.GroupNorm else (6,)
        theirs, ours = cls_t(*args).to(DEVICE), cls_o(*args).to(DEVICE)
        if cls_t is torch.nn.GroupNorm:  # torch's group norm wants parameters of x's dtype
            theirs, ours = theirs.to(dtype), ours.to(dtype)
        x = torch.randn(shape, device=DEVICE, generator=gen).to(dtype).contiguous(memory_format=fmt)
        xs = [x.clone().requires_grad_() for _ in range(2)]
        ys = [theirs(xs[0]), ours(xs[1])]
        assert ys[1].dtype == ys[0].dtype and ys[1].is_contiguous(memory_format=fmt)
        dy = torch.randn_like(ys[0])
        for y in ys:
            y.backward(dy)
        tol = dict(rtol=2e-2, atol=2e-2) if dtype != torch.float32 else dict(rtol=1e-4, atol=1e-4)
        torch.testing.assert_close(ys[1], ys[0], **tol)
        torch.testing.assert_close(xs[1].grad, xs[0].grad, **tol)
        # The weight gradient sums a whole channel or group: torch's half
        # kernels round it in the input's type, so both are held against the
        # same layer in float64 (ours must be at least as close as torch's).
        exact = cls_t(*args).to(DEVICE).double()
        exact.load_state_dict({k: v.double() for k, v in theirs.state_dict().items()})
        x64 = x.double().requires_grad_()
        exact(x64).backward(dy.double())
        ours_error = (ours.weight.grad.double() - exact.weight.grad).abs().max().item()
        theirs_error = (theirs.weight.grad.double() - exact.weight.grad).abs().max().item()
        scale = exact.weight.grad.abs().max().item()
        assert ours_error <= max(theirs_error, tol["atol"] * max(1.0, scale)), (ours_error, theirs_error)
        for name, buffer in theirs.named_buffers():
            torch.testing.assert_close(dict(ours.named_buffers())[name], buffer, **tol)


def test_autocast_bf16_matches_torch_dtypes():
    theirs, ours = _pair()
    x = torch.randn(4, 3, 8, 8, device=DEVICE).contiguous(memory_format=torch.channels_last)
    with torch.autocast("cuda", dtype=torch.bfloat16):
        a, b = theirs[:5](x), ours[:5](x)
    assert a.dtype == b.dtype  # group norm runs in float32 under CUDA autocast, as torch's
    torch.testing.assert_close(b, a, rtol=3e-2, atol=3e-2)


def test_gradcheck_float64_on_cuda():
    x = torch.randn(3, 4, 2, 3, device=DEVICE, dtype=torch.float64, requires_grad=True)
    w = (torch.rand(4, device=DEVICE, dtype=torch.float64) + .5).requires_grad_()
    b = torch.randn(4, device=DEVICE, dtype=torch.float64, requires_grad=True)
    ops = torch.ops.miopen_bn
    assert torch.autograd.gradcheck(lambda x, w, b: ops.batch_norm_train(x, w, b, None, None, .1, 1e-5)[0],
                                    (x, w, b))
    assert torch.autograd.gradcheck(lambda x, w, b: ops.group_norm(x, 2, w, b, 1e-5, True)[0], (x, w, b))
    assert torch.autograd.gradcheck(lambda x, w, b: mbt.batch_norm(x, None, None, w, b, True), (x, w, b))


def test_work_goes_on_torchs_current_stream():
    bn = mbt.BatchNorm2d(8).to(DEVICE)
    x = torch.randn(64, 8, 64, 64, device=DEVICE)
    expected = torch.nn.functional.batch_norm(x, None, None, bn.weight, bn.bias, True)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            y = bn(x)
    torch.cuda.current_stream().wait_stream(side)
    torch.testing.assert_close(y, expected, rtol=1e-4, atol=1e-4)


def test_cuda_graph_capture_replays_training_steps():
    theirs, ours = _pair()
    static_x = torch.randn(8, 3, 8, 8, device=DEVICE)
    opt = torch.optim.SGD(ours.parameters(), lr=0.01)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # warm-up, as torch.cuda.graph asks
        for _ in range(2):
            opt.zero_grad(set_to_none=True)
            ours(static_x).square().mean().backward()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    opt.zero_grad(set_to_none=True)
    with torch.cuda.graph(graph):
        loss = ours(static_x).square().mean()
        loss.backward()
    for seed in range(3):
        static_x.copy_(torch.randn(8, 3, 8, 8, device=DEVICE, generator=torch.Generator(device=DEVICE).manual_seed(seed)))
        graph.replay()
        expected = theirs(static_x).square().mean()
        torch.testing.assert_close(loss, expected, rtol=1e-4, atol=1e-5)
        theirs.zero_grad()
        expected.backward()
        torch.testing.assert_close(ours[0].weight.grad, theirs[0].weight.grad, rtol=1e-3, atol=1e-5)


# Inductor warns from inside its own compile (TF32 advice, deprecated jit
# APIs); pytest's "error" filter would turn that into a failed compile.
@pytest.mark.filterwarnings("ignore::UserWarning", "ignore::DeprecationWarning")
@pytest.mark.parametrize("mode", ["default", "reduce-overhead"])
def test_torch_compile_inductor_fullgraph(mode):
    theirs, ours = _pair()
    run = torch.compile(ours, fullgraph=True, mode=mode)
    for seed in range(4):
        x = torch.randn(8, 3, 8, 8, device=DEVICE, generator=torch.Generator(device=DEVICE).manual_seed(seed))
        ours.zero_grad()
        theirs.zero_grad()
        got = run(x).square().mean()
        got.backward()
        want = theirs(x).square().mean()
        want.backward()
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-5)
        torch.testing.assert_close(ours[0].weight.grad, theirs[0].weight.grad, rtol=1e-3, atol=1e-5)
    torch.testing.assert_close(ours[1].running_var, theirs[1].running_var, rtol=1e-4, atol=1e-5)


def test_layer_object_on_the_gpu_round_trips(tmp_path):
    import miopen_bn

    layer = miopen_bn.BatchNorm(4, device="gpu")
    x = torch.randn(8, 4, 5, 5, device=DEVICE)
    y = layer.forward_training(x)
    torch.testing.assert_close(y, torch.nn.functional.batch_norm(x, None, None, training=True), rtol=1e-4,
                               atol=1e-4)
    dx = layer.backward(x, torch.ones_like(x))
    assert dx.is_cuda and layer.grad_bias.is_cuda
    layer.save(tmp_path / "g.safetensors")
    back = miopen_bn.BatchNorm.load(tmp_path / "g.safetensors")
    assert back.running_var.is_cuda
    torch.testing.assert_close(back.running_var, layer.running_var, rtol=0, atol=0)
    host = miopen_bn.BatchNorm.load(tmp_path / "g.safetensors", device="cpu")
    assert isinstance(host.running_var, __import__("numpy").ndarray)
