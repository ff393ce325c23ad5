"""Repeated calls (prepared.py): a signature's second call skips the adaptation
but must compute, write, return and refuse exactly what a first call would.

Each test makes a call that leaves a plan, then changes one thing (strides,
dtype, shape, handle, flags, scalar values, the arrays' memory) and checks the
next call against the float64 reference or the same error as a fresh call."""

from __future__ import annotations

import threading

import numpy as np
import pytest

import miopen_bn
from miopen_bn import prepared, reference
from miopen_bn.tolerances import check

SHAPE = (4, 3, 5, 2)


def nhwc(array):
    """The same values laid out NHWC (a transposed view)."""
    return np.ascontiguousarray(array.transpose(0, 2, 3, 1)).transpose(0, 3, 1, 2)


@pytest.fixture
def p(rng):
    class Problem:
        x = rng.normal(0.5, 2.0, SHAPE).astype(np.float32)
        dy = rng.standard_normal(SHAPE).astype(np.float32)
        scale = rng.uniform(0.5, 2.0, 3).astype(np.float32)
        bias = rng.uniform(-1, 1, 3).astype(np.float32)
        mean = rng.uniform(-1, 1, 3).astype(np.float32)
        var = rng.uniform(0.5, 2, 3).astype(np.float32)

    return Problem


@pytest.fixture(autouse=True)
def no_plans():
    """Each test starts with no plan in this thread."""
    prepared._plans().clear()
    yield
    prepared._plans().clear()


def infer(p, x=None, **kw):
    x = p.x if x is None else x
    return miopen_bn.batchnorm_forward_inference(x, p.scale, p.bias, p.mean, p.var, **kw)


def infer_ref(p, x=None, **kw):
    x = p.x if x is None else x
    return reference.batchnorm_forward_inference(x, p.scale, p.bias, p.mean, p.var, **kw)


def test_every_entry_point_repeats_without_its_adaptation(p, monkeypatch):
    """The second call of a signature takes the plan (the first-call path would
    raise here) and still gives the reference's results."""
    from miopen_bn import batchnorm, groupnorm

    def calls():
        y = infer(p)
        ty, tm, tv = miopen_bn.batchnorm_forward_training(p.x, p.scale, p.bias)
        dx, ds, db = miopen_bn.batchnorm_backward(p.x, p.dy, p.scale, saved_mean=tm, saved_inv_std=tv)
        gy, gm, gr = miopen_bn.groupnorm_forward(p.x, 3, p.scale, p.bias, activation="swish")
        gdx, gdw, gdb = miopen_bn.groupnorm_backward(p.x, p.dy, 3, p.scale, gm, gr, bias=p.bias, activation="swish")
        return y, ty, dx, ds, db, gy, gdx, gdw, gdb

    first = calls()
    assert len(prepared._plans()) == 5
    for name in ("_adapted_inference", "_adapted_training", "_adapted_backward"):
        monkeypatch.setattr(batchnorm, name, lambda *a: pytest.fail("adapted again"))
    for name in ("_adapted_forward", "_adapted_backward"):
        monkeypatch.setattr(groupnorm, name, lambda *a: pytest.fail("adapted again"))
    second = calls()
    for a, b in zip(first, second):
        assert a is not b  # allocated anew
        np.testing.assert_array_equal(a, b)
    check(second[0], infer_ref(p), "float32", "elementwise", "y")


def test_changed_strides_dtype_and_shape(p):
    infer(p)
    x_nhwc = nhwc(p.x)
    y = infer(p, x_nhwc)
    assert y.strides == x_nhwc.strides
    check(y, infer_ref(p), "float32", "elementwise", "y")
    x64 = p.x.astype(np.float64)
    y = infer(p, x64)
    assert y.dtype == np.float64
    check(y, infer_ref(p, x64), "float64", "elementwise", "y")
    small = p.x[:2].copy()
    check(infer(p, small), infer_ref(p, small), "float32", "elementwise", "y")
    with pytest.raises(miopen_bn.MIOpenBadParmError, match="descriptor of y .* must have the same lengths"):
        infer(p, y=np.empty((4, 3, 5, 3), np.float32))
    with pytest.raises(TypeError, match="scale"):
        miopen_bn.batchnorm_forward_inference(p.x, p.scale.astype(np.int32), p.bias, p.mean, p.var)


