"""The batch-norm directions the driver runs (``-F 1`` training, ``-F 2``
inference, ``-b 1`` backward), each one public ``miopen_bn`` call on the
data of ``BatchNormData`` and checked with ``miopen_bn.reference``.

MIOpenDriver's flags map as: ``-s`` the saved mean and inverse standard
deviation (written by training, read by backward; backward recomputes them
from x without it), ``-r`` the running statistics (updated by training, read
as estimates by inference; inference uses the batch's own statistics without
it), ``-A``/``-B`` blend y and dx with their prior content,
``--alpha-param``/``--beta-param`` blend dscale and dbias; ``-f``
(with ``-x``/``-y``/``--activ_gamma``) fuses an activation into every
direction, ``-I`` gives inference the inverse std instead of the variance,
``-Q`` makes training read the running statistics from other buffers than it
writes (V3).
"""

from __future__ import annotations

import numpy as np

from .. import reference
from ..batchnorm import batchnorm_backward, batchnorm_forward_inference, batchnorm_forward_training
from ..tolerances import ELEMENTWISE, REDUCTION
from .operation import Expected, LayerData, Operation

EXP_AVG_FACTOR = 0.1


class BatchNormData(LayerData):
    """x, scale and bias, shared by every direction of one run."""

    def __init__(self, options, factory, memory):
        super().__init__(options, factory, memory)
        self.mode = options.bn_mode
        # Parameters in the full broadcastable shape: (1, C, 1, 1) spatially,
        # (1, C, H, W) per activation; the sampled channels are on axis 1 like x's.
        self.param_shape = reference.param_shape(options.shape, self.mode)
        self.scale = factory.uniform(self.param_shape, 0.5, 1.5, self.param_dtype)
        self.bias = factory.uniform(self.param_shape, -0.5, 0.5, self.param_dtype)
        self.scale_device = self.on_device(self.scale)
        self.bias_device = self.on_device(self.bias)

    def poisoned_param(self) -> np.ndarray:
        return np.full(self.param_shape, np.nan, self.scale.dtype)

    def param_output(self, prior: bool) -> tuple:
        """(parameter-shaped output, its prior content or None): random prior
        when blended into, NaN otherwise."""
        if not prior:
            return self.poisoned_param(), None
        values = self.factory.uniform(self.param_shape, -1.0, 1.0, self.param_dtype)
        return values, values.copy()

    def y_output(self) -> tuple:
        """(y, its prior content or None, y where the backend writes it): a
        forward's output, blended into its prior when beta != 0."""
        y, prior = self.factory.output(self.x_dtype, prior=self.options.beta != 0)
        return y, prior, self.on_device(y)


def _optional(sample_cut, array):
    return None if array is None else sample_cut(array)


def _activation_args(options) -> dict:
    """The public functions' activation arguments for -f, or none."""
    if options.bn_activation is None:
        return {}
    code, params = options.bn_activation
    return {"activation": code, "activation_params": params}


def _fused(options):
    """The reference's fused_activation for -f, or None."""
    return None if options.bn_activation is None else (options.bn_activation[0],) + options.bn_activation[1]


