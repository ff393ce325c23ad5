"""Every entry point equals the float64 reference within docs/tolerances.md,
on random shapes, dtypes, layouts, modes, parameter forms and alpha/beta.

Outputs not blended into (beta == 0) are NaN-poisoned before the call, so a
NaN in a result means the library either skipped an element or read a prior
it must not read.  The reference always sees the inputs exactly as the library
does (already rounded to float16/bfloat16 where they are)."""

from __future__ import annotations

import numpy as np
from hypothesis import given
from hypothesis import strategies as st
from support.strategies import (
    CHANNELS_LAST,
    PACKED,
    Layout,
    activations,
    alpha_betas,
    bn_shapes,
    empty,
    epsilons,
    exp_avg_factors,
    filled,
    grad_dtypes,
    io_dtypes,
    layouts,
    modes,
    nan_filled,
    param_dtypes,
    param_forms,
    param_shape,
    params,
    positive_params,
    seeds,
)

import miopen_bn
from miopen_bn import reference
from miopen_bn.tolerances import check

ELEMENTWISE, REDUCTION = "elementwise", "reduction"


def prior_or_poison(rng, shape, dtype, layout, beta):
    """The output buffer: finite prior contents when beta blends them in, else NaN."""
    if beta != 0.0:
        return filled(rng.standard_normal(shape), dtype, layout)
    return nan_filled(shape, dtype, layout)


@given(
    data=st.data(),
    mode=modes(),
    dtype=io_dtypes(),
    form=param_forms(),
    scaling=alpha_betas(),
    epsilon=epsilons(),
    factor=exp_avg_factors(),
    running=st.booleans(),
    save=st.sampled_from(("no", "allocated", "given")),
    seed=seeds(),
)
def test_forward_training(data, mode, dtype, form, scaling, epsilon, factor, running, save, seed):
    shape = data.draw(bn_shapes(mode=mode, training=True), label="shape")
    pdtype = data.draw(param_dtypes(dtype), label="scale/bias dtype")
    sdtype = data.draw(param_dtypes(dtype), label="statistics dtype")
    x_layout = data.draw(layouts(len(shape)), label="x layout")
    y_layout = data.draw(layouts(len(shape)), label="y layout")
    alpha, beta = scaling
    rng = np.random.default_rng(seed)
    x = filled(activations(rng, shape, mode), dtype, x_layout)
    scale = filled(params(rng, shape, mode, form), pdtype)
    bias = filled(params(rng, shape, mode, form), pdtype)
    y = prior_or_poison(rng, shape, dtype, y_layout, beta)
    run_mean = filled(params(rng, shape, mode, form), sdtype) if running else None
    run_var = filled(positive_params(rng, shape, mode, form), sdtype) if running else None
    given = save == "given"
    saved_out = [nan_filled(scale.shape, sdtype) for _ in range(2)] if given else [None, None]
    expected = reference.batchnorm_forward_training(
        x,
        scale,
        bias,
        mode=mode,
        epsilon=epsilon,
        exp_avg_factor=factor,
        alpha=alpha,
        beta=beta,
        y_prior=y.copy(),
        running_mean=None if run_mean is None else run_mean.copy(),
        running_var=None if run_var is None else run_var.copy(),
    )

    out, saved_mean, saved_inv_std = miopen_bn.batchnorm_forward_training(
        x,
        scale,
        bias,
        mode=mode,
        epsilon=epsilon,
        exp_avg_factor=factor,
        running_mean=run_mean,
        running_var=run_var,
        save_stats=save != "no",
        saved_mean=saved_out[0],
        saved_inv_std=saved_out[1],
        alpha=alpha,
        beta=beta,
        y=y,
    )

    assert out is y
    check(y, expected["y"], dtype, ELEMENTWISE, "y")
    if given:
        assert saved_mean is saved_out[0] and saved_inv_std is saved_out[1]
    if save != "no":
        saved_dtype = sdtype if (given or running) else pdtype  # new ones follow the running ones, else the scale
        assert saved_mean.shape == scale.shape and saved_mean.dtype == np.dtype(saved_dtype)
        check(saved_mean, expected["saved_mean"], saved_dtype, REDUCTION, "saved_mean")
        check(saved_inv_std, expected["saved_inv_std"], saved_dtype, REDUCTION, "saved_inv_std")
    else:
        assert saved_mean is None and saved_inv_std is None
    if running:
        check(run_mean, expected["running_mean"], sdtype, REDUCTION, "running_mean")
        check(run_var, expected["running_var"], sdtype, REDUCTION, "running_var")