def test_new_arrays_of_the_same_signature(p, rng):
    """The plan reads each call's own arrays, not the first call's."""
    y = np.full(SHAPE, np.nan, np.float32)
    infer(p, y=y)
    other = rng.normal(size=SHAPE).astype(np.float32)
    y2 = np.full(SHAPE, np.nan, np.float32)
    assert infer(p, other, y=y2) is y2
    check(y2, infer_ref(p, other), "float32", "elementwise", "y")
    check(y, infer_ref(p), "float32", "elementwise", "y")  # the first output, untouched since


def test_in_place_then_apart(p, rng):
    """x and y the same array, then two arrays of the same signature."""
    x = p.x.copy()
    assert infer(p, x, y=x) is x
    check(x, infer_ref(p), "float32", "elementwise", "y")
    x2 = rng.normal(size=SHAPE).astype(np.float32)
    before = x2.copy()
    y2 = np.full(SHAPE, np.nan, np.float32)
    infer(p, x2, y=y2)
    np.testing.assert_array_equal(x2, before)
    check(y2, infer_ref(p, x2), "float32", "elementwise", "y")


def test_scalars_follow_each_call(p):
    y = np.ones(SHAPE, np.float32)
    prior = y.copy()
    for alpha, beta, epsilon in ((1.0, 0.0, 1e-5), (0.5, 2.0, 1e-5), (-3.0, 0.25, 0.5)):
        expected = infer_ref(p, alpha=alpha, beta=beta, epsilon=epsilon, y_prior=prior)
        infer(p, y=y, alpha=alpha, beta=beta, epsilon=epsilon)
        check(y, expected, "float32", "elementwise", "y")
        prior = y.copy()
    with pytest.raises(TypeError, match="alpha must be a real number"):
        infer(p, y=y, alpha="one")
    with pytest.raises(miopen_bn.MIOpenBadParmError, match="epsilon"):
        infer(p, y=y, epsilon=-1.0)
    np.testing.assert_array_equal(y, prior)


def test_backward_scalars_and_in_place_gradients(p):
    _, mean, inv = miopen_bn.batchnorm_forward_training(p.x, p.scale, p.bias)
    dx, dscale, dbias = np.ones(SHAPE, np.float32), np.ones(3, np.float32), np.ones(3, np.float32)
    for alphas in ((1.0, 0.0, 1.0, 0.0), (2.0, 0.5, 0.25, 3.0)):
        ad, bd, ap, bp = alphas
        expected = reference.batchnorm_backward(
            p.x, p.dy, p.scale, saved_mean=mean, saved_inv_std=inv, alpha_data=ad, beta_data=bd,
            alpha_param=ap, beta_param=bp, dx_prior=dx.copy(), dscale_prior=dscale.copy(),
            dbias_prior=dbias.copy(),
        )
        result = miopen_bn.batchnorm_backward(
            p.x, p.dy, p.scale, saved_mean=mean, saved_inv_std=inv, alpha_data=ad, beta_data=bd,
            alpha_param=ap, beta_param=bp, dx=dx, dscale=dscale, dbias=dbias,
        )
        assert result[0] is dx and result[1] is dscale and result[2] is dbias
        for name, out in zip(("dx", "dscale", "dbias"), result):
            check(out, expected[name], "float32", "elementwise" if name == "dx" else "reduction", name)


def test_a_nonzero_beta_still_needs_its_output(p):
    infer(p)
    with pytest.raises(ValueError, match="y must be given when its beta is nonzero"):
        infer(p, beta=1.0)
    miopen_bn.batchnorm_backward(p.x, p.dy, p.scale)
    with pytest.raises(ValueError, match="dscale must be given"):
        miopen_bn.batchnorm_backward(p.x, p.dy, p.scale, beta_param=0.5)


def test_save_stats_switch(p):
    _, mean, inv = miopen_bn.batchnorm_forward_training(p.x, p.scale, p.bias)
    assert mean is not None
    y, none_mean, none_inv = miopen_bn.batchnorm_forward_training(p.x, p.scale, p.bias, save_stats=False)
    assert none_mean is None and none_inv is None
    with pytest.raises(ValueError, match="save_stats"):
        miopen_bn.batchnorm_forward_training(p.x, p.scale, p.bias, save_stats=False, saved_mean=mean,
                                             saved_inv_std=inv)


def test_running_statistics_update_each_call(p):
    running_mean, running_var = np.zeros(3, np.float32), np.ones(3, np.float32)
    expected_mean, expected_var = running_mean.astype(np.float64), running_var.astype(np.float64)
    for factor in (0.1, 0.5):
        ref = reference.batchnorm_forward_training(
            p.x, p.scale, p.bias, exp_avg_factor=factor, running_mean=expected_mean, running_var=expected_var
        )
        expected_mean, expected_var = ref["running_mean"], ref["running_var"]
        miopen_bn.batchnorm_forward_training(
            p.x, p.scale, p.bias, exp_avg_factor=factor, running_mean=running_mean, running_var=running_var
        )
        check(running_mean, expected_mean, "float32", "reduction", "running_mean")
        check(running_var, expected_var, "float32", "reduction", "running_var")


