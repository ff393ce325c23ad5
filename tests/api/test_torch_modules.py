"""miopen_bn.torch: the operators, the modules and convert(), against the
float64 reference and against torch.nn's own modules (the drop-in contract).

CPU tensors here (the library's CPU backend); the same checks on CUDA
tensors, CUDA graphs and torch.compile's inductor are in
test_torch_gpu.py (marked gpu)."""

from __future__ import annotations

import numpy as np
import pytest
import support

torch = pytest.importorskip("torch")

import miopen_bn  # noqa: E402
import miopen_bn.torch as mbt  # noqa: E402
from miopen_bn import reference, tolerances  # noqa: E402

NAMES = {torch.float32: "float32", torch.float64: "float64", torch.bfloat16: "bfloat16", torch.float16: "float16"}
BN_CLASSES = [
    (torch.nn.BatchNorm1d, mbt.BatchNorm1d, (6, 5)),
    (torch.nn.BatchNorm1d, mbt.BatchNorm1d, (3, 5, 4)),
    (torch.nn.BatchNorm2d, mbt.BatchNorm2d, (3, 5, 4, 3)),
    (torch.nn.BatchNorm3d, mbt.BatchNorm3d, (2, 5, 3, 2, 3)),
]


@pytest.fixture(autouse=True)
def _one_torch_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # the machine's cores are shared; torch's pool only adds noise here
    yield
    torch.set_num_threads(threads)


def _seeded(request) -> torch.Generator:
    return torch.Generator().manual_seed(support.seed(request.node.nodeid))


def _check(out, ref, kind, name):
    tolerances.check(out.detach().double().numpy(), ref, NAMES[out.dtype], kind, name)


def _pair(torch_cls, ours_cls, gen, **kwargs):
    """torch's module and ours with the same (random) state."""
    theirs = torch_cls(5, **kwargs)
    ours = ours_cls(5, **kwargs)
    with torch.no_grad():
        if theirs.affine:
            theirs.weight.copy_(torch.rand(5, generator=gen) + 0.5)
            theirs.bias.copy_(torch.randn(5, generator=gen))
        if theirs.track_running_stats:
            theirs.running_mean.copy_(torch.randn(5, generator=gen))
            theirs.running_var.copy_(torch.rand(5, generator=gen) + 0.5)
    ours.load_state_dict(theirs.state_dict())
    return theirs, ours