class BnTraining(Operation):
    title = "Forward Training"
    key = "bn_train"

    def __init__(self, data: BatchNormData):
        self.data = data
        self.y, self.y_prior, self.y_device = data.y_output()
        self.running_before = None
        self.running_device = (None, None)
        if data.options.running:
            self.running_before = (
                data.factory.uniform(data.param_shape, -0.2, 0.2, data.param_dtype),
                data.factory.uniform(data.param_shape, 0.5, 1.5, data.param_dtype),
            )
            # Copies: the call updates them in place, the reference needs the old values.
            self.running_device = tuple(data.on_device(v.copy()) for v in self.running_before)
        self.next_device = (None, None)  # -Q: where the running statistics are written
        if data.options.ping_pong:
            self.next_device = tuple(data.on_device(data.poisoned_param()) for _ in range(2))
        self.saved = (data.poisoned_param(), data.poisoned_param()) if data.options.save else None
        self.saved_device = tuple(data.on_device(v) for v in self.saved or (None, None))

    def call(self, handle) -> None:
        o, d = self.data.options, self.data
        batchnorm_forward_training(
            d.x_device, d.scale_device, d.bias_device, mode=d.mode, epsilon=o.epsilon,
            exp_avg_factor=EXP_AVG_FACTOR, running_mean=self.running_device[0],
            running_var=self.running_device[1], save_stats=o.save, saved_mean=self.saved_device[0],
            saved_inv_std=self.saved_device[1], alpha=o.alpha, beta=o.beta, y=self.y_device, handle=handle,
            next_running_mean=self.next_device[0], next_running_var=self.next_device[1], **_activation_args(o),
        )

    def outputs(self) -> dict:
        out = {"y": self.y_device}
        if self.saved:
            out.update(saved_mean=self.saved_device[0], saved_inv_std=self.saved_device[1])
        if self.running_before:
            written = self.next_device if self.data.options.ping_pong else self.running_device
            out.update(running_mean=written[0], running_var=written[1])
        return out

    def expectations(self, sample) -> list:
        o, d, cut = self.data.options, self.data, sample.data
        before = self.running_before or (None, None)
        ref = reference.batchnorm_forward_training(
            cut(d.x), cut(d.scale), cut(d.bias), mode=d.mode, epsilon=o.epsilon, exp_avg_factor=EXP_AVG_FACTOR,
            running_mean=_optional(cut, before[0]), running_var=_optional(cut, before[1]),
            alpha=o.alpha, beta=o.beta, y_prior=_optional(cut, self.y_prior), fused_activation=_fused(o),
        )
        names = ["y"] + (["saved_mean", "saved_inv_std"] if self.saved else [])
        names += ["running_mean", "running_var"] if self.running_before else []
        return [Expected(n, ref[n], ELEMENTWISE if n == "y" else REDUCTION, cut) for n in names]

    def reads(self) -> list:
        return [self.data.x, self.data.scale, self.data.bias, self.y_prior, *(self.running_before or ())]

    def writes(self) -> list:
        return [self.y, *(self.saved or ()), *(self.running_before or ())]


class BnInference(Operation):
    title = "Forward Inference"
    key = "bn_infer"

    def __init__(self, data: BatchNormData):
        self.data = data
        self.y, self.y_prior, self.y_device = data.y_output()
        self.estimates = None
        if data.options.running:
            self.estimates = data.factory.near_channel_statistics(data.param_shape, data.param_dtype)
            if data.options.inverse_variance:  # -I: the inverse std in the variance's place
                mean, var = self.estimates
                inv_std = reference.inverse_std(var.astype(np.float64), data.options.epsilon)
                self.estimates = (mean, inv_std.astype(var.dtype))
        self.estimates_device = tuple(data.on_device(v) for v in self.estimates or (None, None))

    def call(self, handle) -> None:
        o, d = self.data.options, self.data
        batchnorm_forward_inference(
            d.x_device, d.scale_device, d.bias_device, *self.estimates_device, mode=d.mode,
            epsilon=o.epsilon, alpha=o.alpha, beta=o.beta, y=self.y_device, handle=handle,
            inverse_variance=o.inverse_variance, **_activation_args(o),
        )

    def outputs(self) -> dict:
        return {"y": self.y_device}

    def expectations(self, sample) -> list:
        o, d, cut = self.data.options, self.data, sample.data
        mean, var = self.estimates or (None, None)
        y = reference.batchnorm_forward_inference(
            cut(d.x), cut(d.scale), cut(d.bias), _optional(cut, mean), _optional(cut, var), mode=d.mode,
            epsilon=1e-5 if o.inverse_variance else o.epsilon, alpha=o.alpha, beta=o.beta,
            y_prior=_optional(cut, self.y_prior), fused_activation=_fused(o), var_is_inv_std=o.inverse_variance,
        )
        return [Expected("y", y, ELEMENTWISE, cut)]

    def reads(self) -> list:
        return [self.data.x, self.data.scale, self.data.bias, self.y_prior, *(self.estimates or ())]

    def writes(self) -> list:
        return [self.y]


