"""Group norm on the shapes of docs/numerics.md#shapes (cut to CI size), on
the numerics that break naive implementations, and on the bad inputs of
docs/deviations.md#input-that-miopen-does-not-check."""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest
from support.strategies import CHANNELS_LAST, PACKED, Layout, filled, group_activations, nan_filled

import miopen_bn
from miopen_bn import reference
from miopen_bn.tolerances import check

ELEMENTWISE, REDUCTION = "elementwise", "reduction"

# (shape, G).  Big enough that every walk is cut into several blocks and runs
# on the thread pool.
SHAPES = {
    "C/G = 1": ((4, 32, 24, 24), 32),
    "G = 1": ((3, 16, 40, 40), 1),
    "C/G >= 64": ((2, 128, 20, 20), 2),
    "N*G < 32: N=1, G=4": ((1, 8, 96, 96), 4),
    "Stable Diffusion 2x320x64x64 (cut to 1x320x32x32)": ((1, 320, 32, 32), 32),
    "Stable Diffusion 2x640x32x32": ((2, 640, 32, 32), 32),
    "Stable Diffusion 2x1280x16x16": ((2, 1280, 16, 16), 32),
    "VAE 1x128x512x512 (cut to 1x128x160x130: runs longer than a task)": ((1, 128, 160, 130), 32),
    "rank 3": ((4, 64, 1000), 8),
    "rank 5": ((2, 32, 6, 20, 20), 8),
}


def run_both(x, groups, weight, bias, activation, rng, dtype="float32"):
    """Forward then backward (from the forward's own statistics), each checked."""
    y, mean, rstd = miopen_bn.groupnorm_forward(x, groups, weight, bias, activation=activation)
    expected = reference.groupnorm_forward(x, groups, weight, bias, activation=activation)
    check(y, expected["y"], dtype, ELEMENTWISE, "y")
    check(mean, expected["mean"], mean.dtype, REDUCTION, "mean")
    check(rstd, expected["rstd"], rstd.dtype, REDUCTION, "rstd")
    dy = filled(rng.standard_normal(x.shape), x.dtype, Layout("like x", order=tuple(np.argsort(x.strides)[::-1])))
    dx, dweight, dbias = miopen_bn.groupnorm_backward(x, dy, groups, weight, mean, rstd, bias=bias,
                                                      activation=activation)
    grads = reference.groupnorm_backward(x, dy, groups, weight, mean, rstd, bias=bias, activation=activation)
    check(dx, grads["dx"], dtype, ELEMENTWISE, "dx")
    if weight is not None:
        check(dweight, grads["dweight"], weight.dtype, REDUCTION, "dweight")
        check(dbias, grads["dbias"], weight.dtype, REDUCTION, "dbias")
    return y, mean, rstd, dx


@pytest.mark.parametrize("activation", [None, "swish"])
@pytest.mark.parametrize("layout", [PACKED, CHANNELS_LAST, Layout("padded", padding=3)],
                         ids=["packed", "channels_last", "padded"])
@pytest.mark.parametrize("shape, groups", list(SHAPES.values()), ids=list(SHAPES))
def test_spec_shape(shape, groups, layout, activation, rng):
    x = filled(group_activations(rng, shape, groups), "float32", layout)
    weight = rng.uniform(0.5, 2, shape[1]).astype(np.float32)
    bias = rng.uniform(-1, 1, shape[1]).astype(np.float32)
    run_both(x, groups, weight, bias, activation, rng)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float64"])
@pytest.mark.parametrize("layout", [PACKED, CHANNELS_LAST, Layout("permuted", order=(2, 0, 3, 1))],
                         ids=["packed", "channels_last", "permuted"])
def test_other_dtypes_at_size(dtype, layout, rng):
    """Half, bfloat16 and double through the staged (converted) paths, at a size that runs in parallel."""
    shape, groups = (2, 96, 40, 40), 32
    x = filled(group_activations(rng, shape, groups), dtype, layout)
    weight = filled(rng.uniform(0.5, 2, shape[1]), dtype)
    bias = filled(rng.uniform(-1, 1, shape[1]), dtype)
    run_both(x, groups, weight, bias, "swish", rng, dtype)