@given(
    data=st.data(),
    mode=modes(),
    dtype=io_dtypes(),
    form=param_forms(),
    scaling=alpha_betas(),
    epsilon=epsilons(),
    estimates=st.booleans(),
    seed=seeds(),
)
def test_forward_inference(data, mode, dtype, form, scaling, epsilon, estimates, seed):
    shape = data.draw(bn_shapes(mode=mode), label="shape")
    pdtype = data.draw(param_dtypes(dtype), label="scale/bias dtype")
    sdtype = data.draw(param_dtypes(dtype), label="estimates dtype")
    x_layout = data.draw(layouts(len(shape)), label="x layout")
    y_layout = data.draw(layouts(len(shape)), label="y layout")
    alpha, beta = scaling
    rng = np.random.default_rng(seed)
    x = filled(activations(rng, shape, mode), dtype, x_layout)
    scale = filled(params(rng, shape, mode, form), pdtype)
    bias = filled(params(rng, shape, mode, form), pdtype)
    mean = filled(params(rng, shape, mode, form), sdtype) if estimates else None
    var = filled(positive_params(rng, shape, mode, form), sdtype) if estimates else None
    if not estimates and reference.reduction_count(shape, mode) < 2:
        epsilon = max(epsilon, 1e-3)  # batch statistics of one value: var 0, keep 1/sqrt finite
    y = prior_or_poison(rng, shape, dtype, y_layout, beta)
    expected = reference.batchnorm_forward_inference(
        x, scale, bias, mean, var, mode=mode, epsilon=epsilon, alpha=alpha, beta=beta, y_prior=y.copy()
    )

    out = miopen_bn.batchnorm_forward_inference(
        x, scale, bias, mean, var, mode=mode, epsilon=epsilon, alpha=alpha, beta=beta, y=y
    )

    assert out is y
    check(y, expected, dtype, ELEMENTWISE, "y")


