"""The split-phase (data-parallel) batch-norm ops: a batch split over K
simulated ranks, each rank's partials merged and its gradient sums added up
as collectives would, must give the float64 reference over the whole batch;
on one rank the five ops must give what the one-call entry points give.
Runs on every backend (the ``backend`` fixture)."""

from __future__ import annotations

import numpy as np
import pytest

import miopen_bn
from miopen_bn import dtypes, reference
from miopen_bn.arrays import in_memory_order
from miopen_bn.tolerances import check

NHWC = (0, 2, 3, 1)

# (shape, mode, x dtype, parameter dtype, statistics dtype, memory order, rank
# sizes along N).  Ranks of unequal size, one of a single sample.
CASES = [
    pytest.param((6, 3, 5, 4), "spatial", "float32", "float32", "float64", None, (1, 3, 2), id="f32-nchw-3ranks"),
    pytest.param((5, 4, 3, 6), "spatial", "float16", "float32", "float32", NHWC, (4, 1), id="f16-nhwc-2ranks"),
    pytest.param((4, 3, 2, 5), "spatial", "bfloat16", "bfloat16", "float32", None, (2, 2), id="bf16-own-params"),
    pytest.param((5, 6), "spatial", "float64", "float64", "float64", None, (1, 4), id="f64-rank2"),
    pytest.param((4, 2, 3, 2, 3), "spatial", "float32", "float32", "float32", None, (4,), id="f32-5d-1rank"),
    pytest.param((5, 3, 4, 4), "per_activation", "float32", "float32", "float64", None, (2, 1, 2),
                 id="f32-per-activation-3ranks"),
]


def _nan_like(array):
    return np.full_like(array, np.nan)


def _random(rng, shape, dtype, order=None, scale=1.0, shift=0.0):
    values = in_memory_order(rng.standard_normal, shape, order or range(len(shape))) * scale + shift
    return values.astype(dtypes.NUMPY_DTYPE[dtype])


class Ranks:
    """K simulated ranks on one backend: the five ops with NaN-poisoned
    outputs, and the collectives done on the host."""

    def __init__(self, side, mode, stats_dtype):
        self.side, self.mode, self.stats_dtype = side, mode, stats_dtype
        self.put, self.get, self.handle = side.put, side.get, side.handle

    def forward(self, parts, scale, bias, running_mean, running_var, epsilon=1e-5, factor=0.1):
        partials = []
        for part in parts:
            p_shape = miopen_bn.batchnorm_local_statistics(part, mode=self.mode, stats_dtype=self.stats_dtype)[0].shape
            stats = [self.put(np.full(p_shape, np.nan, self.stats_dtype)) for _ in range(3)]
            count, mean, m2 = miopen_bn.batchnorm_local_statistics(
                self.put(part), mode=self.mode, count=stats[0], mean=stats[1], m2=stats[2], handle=self.handle
            )
            partials.append([self.get(v) for v in (count, mean, m2)])
        gathered = [self.put(np.stack([p[i] for p in partials])) for i in range(3)]  # the all-gather
        saved = [self.put(_nan_like(scale)) for _ in range(2)]
        run = [self.put(running_mean), self.put(running_var)]
        mean, inv_std = miopen_bn.batchnorm_merge_statistics(
            *gathered, epsilon=epsilon, exp_avg_factor=factor, running_mean=run[0], running_var=run[1],
            saved_mean=saved[0], saved_inv_std=saved[1], handle=self.handle,
        )
        np.copyto(running_mean, self.get(run[0]))
        np.copyto(running_var, self.get(run[1]))
        ys = [
            self.get(miopen_bn.batchnorm_forward_normalize(
                self.put(part), self.put(scale), self.put(bias), mean, inv_std, mode=self.mode,
                y=self.put(_nan_like(part)), handle=self.handle,
            ))
            for part in parts
        ]
        self.count = sum(p[0] for p in partials)  # what the ranks learn from the gathered counts
        return ys, self.get(mean), self.get(inv_std)

    def backward(self, parts, dys, scale, mean, inv_std):
        sums, dscale, dbias = [], 0.0, 0.0
        for part, dy in zip(parts, dys):
            poisoned = [self.put(np.full(self.count.shape, np.nan, self.stats_dtype)) for _ in range(2)]
            grads = [self.put(_nan_like(scale)) for _ in range(2)]
            out = miopen_bn.batchnorm_backward_reduce(
                self.put(part), self.put(dy), self.put(mean), self.put(inv_std), mode=self.mode,
                sum_dy=poisoned[0], sum_dy_xmu=poisoned[1], dscale=grads[0], dbias=grads[1], handle=self.handle,
            )
            sum_dy, sum_dy_xmu, rank_dscale, rank_dbias = (self.get(v) for v in out)
            sums.append((sum_dy, sum_dy_xmu))
            dscale = dscale + rank_dscale.astype(np.float64)  # what DDP's gradient all-reduce adds up
            dbias = dbias + rank_dbias.astype(np.float64)
        total = [self.put(sum(s[i] for s in sums)) for i in range(2)]  # the all-reduce
        count = self.put(self.count)
        dxs = [
            self.get(miopen_bn.batchnorm_backward_elementwise(
                self.put(part), self.put(dy), self.put(scale), self.put(mean), self.put(inv_std), *total, count,
                mode=self.mode, dx=self.put(_nan_like(dy)), handle=self.handle,
            ))
            for part, dy in zip(parts, dys)
        ]
        return dxs, dscale, dbias