def test_large_mean_small_std(rng):
    """Groups with mean 1e4 and std 1e-2: E[x^2] - mean^2 in float32 would lose every digit."""
    shape, groups = (4, 16, 12, 12), 4
    x = (1e4 + 1e-2 * rng.standard_normal(shape)).astype(np.float32)
    weight = rng.uniform(0.5, 2, 16).astype(np.float32)
    bias = rng.uniform(-1, 1, 16).astype(np.float32)
    _, _, rstd, _ = run_both(x, groups, weight, bias, None, rng)
    assert np.all(rstd > 50)  # var ~ 1e-4 was found, not 0 or garbage
    run_both(x, groups, weight, bias, "swish", rng)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_constant_group_gives_bias_exactly(rng, dtype):
    x = rng.standard_normal((3, 8, 5, 7)).astype(dtype)
    x[:, 2:4] = 1e7  # group 1 of 4
    weight, bias = rng.uniform(0.5, 2, 8).astype(dtype), rng.uniform(-1, 1, 8).astype(dtype)
    y, mean, _ = miopen_bn.groupnorm_forward(x, 4, weight, bias)
    np.testing.assert_array_equal(y[:, 2:4], np.broadcast_to(bias[2:4, None, None], y[:, 2:4].shape))
    np.testing.assert_array_equal(mean[:, 1], 1e7)


def test_float16_beyond_256(rng):
    """|x| > 256 in float16: sums and squares overflow a half accumulator."""
    x = (rng.uniform(300, 3000, (1, 8, 1, 1)) + 40 * rng.standard_normal((4, 8, 16, 16))).astype(np.float16)
    assert np.abs(x).min() > 256
    weight, bias = rng.uniform(0.5, 2, 8).astype(np.float16), rng.uniform(-1, 1, 8).astype(np.float16)
    run_both(x, 2, weight, bias, None, rng, "float16")


@pytest.mark.parametrize("dtype", ["float32", "float64", "float16"])
def test_swish_over_its_whole_range(rng, dtype):
    """Pre-activation values from about -150 to 150 (one group per channel,
    shifted by its bias), where exp(-z) runs from overflow to underflow:
    forward and backward match the reference."""
    biases = np.array([-150.0, -100.0, -88.5, -87.0, -60.0, -20.0, -3.0, 0.0, 3.0, 20.0, 60.0, 88.5, 150.0])
    shape = (2, biases.size, 30, 31)
    x = filled(np.linspace(-1.7, 1.7, int(np.prod(shape))).reshape(shape), dtype)
    weight = filled(np.resize([1.0, -1.0, 2.0, 0.5], biases.size), dtype)
    run_both(x, biases.size, weight, filled(biases, dtype), "swish", rng, dtype)


@pytest.mark.parametrize("dtype", ["float32", "float64", "float16"])
def test_swish_at_infinity_and_far_below_zero(rng, dtype):
    """Where y / (1 + exp(-y)) would be inf/inf: swish(+inf) = +inf,
    swish(-inf) = 0, and very negative y give 0, never NaN (see
    reference.swish).  The gradients there stay finite: swish' is 1 at +inf
    and 0 at -inf and far below zero."""
    shape, groups = (2, 4, 6, 6), 2
    x = filled(group_activations(rng, shape, groups), dtype)
    weight = filled(np.ones(4), dtype)
    bias = filled(np.array([np.inf, -np.inf, -1e4 if dtype != "float16" else -6e4, 0.0]), dtype)
    y, mean, rstd = miopen_bn.groupnorm_forward(x, groups, weight, bias, activation="swish")
    y64 = y.astype(np.float64)
    assert np.all(y64[:, 0] == np.inf) and np.all(y64[:, 1] == 0.0) and np.all(y64[:, 2] == 0.0)
    assert np.isfinite(y64[:, 3]).all() and np.isfinite(mean).all() and np.isfinite(rstd).all()
    dy = filled(rng.standard_normal(shape), dtype)
    dx, dweight, dbias = miopen_bn.groupnorm_backward(x, dy, groups, weight, mean, rstd, bias=bias,
                                                      activation="swish")
    grads = reference.groupnorm_backward(x, dy, groups, weight, mean, rstd, bias=bias, activation="swish")
    check(dx, grads["dx"], dtype, ELEMENTWISE, "dx")
    check(dbias, grads["dbias"], dtype, REDUCTION, "dbias")
    assert np.isfinite(dx.astype(np.float64)).all()
    np.testing.assert_array_equal(dbias.astype(np.float64)[1:3], 0.0)  # swish' = 0 there