def test_output_flags_and_memory_are_adapted_again(p):
    y = np.full(SHAPE, np.nan, np.float32)
    infer(p, y=y)
    y.flags.writeable = False
    with pytest.raises(ValueError, match="y is read-only"):
        infer(p, y=y)
    raw = np.full(p.x.nbytes + 1, 0xFF, np.uint8)
    misaligned = raw[1:].view(np.float32).reshape(SHAPE)
    with pytest.raises(ValueError, match="y has strides"):
        infer(p, y=misaligned)
    assert (raw == 0xFF).all()
    with pytest.raises(ValueError, match="y has strides"):
        infer(p, y=np.full(SHAPE, np.nan, np.float32)[:, :, ::-1])


def test_inputs_copied_for_their_strides_each_call(p, rng):
    """Negative strides and misaligned inputs are copied; never planned."""
    for _ in range(2):
        x = rng.normal(size=SHAPE).astype(np.float32)
        check(infer(p, x[:, :, ::-1]), infer_ref(p, x[:, :, ::-1]), "float32", "elementwise", "y")
        raw = np.zeros(x.nbytes + 1, np.uint8)
        misaligned = raw[1:].view(np.float32).reshape(SHAPE)
        misaligned[...] = x
        check(infer(p, misaligned), infer_ref(p, x), "float32", "elementwise", "y")


def test_handles(p):
    handle = miopen_bn.Handle("cpu")
    infer(p, handle=handle)
    infer(p, handle=handle)
    handle.close()
    with pytest.raises(ValueError, match="closed"):
        infer(p, handle=handle)
    with pytest.raises(TypeError, match="handle"):
        infer(p, handle="cpu")
    other = miopen_bn.Handle("cpu")
    check(infer(p, handle=other), infer_ref(p), "float32", "elementwise", "y")
    other.close()
    # The thread's default handle, closed by its user, is replaced.
    infer(p)
    miopen_bn.default_handle("cpu").close()
    check(infer(p), infer_ref(p), "float32", "elementwise", "y")


def test_forgotten_handle_is_not_kept_alive(p):
    """Plans hold their handle weakly: its finalizer still runs."""
    import gc
    import weakref

    handle = miopen_bn.Handle("cpu")
    infer(p, handle=handle)
    gone = weakref.ref(handle)
    del handle
    gc.collect()
    assert gone() is None


def test_unhashable_steering_arguments(p):
    infer(p)
    with pytest.raises(TypeError):
        infer(p, mode=["spatial"])
    with pytest.raises(TypeError, match="num_groups must be an integer"):
        miopen_bn.groupnorm_forward(p.x, 3.0, p.scale, p.bias)
    miopen_bn.groupnorm_forward(p.x, 3, p.scale, p.bias)
    with pytest.raises(TypeError, match="num_groups must be an integer"):
        miopen_bn.groupnorm_forward(p.x, 3.0, p.scale, p.bias)
    with pytest.raises(TypeError, match="num_groups must be an integer"):
        miopen_bn.groupnorm_forward(p.x, True, p.scale, p.bias)


def test_plans_are_per_thread(p, rng):
    inputs = [rng.normal(size=SHAPE).astype(np.float32) for _ in range(4)]
    outputs = [None] * 4

    def work(i):
        for _ in range(20):
            outputs[i] = infer(p, inputs[i], alpha=float(i + 1))

    threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    for i in range(4):
        check(outputs[i], infer_ref(p, inputs[i], alpha=float(i + 1)), "float32", "elementwise", "y")


