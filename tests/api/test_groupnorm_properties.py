"""Group norm equals the float64 reference within docs/tolerances.md, on
random shapes, group counts, dtypes, layouts, parameter forms, with and
without the affine transform and the fused swish.

Every output is NaN-poisoned before the call, so an element the library
skipped fails.  The reference sees the inputs exactly as the library does
(already rounded to float16/bfloat16 where they are)."""

from __future__ import annotations

import numpy as np
from hypothesis import given
from hypothesis import strategies as st
from support.strategies import (
    PACKED,
    epsilons,
    filled,
    gn_activation_names,
    gn_shapes,
    group_activations,
    io_dtypes,
    layouts,
    nan_filled,
    param_dtypes,
    param_forms,
    param_shape,
    params,
    seeds,
    stats_dtype,
    swish_betas,
)

import miopen_bn
from miopen_bn import reference
from miopen_bn.tolerances import check

ELEMENTWISE, REDUCTION = "elementwise", "reduction"


def saved_statistics(x, num_groups, epsilon, dtype, transposed):
    """The reference's mean and rstd as the forward would have saved them,
    stored (N, G) row-major or as a transposed view."""
    mean, rstd = reference.group_statistics(x, num_groups, epsilon)
    if transposed:
        return filled(mean.T, dtype).T, filled(rstd.T, dtype).T
    return filled(mean, dtype), filled(rstd, dtype)


@given(
    data=st.data(),
    dtype=io_dtypes(),
    form=param_forms(),
    affine=st.booleans(),
    activation=gn_activation_names(),
    swish_beta=swish_betas(),
    epsilon=epsilons(),
    seed=seeds(),
)
def test_forward(data, dtype, form, affine, activation, swish_beta, epsilon, seed):
    shape, groups = data.draw(gn_shapes(), label="shape, num_groups")
    pdtype = data.draw(param_dtypes(dtype), label="param dtype")
    x_layout = data.draw(layouts(len(shape)), label="x layout")
    y_layout = data.draw(layouts(len(shape)), label="y layout")
    rng = np.random.default_rng(seed)
    x = filled(group_activations(rng, shape, groups), dtype, x_layout)
    weight = filled(params(rng, shape, "spatial", form), pdtype) if affine else None
    bias = filled(params(rng, shape, "spatial", form), pdtype) if affine else None
    y = nan_filled(shape, dtype, y_layout)
    expected = reference.groupnorm_forward(
        x, groups, weight, bias, epsilon=epsilon, activation=activation, swish_beta=swish_beta
    )

    out, mean, rstd = miopen_bn.groupnorm_forward(
        x, groups, weight, bias, epsilon=epsilon, activation=activation, swish_beta=swish_beta, y=y
    )

    assert out is y
    check(y, expected["y"], dtype, ELEMENTWISE, "y")
    assert mean.shape == rstd.shape == (shape[0], groups)
    assert mean.dtype == rstd.dtype == np.dtype(stats_dtype(dtype))
    check(mean, expected["mean"], mean.dtype, REDUCTION, "mean")
    check(rstd, expected["rstd"], rstd.dtype, REDUCTION, "rstd")


@given(
    data=st.data(),
    dtype=io_dtypes(),
    form=param_forms(),
    affine=st.booleans(),
    activation=gn_activation_names(),
    swish_beta=swish_betas(),
    epsilon=epsilons(),
    transposed_stats=st.booleans(),
    seed=seeds(),
)
def test_backward(data, dtype, form, affine, activation, swish_beta, epsilon, transposed_stats, seed):
    shape, groups = data.draw(gn_shapes(), label="shape, num_groups")
    pdtype = data.draw(param_dtypes(dtype), label="param dtype")
    x_layout = data.draw(layouts(len(shape)), label="x layout")
    dy_layout = data.draw(layouts(len(shape)), label="dy layout")
    dx_layout = data.draw(layouts(len(shape)), label="dx layout")
    rng = np.random.default_rng(seed)
    x = filled(group_activations(rng, shape, groups), dtype, x_layout)
    dy = filled(rng.standard_normal(shape), dtype, dy_layout)
    weight = filled(params(rng, shape, "spatial", form), pdtype) if affine else None
    bias = filled(params(rng, shape, "spatial", form), pdtype) if affine else None
    mean, rstd = saved_statistics(x, groups, epsilon, stats_dtype(dtype), transposed_stats)
    dx = nan_filled(shape, dtype, dx_layout)
    pshape = param_shape(shape, "spatial", form)
    dweight = nan_filled(pshape, pdtype) if affine else None
    dbias = nan_filled(pshape, pdtype) if affine else None
    expected = reference.groupnorm_backward(
        x, dy, groups, weight, mean, rstd, bias=bias, activation=activation, swish_beta=swish_beta
    )

    outs = miopen_bn.groupnorm_backward(
        x,
        dy,
        groups,
        weight,
        mean,
        rstd,
        bias=bias,
        activation=activation,
        swish_beta=swish_beta,
        dx=dx,
        dweight=dweight,
        dbias=dbias,
    )

    assert outs[0] is dx and outs[1] is dweight and outs[2] is dbias
    check(dx, expected["dx"], dtype, ELEMENTWISE, "dx")
    if affine:
        check(dweight, expected["dweight"], pdtype, REDUCTION, "dweight")
        check(dbias, expected["dbias"], pdtype, REDUCTION, "dbias")