def test_one_nan_poisons_one_group_only(rng):
    shape, groups = (3, 8, 5, 5), 4
    x = filled(group_activations(rng, shape, groups), "float32")
    x[1, 5, 2, 3] = np.nan  # sample 1, group 2
    weight, bias = rng.uniform(0.5, 2, 8).astype(np.float32), rng.uniform(-1, 1, 8).astype(np.float32)
    y, mean, rstd, dx = run_both(x, groups, weight, bias, "swish", rng)  # NaN exactly where the reference has it
    poisoned = np.isnan(y)
    assert poisoned[1, 4:6].all() and poisoned.sum() == 2 * 25
    assert np.isnan(mean[1, 2]) and np.isnan(mean).sum() == 1 and np.isnan(rstd).sum() == 1
    assert np.isnan(dx).sum() == 2 * 25


def test_results_do_not_depend_on_the_thread_count(tmp_path):
    """Partial sums are merged in a fixed order: 1 and 3 threads agree bit for bit."""
    program = (
        "import numpy as np, miopen_bn, sys\n"
        "rng = np.random.default_rng(7)\n"
        "out = []\n"
        "for shape, layout in [((2, 64, 70, 70), 'nchw'), ((2, 64, 70, 70), 'nhwc'), ((1, 8, 300, 200), 'nchw')]:\n"
        "    x = rng.standard_normal(shape).astype(np.float32) + 3\n"
        "    if layout == 'nhwc': x = np.ascontiguousarray(x.transpose(0, 2, 3, 1)).transpose(0, 3, 1, 2)\n"
        "    w = rng.uniform(0.5, 2, shape[1]).astype(np.float32); b = rng.uniform(-1, 1, shape[1]).astype(np.float32)\n"
        "    y, m, r = miopen_bn.groupnorm_forward(x, 8, w, b, activation='swish')\n"
        "    dy = rng.standard_normal(shape).astype(np.float32)\n"
        "    dx, dw, db = miopen_bn.groupnorm_backward(x, dy, 8, w, m, r, bias=b, activation='swish')\n"
        "    out += [np.ascontiguousarray(a) for a in (y, m, r, dx, dw, db)]\n"
        "np.savez(sys.argv[1], *out)\n"
    )
    results = []
    for threads in (1, 3):
        path = tmp_path / f"threads{threads}.npz"
        env = {**os.environ, "MIOPEN_BN_NUM_THREADS": str(threads)}
        subprocess.run([sys.executable, "-c", program, str(path)], check=True, env=env, timeout=120)
        with np.load(path) as data:
            results.append([data[name] for name in sorted(data.files, key=lambda n: int(n.split("_")[1]))])
    for one, three in zip(*results):
        np.testing.assert_array_equal(one, three)


# --------------------------------------------------------------------------- #
# Bad input: the right exception, and nothing written
# --------------------------------------------------------------------------- #
class Poisoned:
    """Valid float32 inputs and NaN outputs, with a check that nothing was written."""

    def __init__(self, rng, shape=(2, 6, 4, 4)):
        self.x = rng.standard_normal(shape).astype(np.float32)
        self.dy = rng.standard_normal(shape).astype(np.float32)
        self.weight = rng.uniform(0.5, 2, shape[1]).astype(np.float32)
        self.bias = rng.uniform(-1, 1, shape[1]).astype(np.float32)
        self.y = nan_filled(shape, "float32")
        self.dx = nan_filled(shape, "float32")
        self.dweight = nan_filled((shape[1],), "float32")
        self.dbias = nan_filled((shape[1],), "float32")

    def forward(self, groups, **changes):
        args = dict(x=self.x, num_groups=groups, weight=self.weight, bias=self.bias, y=self.y)
        args.update(changes)
        return miopen_bn.groupnorm_forward(**args)

    def backward(self, groups, mean=None, rstd=None, **changes):
        n = self.x.shape[0]
        args = dict(x=self.x, dy=self.dy, num_groups=groups, weight=self.weight,
                    mean=np.zeros((n, groups), np.float32) if mean is None else mean,
                    rstd=np.ones((n, groups), np.float32) if rstd is None else rstd,
                    dx=self.dx, dweight=self.dweight, dbias=self.dbias)
        args.update(changes)
        return miopen_bn.groupnorm_backward(**args)

    def assert_untouched(self):
        for name in ("y", "dx", "dweight", "dbias"):
            assert np.isnan(getattr(self, name)).all(), f"{name} was written"