@given(
    data=st.data(),
    mode=modes(),
    dtype=io_dtypes(),
    form=param_forms(),
    data_scaling=alpha_betas(),
    param_scaling=alpha_betas(),
    epsilon=epsilons(),
    saved=st.booleans(),
    seed=seeds(),
)
def test_backward(data, mode, dtype, form, data_scaling, param_scaling, epsilon, saved, seed):
    shape = data.draw(bn_shapes(mode=mode, training=True), label="shape")
    pdtype = data.draw(param_dtypes(dtype), label="scale dtype")
    sdtype = data.draw(param_dtypes(dtype), label="saved statistics dtype")
    bdtype = data.draw(param_dtypes(dtype), label="dbias dtype")
    gdtype = data.draw(grad_dtypes(dtype), label="dy/dx dtype")
    x_layout = data.draw(layouts(len(shape)), label="x layout")
    dy_layout = data.draw(layouts(len(shape)), label="dy layout")
    dx_layout = data.draw(layouts(len(shape)), label="dx layout")
    (alpha_data, beta_data), (alpha_param, beta_param) = data_scaling, param_scaling
    rng = np.random.default_rng(seed)
    x = filled(activations(rng, shape, mode), dtype, x_layout)
    dy = filled(rng.standard_normal(shape), gdtype, dy_layout)
    scale = filled(params(rng, shape, mode, form), pdtype)
    saved_mean = saved_inv_std = None
    if saved:
        stats = reference.batchnorm_forward_training(x, scale, scale, mode=mode, epsilon=epsilon)
        pshape = param_shape(shape, mode, form)
        saved_mean = filled(stats["saved_mean"].reshape(pshape), sdtype)
        saved_inv_std = filled(stats["saved_inv_std"].reshape(pshape), sdtype)
    dx = prior_or_poison(rng, shape, gdtype, dx_layout, beta_data)
    dscale = prior_or_poison(rng, scale.shape, pdtype, PACKED, beta_param)
    dbias = prior_or_poison(rng, scale.shape, bdtype, PACKED, beta_param)
    expected = reference.batchnorm_backward(
        x,
        dy,
        scale,
        saved_mean=saved_mean,
        saved_inv_std=saved_inv_std,
        mode=mode,
        epsilon=epsilon,
        alpha_data=alpha_data,
        beta_data=beta_data,
        alpha_param=alpha_param,
        beta_param=beta_param,
        dx_prior=dx.copy(),
        dscale_prior=dscale.copy(),
        dbias_prior=dbias.copy(),
    )

    outs = miopen_bn.batchnorm_backward(
        x,
        dy,
        scale,
        saved_mean=saved_mean,
        saved_inv_std=saved_inv_std,
        mode=mode,
        epsilon=epsilon,
        alpha_data=alpha_data,
        beta_data=beta_data,
        alpha_param=alpha_param,
        beta_param=beta_param,
        dx=dx,
        dscale=dscale,
        dbias=dbias,
    )

    assert outs[0] is dx and outs[1] is dscale and outs[2] is dbias
    check(dx, expected["dx"], gdtype, ELEMENTWISE, "dx")
    check(dscale, expected["dscale"], pdtype, REDUCTION, "dscale")
    check(dbias, expected["dbias"], bdtype, REDUCTION, "dbias")


@given(mode=modes(), dtype=io_dtypes(), seed=seeds(), data=st.data())
def test_allocated_outputs_follow_x(mode, dtype, seed, data):
    """Outputs not given are allocated: y/dx in x's layout, the rest like scale."""
    shape = data.draw(bn_shapes(mode=mode, training=True), label="shape")
    layout = data.draw(layouts(len(shape)), label="x layout")
    rng = np.random.default_rng(seed)
    x = filled(activations(rng, shape, mode), dtype, layout)
    scale = filled(params(rng, shape, mode, "short"), "float32")
    bias = filled(params(rng, shape, mode, "short"), "float32")
    y, saved_mean, saved_inv_std = miopen_bn.batchnorm_forward_training(x, scale, bias, mode=mode)
    expected = reference.batchnorm_forward_training(x, scale, bias, mode=mode)
    assert y.dtype == x.dtype and y.shape == x.shape
    assert np.argsort(y.strides).tolist() == np.argsort(x.strides).tolist() or min(shape) == 1
    check(y, expected["y"], dtype, ELEMENTWISE, "y")
    check(saved_mean, expected["saved_mean"], "float32", REDUCTION, "saved_mean")
    dy = filled(rng.standard_normal(shape), dtype, layout)
    dx, dscale, dbias = miopen_bn.batchnorm_backward(x, dy, scale, mode=mode)
    grads = reference.batchnorm_backward(x, dy, scale, mode=mode)
    assert dx.dtype == dy.dtype and dscale.shape == scale.shape and dbias.dtype == scale.dtype
    check(dx, grads["dx"], dtype, ELEMENTWISE, "dx")
    check(dbias, grads["dbias"], "float32", REDUCTION, "dbias")