@given(dtype=io_dtypes(), activation=gn_activation_names(), seed=seeds(), data=st.data())
def test_allocated_outputs_follow_x(dtype, activation, seed, data):
    """Outputs not given are allocated: y/dx in x's layout, dweight/dbias like weight."""
    shape, groups = data.draw(gn_shapes(), label="shape, num_groups")
    layout = data.draw(layouts(len(shape)), label="x layout")
    rng = np.random.default_rng(seed)
    x = filled(group_activations(rng, shape, groups), dtype, layout)
    weight = filled(params(rng, shape, "spatial", "short"), "float32")
    bias = filled(params(rng, shape, "spatial", "short"), "float32")
    y, mean, rstd = miopen_bn.groupnorm_forward(x, groups, weight, bias, activation=activation)
    expected = reference.groupnorm_forward(x, groups, weight, bias, activation=activation)
    assert y.dtype == x.dtype and y.shape == x.shape
    assert np.argsort(y.strides).tolist() == np.argsort(x.strides).tolist() or min(shape) == 1
    check(y, expected["y"], dtype, ELEMENTWISE, "y")
    dy = filled(rng.standard_normal(shape), dtype, layout)
    dx, dweight, dbias = miopen_bn.groupnorm_backward(
        x, dy, groups, weight, mean, rstd, bias=bias, activation=activation
    )
    grads = reference.groupnorm_backward(x, dy, groups, weight, mean, rstd, bias=bias, activation=activation)
    assert dx.dtype == x.dtype and dweight.shape == weight.shape and dbias.dtype == weight.dtype
    check(dx, grads["dx"], dtype, ELEMENTWISE, "dx")
    check(dbias, grads["dbias"], "float32", REDUCTION, "dbias")
    dx, dweight, dbias = miopen_bn.groupnorm_backward(x, dy, groups, None, mean, rstd, activation=activation)
    assert dweight is None and dbias is None
    check(dx, reference.groupnorm_backward(x, dy, groups, None, mean, rstd, activation=activation)["dx"],
          dtype, ELEMENTWISE, "dx without weight")


@given(dtype=io_dtypes(), activation=gn_activation_names(), seed=seeds(), data=st.data())
def test_in_place(dtype, activation, seed, data):
    """y == x and dx == dy give the same results as separate buffers."""
    shape, groups = data.draw(gn_shapes(), label="shape, num_groups")
    layout = data.draw(layouts(len(shape)), label="layout")
    rng = np.random.default_rng(seed)
    values = group_activations(rng, shape, groups)
    weight = filled(params(rng, shape, "spatial", "short"), "float32")
    bias = filled(params(rng, shape, "spatial", "short"), "float32")

    x = filled(values, dtype, layout)
    expected = reference.groupnorm_forward(x, groups, weight, bias, activation=activation)
    y, mean, rstd = miopen_bn.groupnorm_forward(x, groups, weight, bias, activation=activation, y=x)
    assert y is x
    check(x, expected["y"], dtype, ELEMENTWISE, "y over x")

    x = filled(values, dtype, layout)
    dy = filled(rng.standard_normal(shape), dtype, layout)
    grads = reference.groupnorm_backward(x, dy, groups, weight, mean, rstd, bias=bias, activation=activation)
    dx, _, _ = miopen_bn.groupnorm_backward(
        x, dy, groups, weight, mean, rstd, bias=bias, activation=activation, dx=dy
    )
    assert dx is dy
    check(dy, grads["dx"], dtype, ELEMENTWISE, "dx over dy")


def test_group_shapes_helper_keeps_groups_valid():
    # The strategy's promise: G divides C and every group has two values or more.
    @given(gn_shapes())
    def each(drawn):
        shape, groups = drawn
        assert shape[1] % groups == 0
        assert shape[1] // groups * int(np.prod(shape[2:])) >= 2
        assert int(np.prod(shape)) <= 6000 or shape[0] == 1

    each()
    assert PACKED.axes(4) == (0, 1, 2, 3)