@pytest.fixture
def p(rng):
    return Poisoned(rng)


@pytest.mark.parametrize("groups", [4, 5])
def test_groups_not_dividing_channels(p, groups):
    with pytest.raises(miopen_bn.MIOpenBadParmError, match="does not divide"):
        p.forward(groups)
    with pytest.raises(miopen_bn.MIOpenBadParmError, match="does not divide"):
        p.backward(groups)
    p.assert_untouched()


@pytest.mark.parametrize("groups, error", [(0, ValueError), (-3, ValueError), (7, ValueError), (2.0, TypeError),
                                           (True, TypeError)])
def test_group_counts_refused_before_the_call(p, groups, error):
    with pytest.raises(error, match="num_groups"):
        p.forward(groups)
    with pytest.raises(error, match="num_groups"):
        p.backward(groups, mean=np.zeros((2, 1), np.float32), rstd=np.ones((2, 1), np.float32))
    p.assert_untouched()


def test_groups_of_one_element(rng):
    p = Poisoned(rng, shape=(3, 6, 1, 1))
    with pytest.raises(miopen_bn.MIOpenBadParmError, match="at least 2"):
        p.forward(6)
    with pytest.raises(miopen_bn.MIOpenBadParmError, match="at least 2"):
        p.backward(6)
    p.assert_untouched()
    y, _, _ = p.forward(3, y=None)  # two channels per group of one position each is fine
    assert np.isfinite(y).all()


@pytest.mark.parametrize("name", ["y", "dy", "dx"])
def test_length_mismatch(p, name, rng):
    wrong = nan_filled((2, 6, 4, 5), "float32") if name != "dy" else rng.standard_normal((2, 6, 4, 5)).astype(np.float32)
    with pytest.raises(miopen_bn.MIOpenBadParmError, match=f"descriptor of {name} .* the same length"):
        if name == "y":
            p.forward(3, y=wrong)
        else:
            p.backward(3, **{name: wrong})
    p.assert_untouched()


@pytest.mark.parametrize(
    "changes, error, words",
    [
        (dict(weight=np.ones(5, np.float32)), miopen_bn.MIOpenBadParmError, r"weight .* must have lengths \(6\)"),
        (dict(bias=np.ones((1, 6, 1), np.float32)), miopen_bn.MIOpenBadParmError, r"bias .* must have lengths \(6\)"),
        (dict(bias=None), miopen_bn.MIOpenBadParmError, "bias is NULL"),
        (dict(weight=None), ValueError, "bias was given without weight"),
        (dict(bias=np.ones(6, np.float16)), miopen_bn.MIOpenNotImplementedError, "bias of type miopenHalf"),
        (dict(y=np.full((2, 6, 4, 4), np.nan, np.float64)), miopen_bn.MIOpenBadParmError,
         "y has type miopenDouble but x has miopenFloat"),
        (dict(activation="relu"), ValueError, "activation"),
        (dict(epsilon=-1.0), miopen_bn.MIOpenBadParmError, "psilon"),
        (dict(epsilon=float("nan")), miopen_bn.MIOpenBadParmError, "psilon"),
        (dict(activation="swish", swish_beta=float("inf")), miopen_bn.MIOpenBadParmError, "activationBeta"),
    ],
)
def test_bad_forward_arguments(p, changes, error, words):
    with pytest.raises(error, match=words):
        p.forward(3, **changes)
    p.assert_untouched()


def _read_only(array: np.ndarray) -> np.ndarray:
    array.flags.writeable = False
    return array


@pytest.mark.parametrize(
    "name, given, error, words",
    [
        ("mean", nan_filled((2, 2), "float32"), miopen_bn.MIOpenBadParmError, r"mean .* must have lengths \(2, 3\)"),
        ("rstd", nan_filled((3, 3), "float32"), miopen_bn.MIOpenBadParmError, r"rstd .* must have lengths \(2, 3\)"),
        ("rstd", nan_filled((2, 3), "float16"), miopen_bn.MIOpenNotImplementedError, "rstd has type miopenHalf"),
        ("mean", nan_filled((2, 3), "float64"), miopen_bn.MIOpenNotImplementedError, "mean has type miopenDouble"),
        ("mean", _read_only(nan_filled((2, 3), "float32")), ValueError, "mean is read-only"),
    ],
    ids=["mean shape", "rstd shape", "rstd dtype", "mean dtype", "mean read-only"],
)
def test_bad_forward_statistics_outputs(p, name, given, error, words):
    """A given mean or rstd is checked as batch norm's saved statistics are:
    by the library (its (N, G) lengths, its type), or by Python when it
    cannot be written; the call then writes neither it, nor the other, nor y."""
    other = nan_filled((2, 3), "float32")
    outputs = {name: given, ("rstd" if name == "mean" else "mean"): other}
    with pytest.raises(error, match=words):
        p.forward(3, **outputs)
    p.assert_untouched()
    assert np.isnan(other).all() and np.isnan(given).all()