@pytest.mark.parametrize("torch_cls,ours_cls,shape", BN_CLASSES, ids=lambda v: getattr(v, "__name__", str(v)))
@pytest.mark.parametrize("momentum", [0.1, None])
def test_batchnorm_module_trains_like_torch_and_the_reference(request, torch_cls, ours_cls, shape, momentum):
    gen = _seeded(request)
    theirs, ours = _pair(torch_cls, ours_cls, gen, momentum=momentum)
    for step in range(3):
        x = torch.randn(shape, generator=gen) * 3 + 1
        dy = torch.randn(shape, generator=gen)
        x_ours = x.clone().requires_grad_()
        before = (ours.running_mean.clone(), ours.running_var.clone())
        ours.zero_grad()
        y = ours(x_ours)
        y.backward(dy)
        factor = 1.0 / (step + 1) if momentum is None else momentum
        expected = reference.batchnorm_forward_training(
            x.numpy(), ours.weight.detach().numpy(), ours.bias.detach().numpy(), exp_avg_factor=factor,
            running_mean=before[0].numpy(), running_var=before[1].numpy())
        _check(y, expected["y"], "elementwise", "y")
        _check(ours.running_mean, expected["running_mean"], "reduction", "running_mean")
        _check(ours.running_var, expected["running_var"], "reduction", "running_var")
        grads = reference.batchnorm_backward(x.numpy(), dy.numpy(), ours.weight.detach().numpy(),
                                             saved_mean=expected["saved_mean"],
                                             saved_inv_std=expected["saved_inv_std"])
        _check(x_ours.grad, grads["dx"], "elementwise", "dx")
        _check(ours.weight.grad, grads["dscale"], "reduction", "dweight")
        _check(ours.bias.grad, grads["dbias"], "reduction", "dbias")
        theirs(x)
    assert int(ours.num_batches_tracked) == int(theirs.num_batches_tracked) == 3
    torch.testing.assert_close(ours.running_var, theirs.running_var, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("torch_cls,ours_cls,shape", BN_CLASSES[1:3], ids=lambda v: getattr(v, "__name__", str(v)))
def test_batchnorm_module_eval_and_its_gradient_match_torch(request, torch_cls, ours_cls, shape):
    gen = _seeded(request)
    theirs, ours = _pair(torch_cls, ours_cls, gen)
    theirs.eval()
    ours.eval()
    x = torch.randn(shape, generator=gen, dtype=torch.float64)
    theirs.double()
    ours.double()
    xs = [x.clone().requires_grad_() for _ in range(2)]
    ys = [theirs(xs[0]), ours(xs[1])]
    dy = torch.randn(shape, generator=gen, dtype=torch.float64)
    for y in ys:
        y.backward(dy)
    torch.testing.assert_close(ys[1], ys[0], rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(xs[1].grad, xs[0].grad, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(ours.weight.grad, theirs.weight.grad, rtol=1e-12, atol=1e-12)
    with torch.no_grad():  # the no-gradient path is a different one
        torch.testing.assert_close(ours(x), theirs(x), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("kwargs", [dict(affine=False), dict(track_running_stats=False),
                                    dict(affine=False, track_running_stats=False)], ids=str)
def test_batchnorm_module_options_match_torch(request, kwargs):
    gen = _seeded(request)
    theirs, ours = _pair(torch.nn.BatchNorm2d, mbt.BatchNorm2d, gen, **kwargs)
    assert list(ours.state_dict()) == list(theirs.state_dict())
    for training in (True, False):
        theirs.train(training)
        ours.train(training)
        x = torch.randn(4, 5, 3, 3, generator=gen, dtype=torch.float64)
        torch.testing.assert_close(ours.double()(x), theirs.double()(x), rtol=1e-12, atol=1e-12)
        for name, buffer in theirs.named_buffers():
            torch.testing.assert_close(dict(ours.named_buffers())[name], buffer, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("silu", [False, True])
@pytest.mark.parametrize("affine", [True, False])
def test_groupnorm_module_matches_the_reference(request, silu, affine):
    gen = _seeded(request)
    ours = mbt.GroupNorm(3, 6, affine=affine, activation="silu" if silu else None)
    if affine:
        with torch.no_grad():
            ours.weight.copy_(torch.rand(6, generator=gen) + 0.5)
            ours.bias.copy_(torch.randn(6, generator=gen))
    x = torch.randn(4, 6, 3, 5, generator=gen).requires_grad_()
    dy = torch.randn(4, 6, 3, 5, generator=gen)
    y = ours(x)
    y.backward(dy)
    w = ours.weight.detach().numpy() if affine else None
    b = ours.bias.detach().numpy() if affine else None
    act = "swish" if silu else None
    expected = reference.groupnorm_forward(x.detach().numpy(), 3, w, b, activation=act)
    _check(y, expected["y"], "elementwise", "y")
    grads = reference.groupnorm_backward(x.detach().numpy(), dy.numpy(), 3, w, expected["mean"], expected["rstd"],
                                         bias=b, activation=act)
    _check(x.grad, grads["dx"], "elementwise", "dx")
    if affine:
        _check(ours.weight.grad, grads["dweight"], "reduction", "dweight")
        _check(ours.bias.grad, grads["dbias"], "reduction", "dbias")


def test_gradcheck_float64_on_every_operator(request):
    gen = _seeded(request)

    def data(*shape):
        return torch.randn(*shape, generator=gen, dtype=torch.float64).requires_grad_()

    x, w, b = data(3, 4, 2, 3), (torch.rand(4, generator=gen, dtype=torch.float64) + .5).requires_grad_(), data(4)
    mean, var = torch.zeros(4, dtype=torch.float64), torch.rand(4, generator=gen, dtype=torch.float64) + .5
    ops = torch.ops.miopen_bn
    assert torch.autograd.gradcheck(lambda x, w, b: ops.batch_norm_train(x, w, b, None, None, .1, 1e-5)[0],
                                    (x, w, b))
    assert torch.autograd.gradcheck(lambda x, w, b: ops.batch_norm_infer(x, w, b, mean, var, 1e-5), (x, w, b))
    for silu in (False, True):
        assert torch.autograd.gradcheck(lambda x, w, b: ops.group_norm(x, 2, w, b, 1e-5, silu)[0], (x, w, b))
    # and the eager path the modules take
    assert torch.autograd.gradcheck(lambda x, w, b: mbt.batch_norm(x, None, None, w, b, True), (x, w, b))
    assert torch.autograd.gradcheck(lambda x, w, b: mbt.group_norm(x, 2, w, b, activation="silu"), (x, w, b))


def test_operators_pass_torch_library_opcheck(request):
    gen = _seeded(request)
    x = torch.randn(3, 4, 2, 2, generator=gen).requires_grad_()
    w, b = torch.rand(4, generator=gen).requires_grad_(), torch.randn(4, generator=gen).requires_grad_()
    rm, rv = torch.zeros(4), torch.ones(4)
    ops = torch.ops.miopen_bn
    tests = ("test_schema", "test_faketensor", "test_autograd_registration")
    torch.library.opcheck(ops.batch_norm_train, (x, w, b, rm, rv, .1, 1e-5), test_utils=tests)
    torch.library.opcheck(ops.batch_norm_infer, (x, w, b, rm, rv, 1e-5), test_utils=tests)
    torch.library.opcheck(ops.group_norm, (x, 2, w, b, 1e-5, True), test_utils=tests)
    with torch.no_grad():
        y, sm, si, _, _ = ops.batch_norm_train(x, w, b, None, None, .1, 1e-5)
        _, gm, gr = ops.group_norm(x, 2, w, b, 1e-5, True)
    torch.library.opcheck(ops.batch_norm_backward, (x.detach(), torch.ones_like(y), w.detach(), sm, si, 1e-5),
                          test_utils=tests[:2])
    torch.library.opcheck(ops.group_norm_backward,
                          (x.detach(), torch.ones_like(y), 2, w.detach(), b.detach(), gm, gr, True),
                          test_utils=tests[:2])


def test_torch_compile_fullgraph_traces_through_and_matches_eager(request):
    gen = _seeded(request)

    def model():
        torch.manual_seed(0)
        return torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.BatchNorm2d(8), torch.nn.ReLU(),
                                   torch.nn.Conv2d(8, 8, 3, padding=1), torch.nn.GroupNorm(4, 8), torch.nn.SiLU(),
                                   torch.nn.Flatten(), torch.nn.Linear(8 * 5 * 5, 3))

    eager, compiled = mbt.convert(model()), mbt.convert(model())
    run = torch.compile(compiled, fullgraph=True, backend="aot_eager")
    for _ in range(2):
        x = torch.randn(4, 3, 5, 5, generator=gen)
        for m, fn in ((eager, eager), (compiled, run)):
            m.zero_grad()
            fn(x).square().sum().backward()
        torch.testing.assert_close(compiled[0].weight.grad, eager[0].weight.grad)
    torch.testing.assert_close(compiled[1].running_var, eager[1].running_var)
    assert int(compiled[1].num_batches_tracked) == 2
    eager.eval()
    compiled.eval()
    torch.testing.assert_close(run(x), eager(x))


def test_convert_swaps_modules_in_place_keeping_tensors():
    model = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 1), torch.nn.BatchNorm2d(4),
                                torch.nn.Sequential(torch.nn.GroupNorm(2, 4), torch.nn.BatchNorm1d(4)))
    weight, running = model[1].weight, model[1].running_mean
    keys = list(model.state_dict())
    assert mbt.convert(model) is model
    assert type(model[1]) is mbt.BatchNorm2d and type(model[2][0]) is mbt.GroupNorm
    assert type(model[2][1]) is mbt.BatchNorm1d
    assert model[1].weight is weight and model[1].running_mean is running
    assert list(model.state_dict()) == keys
    assert type(mbt.convert(torch.nn.BatchNorm3d(2))) is mbt.BatchNorm3d


def test_state_dict_of_torch_modules_loads_strictly():
    theirs = torch.nn.Sequential(torch.nn.BatchNorm2d(4, momentum=None), torch.nn.GroupNorm(2, 4))
    theirs(torch.randn(2, 4, 3, 3))
    ours = torch.nn.Sequential(mbt.BatchNorm2d(4, momentum=None), mbt.GroupNorm(2, 4, activation="silu"))
    ours.load_state_dict(theirs.state_dict(), strict=True)
    assert int(ours[0].num_batches_tracked) == 1
    assert "activation='silu'" in repr(ours[1])


def test_channels_last_and_autocast_behave_as_torch():
    x = torch.randn(2, 4, 3, 3).contiguous(memory_format=torch.channels_last)
    ours, theirs = mbt.BatchNorm2d(4), torch.nn.BatchNorm2d(4)
    y = ours(x)
    assert y.is_contiguous(memory_format=torch.channels_last)
    torch.testing.assert_close(y, theirs(x))
    with torch.autocast("cpu", dtype=torch.bfloat16):
        xb = x.bfloat16()
        for ours_m, theirs_m in ((ours, theirs), (mbt.GroupNorm(2, 4), torch.nn.GroupNorm(2, 4))):
            got, want = ours_m(xb), theirs_m(xb)
            assert got.dtype == want.dtype
            torch.testing.assert_close(got.float(), want.float(), rtol=2e-2, atol=2e-2)


def test_library_errors_arrive_with_their_types_and_messages():
    with pytest.raises(miopen_bn.MIOpenBadParmError) as caught:  # also a ValueError, as torch raises
        mbt.BatchNorm1d(3)(torch.randn(1, 3))  # one value per channel cannot train
    assert caught.value.message
    with pytest.raises(ValueError, match="expected 4D input"):
        mbt.BatchNorm2d(3)(torch.randn(2, 3, 4))
    with pytest.raises(miopen_bn.MIOpenNotImplementedError, match="miopenInt64"):  # the library's check
        mbt.group_norm(torch.ones(2, 4, 3, dtype=torch.int64), 2)
    with pytest.raises(TypeError, match="complex"):  # a dtype the library has no name for
        mbt.batch_norm(torch.ones(2, 3, dtype=torch.complex64), None, None, training=True)
    with pytest.raises(ValueError, match="activation"):
        mbt.GroupNorm(2, 4, activation="relu")


def test_strided_parameters_and_statistics_match_torch():
    """Every other element of longer tensors as weight, bias and running
    statistics: the saved statistics and the gradients each share a
    parameter's descriptor, so they are allocated with its strides."""
    def strided(values):
        return torch.stack([values, torch.full_like(values, float("nan"))], 1).reshape(-1)[::2]

    x = torch.randn(4, 3, 5, 2, dtype=torch.float64)
    dy = torch.randn_like(x)
    outputs = {}
    for name, fn in (("ours", mbt.batch_norm), ("torch", torch.nn.functional.batch_norm)):
        weight = strided(torch.tensor([0.5, 1.5, 2.0], dtype=torch.float64)).requires_grad_()
        bias = strided(torch.tensor([0.1, -0.2, 0.3], dtype=torch.float64)).requires_grad_()
        mean, var = strided(torch.zeros(3, dtype=torch.float64)), strided(torch.ones(3, dtype=torch.float64))
        xg = x.clone().requires_grad_()
        y = fn(xg, mean, var, weight, bias, True, 0.1, 1e-5)
        y.backward(dy)
        outputs[name] = (y, mean, var, xg.grad, weight.grad, bias.grad)
    for ours, theirs in zip(outputs["ours"], outputs["torch"]):
        torch.testing.assert_close(ours, theirs)
    for name in ("ours", "torch"):
        assert outputs[name][1].stride() == (2,)


def test_saved_statistics_take_their_running_statistics_layouts(request):
    """A running statistic's descriptor describes its saved one too, so each
    saved statistic is allocated like its own running statistic: here a
    float32 running mean and a float64 running variance (x float64).  The
    library wrote float64 inverse stds into a float32 buffer before."""
    gen = _seeded(request)
    x = torch.randn(4, 3, 2, 2, generator=gen, dtype=torch.float64)
    dy = torch.randn(4, 3, 2, 2, generator=gen, dtype=torch.float64)
    rm, rv = torch.zeros(3), torch.ones(3, dtype=torch.float64)
    ones, zeros = np.ones(3), np.zeros(3)
    expected = reference.batchnorm_forward_training(x.numpy(), ones, zeros, running_mean=rm.numpy(),
                                                    running_var=rv.numpy())
    args = (x, None, None, rm, rv, 0.1, 1e-5)
    _, saved_mean, saved_invstd, _, _ = torch.ops.miopen_bn.batch_norm_train(*args)
    assert (saved_mean.dtype, saved_invstd.dtype) == (torch.float32, torch.float64)
    _check(saved_mean, expected["saved_mean"], "reduction", "saved_mean")
    _check(saved_invstd, expected["saved_inv_std"], "reduction", "saved_inv_std")
    torch.library.opcheck(torch.ops.miopen_bn.batch_norm_train, args, test_utils=("test_faketensor",))
    xg = x.clone().requires_grad_()  # the eager autograd path saves them likewise for its backward
    mbt.batch_norm(xg, rm.clone(), rv.clone(), None, None, True).backward(dy)
    grads = reference.batchnorm_backward(x.numpy(), dy.numpy(), ones, saved_mean=saved_mean.double().numpy(),
                                         saved_inv_std=saved_invstd.numpy())  # the float32 mean's rounding
    _check(xg.grad, grads["dx"], "elementwise", "dx")


def test_repeated_calls_make_outputs_laid_out_as_the_first_calls(request):
    """The eager path's first call of a layout leaves how to make its
    outputs; later calls make new ones laid out alike (channels_last y and
    dx, saved statistics like their running ones, gradients like strided
    parameters) and compute the same values into them."""
    from miopen_bn.torch import native

    gen = _seeded(request)
    x = torch.randn(4, 3, 2, 5, generator=gen, dtype=torch.float64).contiguous(memory_format=torch.channels_last)
    dy = torch.randn(x.shape, generator=gen, dtype=torch.float64).contiguous(memory_format=torch.channels_last)
    weight = torch.stack([torch.rand(3, generator=gen, dtype=torch.float64) + 0.5, torch.zeros(3, dtype=torch.float64)],
                         1).reshape(-1)[::2]  # stride 2
    bias = torch.randn(3, generator=gen, dtype=torch.float64)
    calls = {
        "train": lambda: native.batch_norm_train(x, weight, bias, torch.zeros(3), torch.ones(3, dtype=torch.float64),
                                                 0.1, 1e-5),
        "infer": lambda: (native.batch_norm_infer(x, weight, bias, torch.zeros(3, dtype=torch.float64),
                                                  torch.ones(3, dtype=torch.float64), 1e-5),),
        "backward": lambda: native.batch_norm_backward(x, dy, weight, *calls["train"]()[1:], 1e-5),
        "group norm": lambda: native.group_norm_forward(x, 3, weight, bias, 1e-5, True),
        "group norm backward": lambda: native.group_norm_backward(x, dy, 3, weight, bias,
                                                                  *calls["group norm"]()[1:], True),
    }
    for name, call in calls.items():
        first, second = call(), call()
        for a, b in zip(first, second):
            assert (b.dtype, b.shape, b.stride()) == (a.dtype, a.shape, a.stride()), name
            assert b.data_ptr() != a.data_ptr(), name  # new outputs
            torch.testing.assert_close(b, a, rtol=0, atol=0)
    y, saved_mean, saved_invstd = calls["train"]()
    assert y.is_contiguous(memory_format=torch.channels_last)
    assert (saved_mean.dtype, saved_invstd.dtype) == (torch.float32, torch.float64)
    assert all(g.stride() == (2,) for g in calls["backward"]()[1:])


def test_group_norm_with_a_bias_alone_adds_it_as_torch_does():
    x, bias, dy = torch.randn(2, 4, 3), torch.randn(4), torch.randn(2, 4, 3)
    b = bias.clone().requires_grad_()
    y = mbt.group_norm(x, 2, None, b)
    torch.testing.assert_close(y, torch.nn.functional.group_norm(x, 2, None, bias))
    y.backward(dy)  # (torch's own backward fails on a bias without weight)
    torch.testing.assert_close(b.grad, dy.sum((0, 2)))
    with pytest.raises(ValueError, match="bias was given without weight"):  # the operator has no weight to fill in
        torch.ops.miopen_bn.group_norm(x, 2, None, bias, 1e-5, False)


def test_tensors_left_by_a_finished_functorch_transform_work_as_with_torch():
    """The eager path calls autograd's C apply itself: like Function.apply,
    it unwraps tensors that escaped a finished torch.func transform."""
    leaked = []

    def f(x):
        leaked.append(x * 2)
        return x.sum()

    torch.func.grad(f)(torch.randn(4, 3, 2, 2))
    x = leaked[0]
    for ours, theirs in ((lambda w, b: mbt.batch_norm(x, None, None, w, b, True),
                          lambda w, b: torch.nn.functional.batch_norm(x, None, None, w, b, True)),
                         (lambda w, b: mbt.group_norm(x, 3, w, b),
                          lambda w, b: torch.nn.functional.group_norm(x, 3, w, b))):
        grads, weight, bias = [], torch.rand(3) + 0.5, torch.randn(3)
        for fn in (ours, theirs):
            w, b = weight.clone().requires_grad_(), bias.clone().requires_grad_()
            y = fn(w, b)
            (y * y).sum().backward()
            grads.append((y.detach(), w.grad, b.grad))
        torch.testing.assert_close(grads[0], grads[1], rtol=1e-4, atol=1e-4)
