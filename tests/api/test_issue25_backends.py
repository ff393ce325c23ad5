"""Issue 25's batch-norm features through the Python API on every backend
(the CPU in CI, the GPU in device runs), against the float64 reference with
NaN-poisoned outputs: every assignment of float32 or x's type to each
parameter tensor (scale, bias, means, variances: one descriptor each), every
fused activation forward and backward, V3's separate running-statistics
buffers and inference from the inverse std.  On the GPU the small shapes take
the single-launch kernels; test_multi_launch_kernels_on_the_gpu takes shapes
whose features the GPU splits over several blocks."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from support.strategies import ACTIVATIONS, CHANNELS_LAST, PACKED, filled, nan_filled

from miopen_bn import reference
from miopen_bn.tolerances import check

SHAPE = (3, 5, 4, 6)
# Spatially M = 396 >= 256, so the backward's dx is computed in float (per
# activation M = 4: in double), each path with its own scratch arrays.
ACTIVATION_SHAPE = (4, 5, 9, 11)
IO_DTYPES = ("float32", "float16", "bfloat16", "float64")
MODES = ("spatial", "per_activation")
PARAMETERS = ("scale", "bias", "mean", "var")  # the means: running and saved; the variances likewise


def _type_assignments():
    """(x dtype, {parameter: dtype}), float32 or x's dtype for each parameter independently."""
    for x_dtype in IO_DTYPES:
        for types in itertools.product(sorted({"float32", x_dtype}), repeat=len(PARAMETERS)):
            yield x_dtype, dict(zip(PARAMETERS, types))


def _type_id(case) -> str:
    x_dtype, types = case
    return x_dtype + "-" + "-".join(f"{name}:{dtype}" for name, dtype in types.items())


def _param_shape(shape, mode):
    return (shape[1],) if mode == "spatial" else tuple(shape[1:])


def _as64(array):
    return np.asarray(array).astype(np.float64)


def _clear_of_kinks(x, dy, scale, bias, mean, inv_std, mode, fused):
    """dy with 0 where z = scale * xhat + bias sits within 1e-4 of a kink of
    f' (relu's 0, clamp's bounds, ...): there the backends' z, rounded in
    float, may fall on the other side than the float64 reference's and take
    the other derivative, a difference no tolerance covers."""
    if fused is None:
        return dy
    shape = reference.param_shape(x.shape, mode)
    z = _as64(scale).reshape(shape) * (_as64(x) - _as64(mean).reshape(shape)) * _as64(inv_std).reshape(shape)
    z += _as64(bias).reshape(shape)
    step = 1e-4 * np.maximum(1.0, np.abs(z))
    jump = np.abs(reference.activation_derivative(z + step, *fused) - reference.activation_derivative(z - step, *fused))
    out = dy.copy(order="K")  # keeps its layout
    out[jump > 1e-2] = 0
    return out


def _exercise(backend, rng, shape, x_dtype, types, mode="spatial", layout=CHANNELS_LAST, activation=None, v3=False):
    """Training (V3 when asked), inference from the estimates and from the
    inverse std, backward with saved and with recomputed statistics, each
    checked against the reference, every output NaN-poisoned first."""
    pshape = _param_shape(shape, mode)
    fused = None if activation is None else (activation,) + ACTIVATIONS[activation]
    act = {} if activation is None else {"activation": activation, "activation_params": ACTIVATIONS[activation]}
    x = filled(rng.normal(0.3, 1.4, shape), x_dtype, layout)
    scale = filled(rng.uniform(0.5, 2, pshape), types["scale"])
    bias = filled(rng.uniform(-1, 1, pshape), types["bias"])
    run_mean = filled(rng.uniform(-1, 1, pshape), types["mean"])
    run_var = filled(rng.uniform(0.5, 2, pshape), types["var"])
    before = (run_mean.copy(), run_var.copy())
    running = {"running_mean": run_mean, "running_var": run_var}
    if v3:
        running["next_running_mean"] = nan_filled(pshape, types["mean"])
        running["next_running_var"] = nan_filled(pshape, types["var"])
    y, saved_mean, saved_inv = backend.forward_training(
        x, scale, bias, mode=mode, saved_mean=nan_filled(pshape, types["mean"]),
        saved_inv_std=nan_filled(pshape, types["var"]), y=nan_filled(shape, x_dtype, layout), alpha=0.75,
        **running, **act)  # fmt: skip
    expected = reference.batchnorm_forward_training(
        x, scale, bias, mode=mode, running_mean=before[0], running_var=before[1], alpha=0.75, fused_activation=fused
    )
    check(y, expected["y"], x_dtype, "elementwise", "y")
    check(saved_mean, expected["saved_mean"], types["mean"], "reduction", "saved mean")
    check(saved_inv, expected["saved_inv_std"], types["var"], "reduction", "saved inverse std")
    written = (running["next_running_mean"], running["next_running_var"]) if v3 else (run_mean, run_var)
    check(written[0], expected["running_mean"], types["mean"], "reduction", "running mean")
    check(written[1], expected["running_var"], types["var"], "reduction", "running variance")
    if v3:
        assert np.array_equal(_as64(run_mean), _as64(before[0])), "V3 wrote the previous running mean"
        assert np.array_equal(_as64(run_var), _as64(before[1])), "V3 wrote the previous running variance"

    y = backend.forward_inference(
        x, scale, bias, before[0], before[1], mode=mode, epsilon=1e-3, y=nan_filled(shape, x_dtype, layout), **act
    )
    expected = reference.batchnorm_forward_inference(
        x, scale, bias, before[0], before[1], mode=mode, epsilon=1e-3, fused_activation=fused
    )
    check(y, expected, x_dtype, "elementwise", "y (estimates)")
    y = backend.forward_inference(
        x, scale, bias, saved_mean, saved_inv, mode=mode, inverse_variance=True, y=nan_filled(shape, x_dtype, layout),
        **act)  # fmt: skip
    expected = reference.batchnorm_forward_inference(
        x, scale, bias, saved_mean, saved_inv, mode=mode, var_is_inv_std=True, fused_activation=fused
    )
    check(y, expected, x_dtype, "elementwise", "y (inverse std)")

    dy = filled(rng.standard_normal(shape), x_dtype, layout)
    dy = _clear_of_kinks(x, dy, scale, bias, saved_mean, saved_inv, mode, fused)
    backward_act = act if activation is None else {**act, "bias": bias}
    for stats in ((saved_mean, saved_inv), (None, None)):
        outputs = {"dx": nan_filled(shape, x_dtype, layout), "dscale": nan_filled(pshape, types["scale"]),
                   "dbias": nan_filled(pshape, types["bias"])}  # fmt: skip
        dx, dscale, dbias = backend.backward(
            x, dy, scale, saved_mean=stats[0], saved_inv_std=stats[1], mode=mode, **outputs, **backward_act
        )
        expected = reference.batchnorm_backward(
            x, dy, scale, saved_mean=stats[0], saved_inv_std=stats[1], mode=mode, bias=bias, fused_activation=fused
        )
        how = "saved" if stats[0] is not None else "recomputed"
        check(dx, expected["dx"], x_dtype, "elementwise", f"dx ({how} statistics)")
        check(dscale, expected["dscale"], types["scale"], "reduction", f"dscale ({how} statistics)")
        check(dbias, expected["dbias"], types["bias"], "reduction", f"dbias ({how} statistics)")