@pytest.mark.parametrize("shape, mode, dtype, param_dtype, stats_dtype, order, sizes", CASES)
def test_ranks_match_one_batch_norm_over_the_whole_batch(backend, rng, shape, mode, dtype, param_dtype,
                                                         stats_dtype, order, sizes):
    assert sum(sizes) == shape[0]
    x = _random(rng, shape, dtype, order, scale=2.0, shift=3.0)
    dy = _random(rng, shape, dtype, order)
    p_shape = (shape[1],) if mode == "spatial" else shape[1:]
    p_dtype = dtypes.NUMPY_DTYPE[param_dtype]
    scale = rng.uniform(0.5, 2, p_shape).astype(p_dtype)
    bias = rng.uniform(-1, 1, p_shape).astype(p_dtype)
    running_mean = rng.uniform(-1, 1, p_shape).astype(p_dtype)
    running_var = rng.uniform(0.5, 2, p_shape).astype(p_dtype)
    expected = reference.batchnorm_forward_training(
        x, scale, bias, mode=mode, running_mean=running_mean, running_var=running_var
    )
    grads = reference.batchnorm_backward(x, dy, scale, mode=mode)

    ranks = Ranks(backend, mode, dtypes.NUMPY_DTYPE[stats_dtype])
    cuts = np.cumsum(sizes)[:-1]
    parts, dys = np.split(x, cuts), np.split(dy, cuts)
    ys, mean, inv_std = ranks.forward(parts, scale, bias, running_mean, running_var)
    check(np.concatenate(ys), expected["y"], dtype, "elementwise", "y")
    for name, got in (("saved_mean", mean), ("saved_inv_std", inv_std), ("running_mean", running_mean),
                      ("running_var", running_var)):
        check(got, expected[name].reshape(got.shape), param_dtype, "reduction", name)
    assert np.all(ranks.count == reference.reduction_count(shape, mode))

    dxs, dscale, dbias = ranks.backward(parts, dys, scale, mean, inv_std)
    check(np.concatenate(dxs), grads["dx"], dtype, "elementwise", "dx")
    check(dscale, grads["dscale"].reshape(dscale.shape), param_dtype, "reduction", "dscale")
    check(dbias, grads["dbias"].reshape(dbias.shape), param_dtype, "reduction", "dbias")