def test_torch_tensors_are_planned_too(p, monkeypatch):
    """torch tensors through the array API: the second call of a signature
    takes the plan, allocates its outputs with torch in x's layout, and
    gives the reference's results; another layout, dtype or a tensor that
    requires grad is a new signature."""
    torch = pytest.importorskip("torch")
    from miopen_bn import batchnorm

    x, scale, bias, mean, var = (torch.from_numpy(a) for a in (p.x, p.scale, p.bias, p.mean, p.var))
    first = miopen_bn.batchnorm_forward_inference(x, scale, bias, mean, var)
    assert len(prepared._plans()) == 1
    monkeypatch.setattr(batchnorm, "_adapted_inference", lambda *a: pytest.fail("adapted again"))
    other = torch.from_numpy(p.x * 2)
    second = miopen_bn.batchnorm_forward_inference(other, scale, bias, mean, var)
    assert type(second) is torch.Tensor and second.data_ptr() != first.data_ptr()
    check(first.numpy(), infer_ref(p), "float32", "elementwise", "y")
    check(second.numpy(), infer_ref(p, p.x * 2), "float32", "elementwise", "y")
    monkeypatch.undo()
    channels_last = x.contiguous(memory_format=torch.channels_last)
    y = miopen_bn.batchnorm_forward_inference(channels_last, scale, bias, mean, var)
    assert y.stride() == channels_last.stride()
    check(y.numpy(), infer_ref(p), "float32", "elementwise", "y")
    assert len(prepared._plans()) == 2
    with pytest.raises(BufferError, match="require gradient"):  # as DLPack refuses it, planned or not
        miopen_bn.batchnorm_forward_inference(x, scale.clone().requires_grad_(), bias, mean, var)


def test_torch_plans_of_every_entry_point(p):
    torch = pytest.importorskip("torch")
    x, dy, scale, bias = (torch.from_numpy(a) for a in (p.x, p.dy, p.scale, p.bias))

    def calls():
        ty, tm, tv = miopen_bn.batchnorm_forward_training(x, scale, bias)
        dx, ds, db = miopen_bn.batchnorm_backward(x, dy, scale, saved_mean=tm, saved_inv_std=tv)
        gy, gm, gr = miopen_bn.groupnorm_forward(x, 3, scale, bias)
        gdx, gdw, gdb = miopen_bn.groupnorm_backward(x, dy, 3, scale, gm, gr)
        return ty, tm, tv, dx, ds, db, gy, gm, gr, gdx, gdw, gdb

    first = calls()
    assert len(prepared._plans()) == 4
    second = calls()
    assert len(prepared._plans()) == 4
    for a, b in zip(first, second):
        assert type(b) is torch.Tensor and a.data_ptr() != b.data_ptr()
        np.testing.assert_array_equal(a.numpy(), b.numpy())
    expected = reference.batchnorm_backward(p.x, p.dy, p.scale)
    check(second[3].numpy(), expected["dx"], "float32", "elementwise", "dx")


def _torch_calls(torch, p):
    """Every entry point on torch tensors (NHWC x), with the outputs each returns."""
    x = torch.from_numpy(nhwc(p.x))
    dy, scale, bias = (torch.from_numpy(a) for a in (p.dy, p.scale, p.bias))
    mean, var = torch.from_numpy(p.mean.copy()), torch.from_numpy(p.var.copy())
    _, saved_mean, saved_inv_std = miopen_bn.batchnorm_forward_training(x, scale, bias)
    _, gn_mean, gn_rstd = miopen_bn.groupnorm_forward(x, 3, scale, bias)
    return [
        lambda: (miopen_bn.batchnorm_forward_inference(x, scale, bias, mean, var),),
        lambda: miopen_bn.batchnorm_forward_training(x, scale, bias, running_mean=mean, running_var=var),
        lambda: miopen_bn.batchnorm_backward(x, dy, scale, saved_mean=saved_mean, saved_inv_std=saved_inv_std),
        lambda: miopen_bn.groupnorm_forward(x, 3, scale, bias),
        lambda: miopen_bn.groupnorm_backward(x, dy, 3, scale, gn_mean, gn_rstd),
    ]


def _layout(t):
    return t.dtype, t.shape, t.stride(), t.device


@pytest.mark.parametrize("undispatched", [True, False])
def test_torch_outputs_of_repeated_calls(p, monkeypatch, undispatched):
    """A planned call on torch tensors makes new outputs laid out as the
    first call's (NHWC y and dx stay NHWC), each its own memory, with the
    same values; without torch's dispatcher (no operator runs) where torch
    has the functions for it, else through its public operators."""
    torch = pytest.importorskip("torch")
    from torch.utils._python_dispatch import TorchDispatchMode

    from miopen_bn import arrays

    if not undispatched:
        monkeypatch.setattr(arrays, "_undispatched", lambda: (None, None, None))
    elif arrays._undispatched()[0] is None:
        pytest.skip("this torch has no undispatched allocation")

    class Operators(TorchDispatchMode):
        count = 0

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            Operators.count += 1
            return func(*args, **(kwargs or {}))

    for call in _torch_calls(torch, p):
        first = call()
        with Operators():
            second = call()
        assert (Operators.count == 0) == undispatched
        for a, b in zip(first, second):
            assert _layout(a) == _layout(b) and a.data_ptr() != b.data_ptr()
            assert torch.equal(a, b)
        Operators.count = 0