class BnBackward(Operation):
    title = "Backward"
    key = "bn_bwd"

    def __init__(self, data: BatchNormData):
        options, factory = data.options, data.factory
        self.data = data
        self.dy = factory.gradient(options.grad_dtype)
        self.dx, self.dx_prior = factory.output(options.grad_dtype, prior=options.beta != 0)
        blended = options.beta_param != 0
        self.dscale, self.dscale_prior = data.param_output(blended)
        self.dbias, self.dbias_prior = data.param_output(blended)
        self.saved = None
        if options.save:
            # What a training forward would have saved: exact statistics, rounded
            # to the parameter type.
            mean, var = reference.batch_statistics(data.x, data.mode)
            inv_std = reference.inverse_std(var, options.epsilon)
            self.saved = (mean.astype(data.scale.dtype), inv_std.astype(data.scale.dtype))
        self.dy_device, self.dx_device, self.dscale_device, self.dbias_device = (
            data.on_device(v) for v in (self.dy, self.dx, self.dscale, self.dbias)
        )
        self.saved_device = tuple(data.on_device(v) for v in self.saved or (None, None))

    def call(self, handle) -> None:
        o, d = self.data.options, self.data
        batchnorm_backward(
            d.x_device, self.dy_device, d.scale_device, saved_mean=self.saved_device[0],
            saved_inv_std=self.saved_device[1], mode=d.mode, epsilon=o.epsilon, alpha_data=o.alpha,
            beta_data=o.beta, alpha_param=o.alpha_param, beta_param=o.beta_param, dx=self.dx_device,
            dscale=self.dscale_device, dbias=self.dbias_device, handle=handle,
            bias=d.bias_device if o.bn_activation else None, **_activation_args(o),
        )

    def outputs(self) -> dict:
        return {"dx": self.dx_device, "dscale": self.dscale_device, "dbias": self.dbias_device}

    def expectations(self, sample) -> list:
        o, d, cut = self.data.options, self.data, sample.data
        saved = self.saved or (None, None)
        ref = reference.batchnorm_backward(
            cut(d.x), cut(self.dy), cut(d.scale), saved_mean=_optional(cut, saved[0]),
            saved_inv_std=_optional(cut, saved[1]), mode=d.mode, epsilon=o.epsilon, alpha_data=o.alpha,
            beta_data=o.beta, alpha_param=o.alpha_param, beta_param=o.beta_param,
            dx_prior=_optional(cut, self.dx_prior), dscale_prior=_optional(cut, self.dscale_prior),
            dbias_prior=_optional(cut, self.dbias_prior), bias=cut(d.bias), fused_activation=_fused(o),
        )
        return [
            Expected("dx", ref["dx"], ELEMENTWISE, cut),
            Expected("dscale", ref["dscale"], REDUCTION, cut),
            Expected("dbias", ref["dbias"], REDUCTION, cut),
        ]

    def reads(self) -> list:
        priors = [self.dx_prior, self.dscale_prior, self.dbias_prior]
        bias = [self.data.bias] if self.data.options.bn_activation else []
        return [self.data.x, self.dy, self.data.scale, *bias, *(self.saved or ()), *priors]

    def writes(self) -> list:
        return [self.dx, self.dscale, self.dbias]


def batchnorm_operations(options, factory, memory) -> list:
    """The directions the command line asks for, in MIOpenDriver's order."""
    data = BatchNormData(options, factory, memory)
    operations = []
    if options.forward == 1:
        operations.append(BnTraining(data))
    elif options.forward == 2:
        operations.append(BnInference(data))
    if options.backward:
        operations.append(BnBackward(data))
    return operations