@pytest.mark.parametrize("mode", ["spatial", "per_activation"])
@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_one_rank_gives_what_the_one_call_entry_points_give(backend, rng, mode, dtype):
    shape = (4, 3, 6, 5)
    x = _random(rng, shape, dtype, scale=3.0, shift=-2.0)
    dy = _random(rng, shape, dtype)
    p_shape = (3,) if mode == "spatial" else shape[1:]
    scale = rng.uniform(0.5, 2, p_shape).astype(np.float32)
    bias = rng.uniform(-1, 1, p_shape).astype(np.float32)
    run_one = [np.zeros(p_shape, np.float32), np.ones(p_shape, np.float32)]
    run_split = [a.copy() for a in run_one]
    y, mean, inv_std = backend.forward_training(x, scale, bias, *run_one, mode=mode)
    dx, dscale, dbias = backend.backward(x, dy, scale, saved_mean=mean, saved_inv_std=inv_std, mode=mode)

    ranks = Ranks(backend, mode, np.float32)
    (y_split,), mean_split, inv_std_split = ranks.forward([x], scale, bias, *run_split)
    (dx_split,), dscale_split, dbias_split = ranks.backward([x], [dy], scale, mean_split, inv_std_split)
    # The same statistics, each ulp-close; outputs within the elementwise tolerance of each other.
    for name, got, want in (("saved_mean", mean_split, mean), ("saved_inv_std", inv_std_split, inv_std),
                            ("running_mean", run_split[0], run_one[0]), ("running_var", run_split[1], run_one[1]),
                            ("dscale", dscale_split, dscale), ("dbias", dbias_split, dbias)):
        np.testing.assert_allclose(got, want.astype(np.float64), rtol=2e-6, atol=1e-6, err_msg=name)
    check(y_split, y.astype(np.float64), dtype, "elementwise", "y")
    check(dx_split, dx.astype(np.float64), dtype, "elementwise", "dx")


def test_blending_and_float32_gradients(backend, rng):
    """alpha/beta on y, dx and the parameter gradients; float32 dy/dx under float16 x."""
    shape, mode = (3, 4, 5, 5), "spatial"
    x = _random(rng, shape, "float16")
    dy = _random(rng, shape, "float32")
    scale, bias = rng.uniform(0.5, 2, 4).astype(np.float32), rng.uniform(-1, 1, 4).astype(np.float32)
    y_prior, dx_prior = _random(rng, shape, "float16"), _random(rng, shape, "float32")
    grad_prior = [rng.standard_normal(4).astype(np.float32) for _ in range(2)]
    h, put, get = backend.handle, backend.put, backend.get
    count, mean_p, m2 = miopen_bn.batchnorm_local_statistics(put(x), handle=h)
    mean, inv_std = miopen_bn.batchnorm_merge_statistics(count[None], mean_p[None], m2[None], handle=h)
    y = get(miopen_bn.batchnorm_forward_normalize(put(x), put(scale), put(bias), mean, inv_std, alpha=0.5,
                                                  beta=2.0, y=put(y_prior.copy()), handle=h))
    expected = reference.batchnorm_forward_training(x, scale, bias, alpha=0.5, beta=2.0,
                                                    y_prior=y_prior.astype(np.float64))
    check(y, expected["y"], "float16", "elementwise", "y")
    sum_dy, sum_dy_xmu, dscale, dbias = miopen_bn.batchnorm_backward_reduce(
        put(x), put(dy), mean, inv_std, alpha_param=1.5, beta_param=-1.0, dscale=put(grad_prior[0].copy()),
        dbias=put(grad_prior[1].copy()), handle=h,
    )
    dx = get(miopen_bn.batchnorm_backward_elementwise(
        put(x), put(dy), put(scale), mean, inv_std, sum_dy, sum_dy_xmu, count, alpha_data=2.0, beta_data=0.25,
        dx=put(dx_prior.copy()), handle=h,
    ))
    grads = reference.batchnorm_backward(x, dy, scale, alpha_data=2.0, beta_data=0.25, alpha_param=1.5,
                                         beta_param=-1.0, dx_prior=dx_prior.astype(np.float64),
                                         dscale_prior=grad_prior[0], dbias_prior=grad_prior[1])
    check(dx, grads["dx"], "float32", "elementwise", "dx")
    check(get(dscale), grads["dscale"].reshape(4), "float32", "reduction", "dscale")
    check(get(dbias), grads["dbias"].reshape(4), "float32", "reduction", "dbias")