@pytest.mark.parametrize("undispatched", [True, False])
def test_joint_outputs_are_disjoint_rows_of_one_buffer(monkeypatch, undispatched):
    """arrays.joint_allocators (what CUDA plans use for their per-channel
    outputs): outputs of one layout become rows of one buffer, each laid out
    as its own tensor and apart from the others; other layouts stay alone."""
    torch = pytest.importorskip("torch")
    from miopen_bn import arrays

    if not undispatched:
        monkeypatch.setattr(arrays, "_undispatched", lambda: (None, None, None))
    made = [torch.empty(4, 3, 2), torch.empty(3), torch.empty(3), torch.empty(3, dtype=torch.float64)]
    allocations = {index: arrays.allocator(made[index], made) for index in (0, 1, 2, 3)}
    joint, single = arrays.joint_allocators(allocations, made)
    assert [indices for indices, _ in joint] == [(1, 2)] and sorted(single) == [0, 3]
    rows = joint[0][1]()
    assert [_layout(row) for row in rows] == [_layout(made[1])] * 2
    assert rows[0].untyped_storage().data_ptr() == rows[1].untyped_storage().data_ptr()
    rows[0].fill_(1.0)
    rows[1].fill_(2.0)
    assert rows[0].tolist() == [1.0] * 3 and rows[1].tolist() == [2.0] * 3


def test_contiguous_tensors_share_a_plan_whatever_their_length_one_strides(p):
    """A contiguous tensor's strides are keyed by its contiguity: one with
    another stride along a length-1 axis (which addresses nothing) takes the
    same plan and the right values; a non-contiguous one of the same shape
    is another signature."""
    torch = pytest.importorskip("torch")
    values = p.x[:, :, :1, :].copy()  # (4, 3, 1, 2)
    scale, bias, mean, var = (torch.from_numpy(a) for a in (p.scale, p.bias, p.mean, p.var))
    plain = torch.from_numpy(values)
    odd = torch.from_numpy(values.copy()).as_strided(values.shape, (6, 2, 99, 1))
    assert odd.is_contiguous() and odd.stride() != plain.stride()
    expected = reference.batchnorm_forward_inference(values, p.scale, p.bias, p.mean, p.var)
    for x in (plain, odd):
        check(miopen_bn.batchnorm_forward_inference(x, scale, bias, mean, var).numpy(), expected,
              "float32", "elementwise", "y")
    assert len(prepared._plans()) == 1
    strided = torch.from_numpy(np.repeat(values, 2, axis=3))[..., ::2]
    assert not strided.is_contiguous()
    check(miopen_bn.batchnorm_forward_inference(strided, scale, bias, mean, var).numpy(), expected,
          "float32", "elementwise", "y")
    assert len(prepared._plans()) == 2


def test_generated_run_of_every_kind_of_step():
    """prepared_source's function (what a plan's repeated call runs; the
    joint outputs are CUDA plans' only, so the CPU tests reach them here):
    outputs made alone, like an input and jointly; values written by
    pointer (a non-number refused by name) and passed as numbers; the
    status raised through the check; the results in the entry's order."""
    calls, checked, scalars = [], [], [0.0, 0.0]

    def function(*args):
        calls.append(args)
        return args[-1]  # the status

    source = prepared.prepared_source(
        5, ((1, None, "_k0"), (2, 0, "_k1")), (((3, 4), "_k2"),), ((1, 0),),
        ("_k3", "float(values[1])", "_k4(a0)", "_k4(a1)", "_k4(a2)", "_k4(a3)", "_k4(a4)", "_k5"),
        (2, 3, 4, 1), ("_k0", "_k1", "_k2", "_k3", "_k4", "_k5"))
    make = prepared._compiled(source, "test")

    def run(status, values):
        return make(function, checked.append, scalars, prepared.real_number, ("alpha", "epsilon"),
                    lambda: "new", lambda like: f"like {like}", lambda: ("row 0", "row 1"), "handle",
                    lambda array: f"&{array}", status)(("x", None, None, None, None), values)

    assert run(0, (2, 1e-5)) == ("like x", "row 0", "row 1", "new")
    assert calls[-1] == ("handle", 1e-5, "&x", "&new", "&like x", "&row 0", "&row 1", 0)
    assert scalars == [0.0, 2.0] and checked == []
    run(3, (0.5, 1))
    assert checked == [3] and scalars[1] == 0.5
    with pytest.raises(TypeError, match="alpha must be a real number"):
        run(0, ("one", 1e-5))
    with pytest.raises(ValueError):
        run(0, (1.0, "small"))