@pytest.mark.parametrize("case", list(_type_assignments()), ids=_type_id)
def test_every_parameter_type_combination(backend, rng, case):
    """Scale, bias, the means and the variances each float32 or x's type (NHWC x)."""
    x_dtype, types = case
    _exercise(backend, rng, SHAPE, x_dtype, types)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("x_dtype", IO_DTYPES)
@pytest.mark.parametrize("name", list(ACTIVATIONS))
def test_fused_activation_v3_and_inverse_variance(backend, rng, name, x_dtype, mode):
    """Every activation mode forward and backward, with V3 training; scale and
    bias in x's type, statistics in float32."""
    types = {"scale": x_dtype, "bias": x_dtype, "mean": "float32", "var": "float32"}
    _exercise(backend, rng, ACTIVATION_SHAPE, x_dtype, types, mode=mode, activation=name, v3=True)


# Shapes whose features the GPU splits over several blocks (statistics
# partials, their merge, then the elementwise pass: feature_passes.hip,
# bn_stats.hip, bn_forward.hip, bn_backward.hip) with and without an
# activation (whose kernels walk one element at a time, so they split
# smaller shapes).
MULTI_LAUNCH = {
    "spatial-nchw": ((4, 3, 128, 160), "spatial", PACKED),
    "spatial-nhwc": ((4, 3, 128, 160), "spatial", CHANNELS_LAST),
    "per_activation": ((4096, 3, 2, 2), "per_activation", PACKED),
}


@pytest.fixture
def gpu_side():
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("torch sees no CUDA device")
    from support import backends

    side = backends.Side("gpu")
    yield side
    side.close()


@pytest.mark.gpu
@pytest.mark.parametrize("x_dtype", ["float32", "float16"])
@pytest.mark.parametrize("name", [None] + list(ACTIVATIONS))
@pytest.mark.parametrize("geometry", list(MULTI_LAUNCH))
def test_multi_launch_kernels_on_the_gpu(gpu_side, rng, geometry, name, x_dtype):
    shape, mode, layout = MULTI_LAUNCH[geometry]
    if name is not None:  # the one-element walk splits from M > 8192 on
        shape = (shape[0] // 4,) + shape[1:] if mode == "per_activation" else (2, 3, 64, 80)
    types = {"scale": x_dtype, "bias": "float32", "mean": "float32", "var": x_dtype}
    _exercise(gpu_side, rng, shape, x_dtype, types, mode=mode, layout=layout, activation=name, v3=name is not None)


def test_fused_activation_backward_recomputing_statistics_in_float(backend, rng):
    """NHWC float32 with M >= 256 values a feature: dx in float, statistics
    recomputed for the activation's input.  That call takes the most working
    arrays of any (it once ran out of them: AllocFailed)."""
    shape = (4, 3, 8, 10)
    x = filled(rng.normal(0.3, 1.4, shape), "float32", CHANNELS_LAST)
    dy = filled(rng.standard_normal(shape), "float32", CHANNELS_LAST)
    scale, bias = filled(rng.uniform(0.5, 2, 3), "float32"), filled(rng.uniform(-1, 1, 3), "float32")
    dx, dscale, dbias = backend.backward(x, dy, scale, bias=bias, activation="elu", activation_params=(1.0, 0, 0))
    expected = reference.batchnorm_backward(x, dy, scale, bias=bias, fused_activation=("elu", 1.0, 0.0, 0.0))
    check(dx, expected["dx"], "float32", "elementwise", "dx")
    check(dscale, expected["dscale"], "float32", "reduction", "dscale")
    check(dbias, expected["dbias"], "float32", "reduction", "dbias")