@pytest.mark.parametrize("dtype", ["float32", "float16", "float64"])
@pytest.mark.parametrize("layout", [PACKED, CHANNELS_LAST], ids=["packed", "channels_last"])
def test_forward_writes_given_statistics_outputs(rng, cpu_handle, dtype, layout):
    """y, mean and rstd given (NaN-poisoned; the statistics one a strided
    view) are the arrays written and returned, on the first call of their
    signature and on a repeated one; one given alone is used beside a new
    other."""
    shape, groups = (3, 12, 5, 7), 4
    stats_dtype = "float64" if dtype == "float64" else "float32"
    x = filled(group_activations(rng, shape, groups), dtype, layout)
    weight, bias = filled(rng.uniform(0.5, 2, 12), dtype), filled(rng.uniform(-1, 1, 12), dtype)
    expected = reference.groupnorm_forward(x, groups, weight, bias, activation="swish")

    def call(**outputs):
        return miopen_bn.groupnorm_forward(x, groups, weight, bias, activation="swish", handle=cpu_handle, **outputs)

    for _ in range(2):  # the second call takes the prepared path
        y = nan_filled(shape, dtype, layout)
        mean = nan_filled((3, 2 * groups), stats_dtype)[:, ::2]
        rstd = nan_filled((groups, 3), stats_dtype).T
        got = call(y=y, mean=mean, rstd=rstd)
        assert got[0] is y and got[1] is mean and got[2] is rstd
        check(y, expected["y"], dtype, ELEMENTWISE, "y")
        check(mean, expected["mean"], stats_dtype, REDUCTION, "mean")
        check(rstd, expected["rstd"], stats_dtype, REDUCTION, "rstd")
    alone = nan_filled((3, groups), stats_dtype)
    _, new_mean, same = call(rstd=alone)
    assert same is alone and new_mean.shape == (3, groups)
    np.testing.assert_array_equal(alone, rstd)
    np.testing.assert_array_equal(new_mean, mean)


@pytest.mark.parametrize(
    "changes, error, words",
    [
        (dict(mean=np.zeros((2, 2), np.float32)), miopen_bn.MIOpenBadParmError, r"mean .* must have lengths \(2, 3\)"),
        (dict(rstd=np.ones((3, 2), np.float32)), miopen_bn.MIOpenBadParmError, r"rstd .* must have lengths \(2, 3\)"),
        (dict(rstd=np.ones((2, 3), np.float16)), miopen_bn.MIOpenNotImplementedError, "rstd has type miopenHalf"),
        (dict(mean=np.zeros((2, 3), np.float64)), miopen_bn.MIOpenNotImplementedError, "mean has type miopenDouble"),
        (dict(activation="swish"), miopen_bn.MIOpenBadParmError, "bias is NULL"),
        (dict(weight=None), ValueError, "dweight and dbias"),
        (dict(dweight=np.full(5, np.nan, np.float32)), miopen_bn.MIOpenBadParmError,
         r"dweight .* must have lengths \(6\)"),
        (dict(dy=np.zeros((2, 6, 4, 4), np.float64)), miopen_bn.MIOpenBadParmError,
         "dy has type miopenDouble but x has miopenFloat"),
        (dict(activation="swish", bias=np.ones(6, np.float32), swish_beta=float("nan")),
         miopen_bn.MIOpenBadParmError, "activationBeta"),
    ],
)
def test_bad_backward_arguments(p, changes, error, words):
    with pytest.raises(error, match=words):
        p.backward(3, **changes)
    p.assert_untouched()


