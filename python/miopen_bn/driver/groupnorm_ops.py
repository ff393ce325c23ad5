"""The group-norm directions the driver runs (``-F 1`` forward, ``-b 1``
backward) through ``miopen_bn.groupnorm_forward`` / ``groupnorm_backward``,
checked with the float64 ``miopen_bn.reference`` functions of the same names.

``-m 0`` normalizes without weight and bias (MIOpen's rule: any other mode
applies them); ``--activation swish`` fuses y / (1 + exp(-beta * y)), whose
backward also needs the bias.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

import miopen_bn

from .. import dtypes, reference
from ..tolerances import ELEMENTWISE, REDUCTION
from .memory import DriverError
from .operation import Expected, LayerData, Operation


def _api(name: str):
    """The group-norm entry point, looked up at call time: it is not part of
    every miopen_bn."""
    function = getattr(miopen_bn, name, None)
    if function is None or not hasattr(reference, name):
        raise DriverError(f"this miopen_bn has no {name} (group norm's Python API is not installed)")
    return function


def _unpack(result, names: tuple) -> tuple:
    """The reference's results in the API's order, from a dict (as the batch-norm
    reference returns) or a tuple."""
    return tuple(result[name] for name in names) if isinstance(result, Mapping) else tuple(result)


class GroupNormData(LayerData):
    """x, weight and bias, shared by both directions of one run."""

    def __init__(self, options, factory, memory):
        super().__init__(options, factory, memory)
        self.groups = options.groups
        self.affine = options.mode != 0
        channels = options.shape[1]
        self.weight = factory.uniform((channels,), 0.5, 1.5, self.param_dtype) if self.affine else None
        self.bias = factory.uniform((channels,), -0.5, 0.5, self.param_dtype) if self.affine else None
        # Mean and rstd are float32, float64 for float64 x.
        self.stats_dtype = dtypes.FLOAT64 if self.x_dtype == dtypes.FLOAT64 else dtypes.FLOAT32
        self.weight_device = self.on_device(self.weight)
        self.bias_device = self.on_device(self.bias)

    @property
    def activation_kwargs(self) -> dict:
        return {"activation": self.options.activation, "swish_beta": self.options.activation_beta}

    def sampled_params(self, sample) -> tuple:
        cut = sample.vector
        return (None, None) if not self.affine else (cut(self.weight), cut(self.bias))

    def statistics_shape(self) -> tuple:
        return (self.options.shape[0], self.groups)


class GnForward(Operation):
    title = "Group Norm Forward"
    key = "gn_fwd"

    def __init__(self, data: GroupNormData):
        self.data = data
        self.y = data.factory.poisoned(data.x_dtype)
        self.y_device = data.on_device(self.y)
        stats_type = dtypes.NUMPY_DTYPE[data.stats_dtype]
        self.mean, self.rstd = (np.full(data.statistics_shape(), np.nan, stats_type) for _ in range(2))
        self.mean_device, self.rstd_device = data.on_device(self.mean), data.on_device(self.rstd)

    def call(self, handle) -> None:
        d = self.data
        _api("groupnorm_forward")(
            d.x_device, d.groups, d.weight_device, d.bias_device, epsilon=d.options.epsilon, y=self.y_device,
            mean=self.mean_device, rstd=self.rstd_device, handle=handle, **d.activation_kwargs,
        )

    def outputs(self) -> dict:
        return {"y": self.y_device, "mean": self.mean_device, "rstd": self.rstd_device}

    def expectations(self, sample) -> list:
        d = self.data
        weight, bias = d.sampled_params(sample)
        y, mean, rstd = _unpack(
            reference.groupnorm_forward(
                sample.data(d.x), len(sample.groups), weight, bias, epsilon=d.options.epsilon,
                **d.activation_kwargs,
            ),
            ("y", "mean", "rstd"),
        )
        return [
            Expected("y", y, ELEMENTWISE, sample.data),
            Expected("mean", mean, REDUCTION, sample.per_group),
            Expected("rstd", rstd, REDUCTION, sample.per_group),
        ]

    def reads(self) -> list:
        return [self.data.x, self.data.weight, self.data.bias]

    def writes(self) -> list:
        return [self.y, self.mean, self.rstd]


class GnBackward(Operation):
    title = "Group Norm Backward"
    key = "gn_bwd"

    def __init__(self, data: GroupNormData):
        factory = data.factory
        self.data = data
        self.dy = factory.gradient(data.x_dtype)
        self.dx = factory.poisoned(data.x_dtype)
        channels = data.options.shape[1]
        self.dweight = np.full(channels, np.nan, data.weight.dtype) if data.affine else None
        self.dbias = np.full(channels, np.nan, data.weight.dtype) if data.affine else None
        # What a forward would have saved: exact statistics, rounded to their type.
        _, mean, rstd = _unpack(
            reference.groupnorm_forward(data.x, data.groups, data.weight, data.bias, epsilon=data.options.epsilon),
            ("y", "mean", "rstd"),
        )
        stats_type = dtypes.NUMPY_DTYPE[data.stats_dtype]
        self.mean = np.asarray(mean).reshape(data.statistics_shape()).astype(stats_type)
        self.rstd = np.asarray(rstd).reshape(data.statistics_shape()).astype(stats_type)
        self.dy_device, self.dx_device, self.dweight_device, self.dbias_device = (
            data.on_device(v) for v in (self.dy, self.dx, self.dweight, self.dbias)
        )
        self.mean_device, self.rstd_device = data.on_device(self.mean), data.on_device(self.rstd)

    @property
    def uses_bias(self) -> bool:
        return self.data.affine and self.data.options.activation is not None

    def call(self, handle) -> None:
        d = self.data
        _api("groupnorm_backward")(
            d.x_device, self.dy_device, d.groups, d.weight_device, self.mean_device, self.rstd_device,
            bias=d.bias_device if self.uses_bias else None, dx=self.dx_device, dweight=self.dweight_device,
            dbias=self.dbias_device, handle=handle, **d.activation_kwargs,
        )

    def outputs(self) -> dict:
        out = {"dx": self.dx_device}
        if self.data.affine:
            out.update(dweight=self.dweight_device, dbias=self.dbias_device)
        return out

    def expectations(self, sample) -> list:
        d = self.data
        weight, bias = d.sampled_params(sample)
        dx, dweight, dbias = _unpack(
            reference.groupnorm_backward(
                sample.data(d.x), sample.data(self.dy), len(sample.groups), weight, sample.per_group(self.mean),
                sample.per_group(self.rstd), bias=bias if self.uses_bias else None, **d.activation_kwargs,
            ),
            ("dx", "dweight", "dbias"),
        )
        expected = [Expected("dx", dx, ELEMENTWISE, sample.data)]
        if d.affine:
            expected += [Expected("dweight", dweight, REDUCTION, sample.vector),
                         Expected("dbias", dbias, REDUCTION, sample.vector)]
        return expected

    def reads(self) -> list:
        bias = self.data.bias if self.uses_bias else None
        return [self.data.x, self.dy, self.data.weight, bias, self.mean, self.rstd]

    def writes(self) -> list:
        return [self.dx, self.dweight, self.dbias]


def groupnorm_operations(options, factory, memory) -> list:
    for name in ("groupnorm_forward",) + (("groupnorm_backward",) if options.backward else ()):
        _api(name)  # before any data is made: a clear error if group norm is missing
    data = GroupNormData(options, factory, memory)
    operations = [GnForward(data)] if options.forward else []
    if options.backward:
        operations.append(GnBackward(data))
    return operations