def test_merge_is_exact_where_ranks_hold_offset_data(backend, rng):
    """Ranks whose data sit far from each other (means 1e4 apart, std 1e-2):
    the merge's between-rank term carries all of the spread."""
    parts = [(1e4 * k + 1e-2 * rng.standard_normal((3, 2, 4, 4))).astype(np.float32) for k in range(3)]
    x = np.concatenate(parts)
    h, put = backend.handle, backend.put
    partials = [[backend.get(v) for v in miopen_bn.batchnorm_local_statistics(put(p), stats_dtype=np.float64,
                                                                               handle=h)] for p in parts]
    mean, inv_std = miopen_bn.batchnorm_merge_statistics(
        *(put(np.stack([p[i] for p in partials])) for i in range(3)), handle=h
    )
    expected = reference.batchnorm_forward_training(x, np.ones(2), np.zeros(2))
    check(backend.get(mean), expected["saved_mean"].reshape(2), "float32", "reduction", "mean")
    check(backend.get(inv_std), expected["saved_inv_std"].reshape(2), "float32", "reduction", "inv_std")


def test_a_rank_with_count_zero_adds_nothing(cpu_handle):
    count = np.array([[4.0, 4.0], [0.0, 0.0]])
    mean = np.array([[1.0, 2.0], [np.nan, np.nan]])  # an empty rank's mean is garbage
    m2 = np.array([[8.0, 4.0], [np.nan, np.nan]])
    saved_mean, inv_std = miopen_bn.batchnorm_merge_statistics(count, mean, m2, epsilon=0.0, handle=cpu_handle)
    np.testing.assert_array_equal(saved_mean, [1.0, 2.0])
    np.testing.assert_allclose(inv_std, [1 / np.sqrt(2.0), 1.0], rtol=1e-15)


# ---- argument checks: a status, a message, and nothing written -----------------


def _poisoned(shape, dtype=np.float32):
    return np.full(shape, np.nan, dtype)


def test_statistics_of_half_type_are_not_implemented(lib, ffi, cpu_handle):
    x = np.ones((2, 3, 4, 4), np.float32)
    stats = [np.full((1, 3, 1, 1), np.nan, np.float16) for _ in range(3)]
    x_desc = miopen_bn.TensorDescriptor("float32", x.shape)
    s_desc = miopen_bn.TensorDescriptor("float16", (1, 3, 1, 1))
    status = lib.miopenBNBatchNormLocalStatistics(cpu_handle.ptr, lib.miopenBNSpatial, x_desc.ptr,
                                                  ffi.from_buffer(x), s_desc.ptr, *(ffi.from_buffer(s) for s in stats))
    assert status == lib.miopenStatusNotImplemented
    assert "statistics of type miopenHalf" in ffi.string(lib.miopenBNGetLastErrorMessage()).decode()
    assert all(np.isnan(s.astype(np.float32)).all() for s in stats)
    with pytest.raises(miopen_bn.MIOpenNotImplementedError, match="statistics of type miopenHalf"):
        miopen_bn.batchnorm_local_statistics(x, count=stats[0], mean=stats[1], m2=stats[2], handle=cpu_handle)


def test_merge_refuses_outputs_that_do_not_fit_and_writes_nothing(lib, ffi, cpu_handle):
    partials = [np.ones((2, 3), np.float32) for _ in range(3)]
    saved = [_poisoned((1, 4)) for _ in range(2)]
    p_desc = miopen_bn.TensorDescriptor("float32", (2, 3))
    s_desc = miopen_bn.TensorDescriptor("float32", (1, 4))
    status = lib.miopenBNBatchNormMergeStatistics(
        cpu_handle.ptr, p_desc.ptr, *(ffi.from_buffer(p) for p in partials), 1e-5, s_desc.ptr,
        *(ffi.from_buffer(s) for s in saved), 0.1, ffi.NULL, ffi.NULL, ffi.NULL,
    )
    assert status == lib.miopenStatusBadParm
    assert "savedDesc" in ffi.string(lib.miopenBNGetLastErrorMessage()).decode()
    assert all(np.isnan(s).all() for s in saved)