def test_in_place_with_other_strides_is_refused(rng):
    """y over x must keep x's layout: the same memory seen as NHWC is refused."""
    memory = rng.standard_normal(2 * 6 * 16).astype(np.float32)
    before = memory.copy()
    x = memory.reshape(2, 6, 4, 4)
    y = memory.reshape(2, 4, 4, 6).transpose(0, 3, 1, 2)
    with pytest.raises(miopen_bn.MIOpenBadParmError, match="aliases"):
        miopen_bn.groupnorm_forward(x, 3, y=y)
    np.testing.assert_array_equal(memory, before)


# --- partial aliasing (C refuses it; Python also where it copied an input) -------


def _overlap_case(rng, shift):
    """x and an output of one shape in one buffer, the output `shift` elements on."""
    memory = rng.standard_normal(2 * 6 * 16 + abs(shift)).astype(np.float32)
    start = max(0, -shift)
    x = memory[start:start + 192].reshape(2, 6, 4, 4)
    out = memory[start + shift:start + shift + 192].reshape(2, 6, 4, 4)
    return memory, x, out


@pytest.mark.parametrize("shift", [1, -1, 16])
def test_group_norm_output_partly_over_x_is_refused(rng, shift):
    memory, x, y = _overlap_case(rng, shift)
    before = memory.copy()
    with pytest.raises(miopen_bn.MIOpenBadParmError, match="y .* overlaps x"):
        miopen_bn.groupnorm_forward(x, 3, y=y)
    np.testing.assert_array_equal(memory, before)


def test_group_norm_backward_outputs_partly_over_inputs_are_refused(rng):
    memory, dy, dx = _overlap_case(rng, 1)
    x = rng.standard_normal(dy.shape).astype(np.float32)
    weight, bias = np.ones(6, np.float32), np.zeros(6, np.float32)
    _, mean, rstd = miopen_bn.groupnorm_forward(x, 3, weight, bias)
    with pytest.raises(miopen_bn.MIOpenBadParmError, match="dx .* overlaps dy"):
        miopen_bn.groupnorm_backward(x, dy, 3, weight, mean, rstd, bias=bias, dx=dx)
    grads = np.full(6, np.nan, np.float32)
    with pytest.raises(miopen_bn.MIOpenBadParmError, match="overlaps"):
        miopen_bn.groupnorm_backward(x, x, 3, weight, mean, rstd, bias=bias, dweight=grads, dbias=grads)
    assert np.isnan(grads).all()


def test_batch_norm_saved_statistics_at_one_address_are_refused(rng):
    x = rng.standard_normal((4, 3, 2, 2)).astype(np.float32)
    ones, zeros, stats = np.ones(3, np.float32), np.zeros(3, np.float32), np.full(3, np.nan, np.float32)
    with pytest.raises(miopen_bn.MIOpenBadParmError, match="overlaps"):
        miopen_bn.batchnorm_forward_training(x, ones, zeros, saved_mean=stats, saved_inv_std=stats)
    assert np.isnan(stats).all()


def test_an_output_over_an_input_python_copied_is_refused(rng):
    """x with negative strides is copied before the call, which would hide
    from the library that y overlaps it: Python refuses it first."""
    memory = rng.standard_normal(192).astype(np.float32)
    before = memory.copy()
    x = memory[::-1].reshape(2, 6, 4, 4)
    y = memory.reshape(2, 6, 4, 4)
    with pytest.raises(ValueError, match="y overlaps x"):
        miopen_bn.groupnorm_forward(x, 3, y=y)
    np.testing.assert_array_equal(memory, before)


def test_float64_groups_of_two_close_values_keep_float64_precision(rng):
    """Pairs of channels 3e-3 apart at one position: variance ~2e-6 against
    epsilon 1e-5.  The float epsilon of the ABI once made rstd 1e-8 off; it
    must match float64 arithmetic with epsilon 1e-5 (as PyTorch's) to
    float64's tolerance, and y with it."""
    x = rng.standard_normal((4, 8, 1, 1))
    x[:, 1::2] = x[:, 0::2] + 3e-3 * rng.standard_normal((4, 4, 1, 1))
    y, mean, rstd = miopen_bn.groupnorm_forward(x, 4, epsilon=1e-5)
    pairs = x.reshape(4, 4, 2)
    expected_rstd = 1.0 / np.sqrt(pairs.var(axis=2) + 1e-5)
    check(rstd, expected_rstd, "float64", "reduction", "rstd")
    expected_y = (pairs - pairs.mean(axis=2, keepdims=True)) * expected_rstd[:, :, None]
    check(y, expected_y.reshape(x.shape), "float64", "elementwise", "y")