@given(mode=modes(), dtype=io_dtypes(), seed=seeds(), data=st.data())
def test_in_place(mode, dtype, seed, data):
    """y == x and dx == dy give the same results as separate buffers."""
    shape = data.draw(bn_shapes(mode=mode, training=True), label="shape")
    layout = data.draw(layouts(len(shape)), label="layout")
    rng = np.random.default_rng(seed)
    values = activations(rng, shape, mode)
    scale = filled(params(rng, shape, mode, "short"), "float32")
    bias = filled(params(rng, shape, mode, "short"), "float32")

    x = filled(values, dtype, layout)
    expected = reference.batchnorm_forward_training(x, scale, bias, mode=mode)
    y, saved_mean, saved_inv_std = miopen_bn.batchnorm_forward_training(x, scale, bias, mode=mode, y=x)
    assert y is x
    check(x, expected["y"], dtype, ELEMENTWISE, "y over x (training)")

    x = filled(values, dtype, layout)
    mean, var = filled(expected["saved_mean"], "float32"), filled(1 + rng.random(scale.shape), "float32")
    expected_inference = reference.batchnorm_forward_inference(x, scale, bias, mean, var, mode=mode)
    miopen_bn.batchnorm_forward_inference(
        x, scale, bias, mean.reshape(scale.shape), var.reshape(scale.shape), mode=mode, y=x
    )
    check(x, expected_inference, dtype, ELEMENTWISE, "y over x (inference)")

    x = filled(values, dtype, layout)
    dy = filled(rng.standard_normal(shape), dtype, layout)
    grads = reference.batchnorm_backward(
        x, dy, scale, saved_mean=saved_mean, saved_inv_std=saved_inv_std, mode=mode
    )
    dx, _, _ = miopen_bn.batchnorm_backward(
        x, dy, scale, saved_mean=saved_mean, saved_inv_std=saved_inv_std, mode=mode, dx=dy
    )
    assert dx is dy
    check(dy, grads["dx"], dtype, ELEMENTWISE, "dx over dy")


@given(mode=modes(), seed=seeds(), steps=st.integers(2, 5), data=st.data())
def test_running_statistics_evolve(mode, seed, steps, data):
    """With f = 1/(1+i) the running statistics are the cumulative average of
    the batch means and unbiased variances
    (docs/conventions.md#batch-norm-statistics), step after step."""
    shape = data.draw(bn_shapes(mode=mode, training=True), label="shape")
    rng = np.random.default_rng(seed)
    scale = filled(params(rng, shape, mode, "short"), "float32")
    bias = filled(params(rng, shape, mode, "short"), "float32")
    run_mean = filled(params(rng, shape, mode, "short"), "float32")
    run_var = filled(positive_params(rng, shape, mode, "short"), "float32")
    means, variances = [], []
    m = reference.reduction_count(shape, mode)
    for step in range(steps):
        x = filled(activations(rng, shape, mode), "float32")
        expected = reference.batchnorm_forward_training(
            x,
            scale,
            bias,
            mode=mode,
            exp_avg_factor=1 / (1 + step),
            running_mean=run_mean.copy(),
            running_var=run_var.copy(),
        )
        miopen_bn.batchnorm_forward_training(
            x,
            scale,
            bias,
            mode=mode,
            exp_avg_factor=1 / (1 + step),
            running_mean=run_mean,
            running_var=run_var,
            save_stats=False,
        )
        check(run_mean, expected["running_mean"], "float32", REDUCTION, f"running_mean after step {step}")
        check(run_var, expected["running_var"], "float32", REDUCTION, f"running_var after step {step}")
        batch_mean, batch_var = reference.batch_statistics(x, mode)
        means.append(batch_mean)
        variances.append(batch_var * m / (m - 1))
    check(run_mean, np.mean(means, axis=0), "float32", REDUCTION, "cumulative mean")
    check(run_var, np.mean(variances, axis=0), "float32", REDUCTION, "cumulative unbiased variance")


def test_empty_helper_makes_the_requested_layout():
    # The layouts the properties draw really are what they claim.
    nhwc = empty((2, 3, 4, 5), "float32", CHANNELS_LAST)
    assert nhwc.strides == (4 * 60, 4 * 1, 4 * 15, 4 * 3)
    padded = empty((2, 3, 4, 5), "float32", Layout("padded", padding=2))
    assert padded.strides == (4 * 84, 4 * 28, 4 * 7, 4 * 1)