def test_merge_wants_both_running_statistics_or_neither(lib, ffi, cpu_handle):
    partials = [np.ones((2, 3), np.float32) for _ in range(3)]
    saved = [_poisoned((1, 3)) for _ in range(2)]
    running = _poisoned((1, 3))
    p_desc = miopen_bn.TensorDescriptor("float32", (2, 3))
    s_desc = miopen_bn.TensorDescriptor("float32", (1, 3))
    status = lib.miopenBNBatchNormMergeStatistics(
        cpu_handle.ptr, p_desc.ptr, *(ffi.from_buffer(p) for p in partials), 1e-5, s_desc.ptr,
        *(ffi.from_buffer(s) for s in saved), 0.1, s_desc.ptr, ffi.from_buffer(running), ffi.NULL,
    )
    assert status == lib.miopenStatusBadParm
    assert "exactly one of runningMean and runningVariance is NULL" in ffi.string(
        lib.miopenBNGetLastErrorMessage()).decode()
    assert np.isnan(saved[0]).all() and np.isnan(running).all()


@pytest.mark.parametrize("epsilon", [-1.0, float("nan")])
def test_merge_refuses_bad_epsilon(cpu_handle, epsilon):
    partials = [np.ones((1, 3)) for _ in range(3)]
    with pytest.raises(miopen_bn.MIOpenBadParmError, match="epsilon"):
        miopen_bn.batchnorm_merge_statistics(*partials, epsilon=epsilon, handle=cpu_handle)


def test_backward_reduce_wants_both_gradients_or_neither(lib, ffi, cpu_handle):
    x = np.ones((2, 3, 2, 2), np.float32)
    stats = [np.ones((1, 3, 1, 1), np.float32) for _ in range(2)]
    sums = [_poisoned((1, 3, 1, 1)) for _ in range(2)]
    dscale = _poisoned((1, 3, 1, 1))
    x_desc = miopen_bn.TensorDescriptor("float32", x.shape)
    p_desc = miopen_bn.TensorDescriptor("float32", (1, 3, 1, 1))
    one, zero = ffi.new("float*", 1.0), ffi.new("float*", 0.0)
    status = lib.miopenBNBatchNormBackwardReduce(
        cpu_handle.ptr, lib.miopenBNSpatial, one, zero, x_desc.ptr, ffi.from_buffer(x), x_desc.ptr,
        ffi.from_buffer(x), p_desc.ptr, *(ffi.from_buffer(s) for s in stats), ffi.from_buffer(dscale), ffi.NULL,
        p_desc.ptr, *(ffi.from_buffer(s) for s in sums),
    )
    assert status == lib.miopenStatusBadParm
    assert "resultBnScaleDiff" in ffi.string(lib.miopenBNGetLastErrorMessage()).decode()
    assert np.isnan(dscale).all() and all(np.isnan(s).all() for s in sums)


def test_elementwise_refuses_statistics_one_descriptor_cannot_describe(cpu_handle):
    """sum_dy, sum_dy_xmu and count share the C call's sumsDesc: a count of
    another shape would be read with sum_dy's."""
    x = np.ones((2, 3, 2, 2), np.float32)
    p = np.ones(3, np.float32)
    with pytest.raises(ValueError, match=r"sum_dy .* and count .* share one descriptor"):
        miopen_bn.batchnorm_backward_elementwise(x, x, p, p, p, p, p, np.ones(4, np.float32), handle=cpu_handle)


def test_normalize_refuses_unknown_mode(lib, ffi, cpu_handle):
    x = np.ones((2, 3, 2, 2), np.float32)
    y = _poisoned(x.shape)
    p = np.ones((1, 3, 1, 1), np.float32)
    x_desc = miopen_bn.TensorDescriptor("float32", x.shape)
    p_desc = miopen_bn.TensorDescriptor("float32", p.shape)
    one, zero = ffi.new("float*", 1.0), ffi.new("float*", 0.0)
    status = lib.miopenBNBatchNormForwardNormalize(
        cpu_handle.ptr, 7, one, zero, x_desc.ptr, ffi.from_buffer(x), x_desc.ptr, ffi.from_buffer(y), p_desc.ptr,
        *(ffi.from_buffer(p) for _ in range(4)),
    )
    assert status == lib.miopenStatusBadParm
    assert "bn_mode 7" in ffi.string(lib.miopenBNGetLastErrorMessage()).decode()
    assert np.isnan(y).all()
