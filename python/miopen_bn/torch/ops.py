"""Batch norm and group norm as torch operators, with autograd.

Two ways in, one set of kernels (``native``):

* ``torch.ops.miopen_bn.*``: custom operators registered with
  ``torch.library``, each with a fake (meta) implementation and an autograd
  formula, so ``torch.compile(fullgraph=True)`` traces through them and CUDA
  graphs capture them.  They are functional (torch.compile requires it of an
  operator with an autograd formula): ``batch_norm_train`` returns the
  updated running statistics instead of writing the caller's.
* ``batch_norm`` / ``group_norm`` below, what the modules call: under
  torch.compile they use the operators; in eager mode they call the library
  through a plain ``torch.autograd.Function`` (or directly when no gradient
  is needed), which costs a fraction of an operator's dispatch and updates
  the running statistics in place, as ``F.batch_norm`` does.
"""

from __future__ import annotations

from typing import Optional

import torch
from torch import Tensor

from . import native

_NAMESPACE = "miopen_bn"


# --------------------------------------------------------------------------- #
# Shared pieces
# --------------------------------------------------------------------------- #
def _param_dtype(x: Tensor, *params) -> torch.dtype:
    """The dtype the per-channel tensors share: the first one given's, else
    float32 (float64 for float64 x), as the library accepts."""
    for p in params:
        if p is not None:
            return p.dtype
    return torch.float64 if x.dtype == torch.float64 else torch.float32


def _ones(x: Tensor, dtype: torch.dtype) -> Tensor:
    return torch.ones(x.shape[1], dtype=dtype, device=x.device)


def _zeros(x: Tensor, dtype: torch.dtype) -> Tensor:
    return torch.zeros(x.shape[1], dtype=dtype, device=x.device)


def _affine(x: Tensor, weight, bias, *stats) -> tuple:
    """weight and bias as the library needs them: present (an affine=False
    batch norm is scale 1, bias 0)."""
    if weight is not None and bias is not None:
        return weight, bias
    dtype = _param_dtype(x, weight, bias, *stats)
    return (weight if weight is not None else _ones(x, dtype)), (bias if bias is not None else _zeros(x, dtype))


def _addressable(dy: Tensor) -> Tensor:
    """autograd hands broadcast gradients (stride 0) that no library describes."""
    return dy.contiguous() if 0 in dy.stride() else dy


def _reduced_dims(x: Tensor) -> list:
    return [0] + list(range(2, x.dim()))


def _eval_backward(x, dy, weight, mean, var, eps):
    """Gradients of inference with fixed statistics: elementwise, in torch."""
    shape = [1, -1] + [1] * (x.dim() - 2)
    invstd = torch.rsqrt(var + eps)
    scale = invstd if weight is None else invstd * weight
    dx = (dy * scale.view(shape).to(dy.dtype))
    dims = _reduced_dims(x)
    dy32 = dy.to(invstd.dtype)
    xhat = (x.to(invstd.dtype) - mean.view(shape)) * invstd.view(shape)
    return dx, (dy32 * xhat).sum(dims), dy32.sum(dims)


def _grad_or_none(tensor, needed: bool):
    return tensor if needed else None


# --------------------------------------------------------------------------- #
# Operators
# --------------------------------------------------------------------------- #
@torch.library.custom_op(f"{_NAMESPACE}::batch_norm_train", mutates_args=())
def batch_norm_train(
    x: Tensor,
    weight: Optional[Tensor],
    bias: Optional[Tensor],
    running_mean: Optional[Tensor],
    running_var: Optional[Tensor],
    momentum: float,
    eps: float,
) -> tuple[Tensor, Tensor, Tensor, Tensor, Tensor]:
    """Training forward: (y, saved mean, saved 1/sqrt(var+eps), new running
    mean, new running var); the running outputs are empty without running
    statistics."""
    w, b = _affine(x, weight, bias, running_mean)
    if running_mean is None:
        new_mean, new_var = x.new_empty(0, dtype=w.dtype), x.new_empty(0, dtype=w.dtype)
        y, saved_mean, saved_invstd = native.batch_norm_train(x, w, b, None, None, momentum, eps, joint=False)
    else:
        new_mean, new_var = running_mean.clone(), running_var.clone()
        y, saved_mean, saved_invstd = native.batch_norm_train(x, w, b, new_mean, new_var, momentum, eps,
                                                              joint=False)
    return y, saved_mean, saved_invstd, new_mean, new_var


@batch_norm_train.register_fake
def _(x, weight, bias, running_mean, running_var, momentum, eps):
    # Each saved statistic shares its running one's descriptor: its dtype (the weight's without one).
    saved_mean = x.new_empty(x.shape[1], dtype=_param_dtype(x, running_mean, weight, bias))
    saved_invstd = x.new_empty(x.shape[1], dtype=_param_dtype(x, running_var, weight, bias))
    if running_mean is None:
        running = x.new_empty(0, dtype=saved_mean.dtype)
        return torch.empty_like(x), saved_mean, saved_invstd, running, torch.empty_like(running)
    return torch.empty_like(x), saved_mean, saved_invstd, torch.empty_like(running_mean), torch.empty_like(running_var)


def _train_setup(ctx, inputs, output):
    x, weight, bias, _, _, _, eps = inputs
    ctx.eps = eps
    ctx.has_weight, ctx.has_bias = weight is not None, bias is not None
    ctx.save_for_backward(x, weight, output[1], output[2])
    ctx.mark_non_differentiable(*output[1:])


def _train_backward(ctx, dy, *_unused):
    x, weight, saved_mean, saved_invstd = ctx.saved_tensors
    w = weight if weight is not None else _ones(x, saved_mean.dtype)
    dx, dweight, dbias = torch.ops.miopen_bn.batch_norm_backward(
        x, _addressable(dy), w, saved_mean, saved_invstd, ctx.eps)
    return dx, _grad_or_none(dweight, ctx.has_weight), _grad_or_none(dbias, ctx.has_bias), None, None, None, None


batch_norm_train.register_autograd(_train_backward, setup_context=_train_setup)


@torch.library.custom_op(f"{_NAMESPACE}::batch_norm_infer", mutates_args=())
def batch_norm_infer(
    x: Tensor,
    weight: Optional[Tensor],
    bias: Optional[Tensor],
    running_mean: Tensor,
    running_var: Tensor,
    eps: float,
) -> Tensor:
    """Inference forward with the given statistics."""
    w, b = _affine(x, weight, bias, running_mean)
    return native.batch_norm_infer(x, w, b, running_mean, running_var, eps)


@batch_norm_infer.register_fake
def _(x, weight, bias, running_mean, running_var, eps):
    return torch.empty_like(x)


def _infer_setup(ctx, inputs, output):
    x, weight, bias, running_mean, running_var, eps = inputs
    ctx.eps = eps
    ctx.has_bias = bias is not None
    ctx.save_for_backward(x, weight, running_mean, running_var)


def _infer_backward(ctx, dy):
    x, weight, mean, var = ctx.saved_tensors
    dx, dweight, dbias = _eval_backward(x, dy, weight, mean, var, ctx.eps)
    return dx, _grad_or_none(dweight, weight is not None), _grad_or_none(dbias, ctx.has_bias), None, None, None


batch_norm_infer.register_autograd(_infer_backward, setup_context=_infer_setup)


@torch.library.custom_op(f"{_NAMESPACE}::batch_norm_backward", mutates_args=())
def batch_norm_backward(
    x: Tensor, dy: Tensor, weight: Tensor, saved_mean: Tensor, saved_invstd: Tensor, eps: float
) -> tuple[Tensor, Tensor, Tensor]:
    """(dx, dweight, dbias) from the training forward's saved statistics."""
    return native.batch_norm_backward(x, dy, weight, saved_mean, saved_invstd, eps, joint=False)


@batch_norm_backward.register_fake
def _(x, dy, weight, saved_mean, saved_invstd, eps):
    return torch.empty_like(x, dtype=dy.dtype), torch.empty_like(weight), torch.empty_like(weight)


@torch.library.custom_op(f"{_NAMESPACE}::group_norm", mutates_args=())
def group_norm_op(
    x: Tensor, num_groups: int, weight: Optional[Tensor], bias: Optional[Tensor], eps: float, silu: bool
) -> tuple[Tensor, Tensor, Tensor]:
    """Group norm forward, through SiLU when ``silu``: (y, mean, rstd), the
    statistics of shape (N, G)."""
    return native.group_norm_forward(x, num_groups, weight, bias, eps, silu, joint=False)


@group_norm_op.register_fake
def _(x, num_groups, weight, bias, eps, silu):
    stats_dtype = torch.float64 if x.dtype == torch.float64 else torch.float32
    mean = x.new_empty((x.shape[0], num_groups), dtype=stats_dtype)
    return torch.empty_like(x), mean, torch.empty_like(mean)


def _gn_setup(ctx, inputs, output):
    x, num_groups, weight, bias, _, silu = inputs
    ctx.num_groups, ctx.silu = num_groups, silu
    ctx.has_weight, ctx.has_bias = weight is not None, bias is not None
    ctx.save_for_backward(x, weight, bias, output[1], output[2])
    ctx.mark_non_differentiable(output[1], output[2])


def _gn_backward(ctx, dy, *_unused):
    x, weight, bias, mean, rstd = ctx.saved_tensors
    dx, dweight, dbias = torch.ops.miopen_bn.group_norm_backward(
        x, _addressable(dy), ctx.num_groups, weight, bias, mean, rstd, ctx.silu)
    return dx, None, _grad_or_none(dweight, ctx.has_weight), _grad_or_none(dbias, ctx.has_bias), None, None


group_norm_op.register_autograd(_gn_backward, setup_context=_gn_setup)


@torch.library.custom_op(f"{_NAMESPACE}::group_norm_backward", mutates_args=())
def group_norm_backward(
    x: Tensor,
    dy: Tensor,
    num_groups: int,
    weight: Optional[Tensor],
    bias: Optional[Tensor],
    mean: Tensor,
    rstd: Tensor,
    silu: bool,
) -> tuple[Tensor, Tensor, Tensor]:
    """(dx, dweight, dbias); without weight the last two are empty."""
    dx, dweight, dbias = native.group_norm_backward(x, dy, num_groups, weight, bias, mean, rstd, silu, joint=False)
    if dweight is None:
        dweight, dbias = x.new_empty(0), x.new_empty(0)
    return dx, dweight, dbias


@group_norm_backward.register_fake
def _(x, dy, num_groups, weight, bias, mean, rstd, silu):
    if weight is None:
        return torch.empty_like(x), x.new_empty(0), x.new_empty(0)
    return torch.empty_like(x), torch.empty_like(weight), torch.empty_like(weight)


# --------------------------------------------------------------------------- #
# The eager path
# --------------------------------------------------------------------------- #
class _BatchNormTrain(torch.autograd.Function):
    """Training forward and backward on the library; weight and bias are
    always tensors here (ones and zeros without affine, which need no
    gradient: needs_input_grad says so)."""

    @staticmethod
    def forward(ctx, x, weight, bias, running_mean, running_var, factor, eps):
        y, saved_mean, saved_invstd = native.batch_norm_train(x, weight, bias, running_mean, running_var,
                                                              factor, eps)
        ctx.eps = eps
        ctx.save_for_backward(x, weight, saved_mean, saved_invstd)
        return y

    @staticmethod
    def backward(ctx, dy):
        x, weight, saved_mean, saved_invstd = ctx.saved_tensors
        dx, dweight, dbias = native.batch_norm_backward(x, _addressable(dy), weight, saved_mean, saved_invstd,
                                                        ctx.eps)
        needs = ctx.needs_input_grad
        return dx, dweight if needs[1] else None, dbias if needs[2] else None, None, None, None, None


class _GroupNorm(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, num_groups, weight, bias, eps, silu):
        y, mean, rstd = native.group_norm_forward(x, num_groups, weight, bias, eps, silu)
        ctx.num_groups, ctx.silu = num_groups, silu
        ctx.save_for_backward(x, weight, bias, mean, rstd)
        return y

    @staticmethod
    def backward(ctx, dy):
        x, weight, bias, mean, rstd = ctx.saved_tensors
        dx, dweight, dbias = native.group_norm_backward(x, _addressable(dy), ctx.num_groups, weight, bias,
                                                        mean, rstd, ctx.silu)
        return dx, None, dweight, dbias, None, None


# Function.apply's Python preamble costs more than the rest of a small
# forward: with no functorch transform active it only unwraps tensors left
# by finished transforms and calls the C apply, which the eager path does
# itself (under a transform it takes Function.apply).
_transforms_active = torch._C._are_functorch_transforms_active
_unwrap = getattr(torch._C._functorch, "unwrap_if_dead", None)
_train_apply = super(torch.autograd.Function, _BatchNormTrain).apply
_group_norm_apply = super(torch.autograd.Function, _GroupNorm).apply


def _direct_apply() -> bool:
    return _unwrap is not None and not _transforms_active()


def _unwrapped(t):
    return t if t is None else _unwrap(t)


_compiling = torch.compiler.is_compiling


def batch_norm(
    x: Tensor,
    running_mean: Optional[Tensor],
    running_var: Optional[Tensor],
    weight: Optional[Tensor] = None,
    bias: Optional[Tensor] = None,
    training: bool = False,
    momentum: float = 0.1,
    eps: float = 1e-5,
) -> Tensor:
    """``torch.nn.functional.batch_norm``'s arguments and meaning, on the
    library: training normalizes with the batch's statistics and updates the
    running ones in place (when given); otherwise the running ones are used."""
    if _compiling():
        if training:
            y, _, _, new_mean, new_var = torch.ops.miopen_bn.batch_norm_train(
                x, weight, bias, running_mean, running_var, momentum, eps)
            if running_mean is not None:
                running_mean.copy_(new_mean.detach())
                running_var.copy_(new_var.detach())
            return y
        return torch.ops.miopen_bn.batch_norm_infer(x, weight, bias, running_mean, running_var, eps)
    w, b = (weight, bias) if weight is not None and bias is not None else _affine(x, weight, bias, running_mean)
    grad = torch.is_grad_enabled() and (x.requires_grad or w.requires_grad or b.requires_grad)
    if not training:
        if grad:
            return torch.ops.miopen_bn.batch_norm_infer(x, weight, bias, running_mean, running_var, eps)
        return native.batch_norm_infer(x, w, b, running_mean, running_var, eps)
    if not grad:
        return native.batch_norm_train(x, w, b, running_mean, running_var, momentum, eps, save=False)[0]
    if _direct_apply():
        return _train_apply(_unwrap(x), _unwrap(w), _unwrap(b), _unwrapped(running_mean), _unwrapped(running_var),
                            momentum, eps)
    return _BatchNormTrain.apply(x, w, b, running_mean, running_var, momentum, eps)


def group_norm(
    x: Tensor,
    num_groups: int,
    weight: Optional[Tensor] = None,
    bias: Optional[Tensor] = None,
    eps: float = 1e-5,
    activation: Optional[str] = None,
) -> Tensor:
    """``torch.nn.functional.group_norm`` on the library; ``activation="silu"``
    applies SiLU in the same pass (``F.silu(F.group_norm(...))``)."""
    if activation not in (None, "silu"):
        raise ValueError(f"activation must be None or 'silu', got {activation!r}")
    silu = activation == "silu"
    if weight is None and bias is not None:  # torch's: a bias alone is added to the normalized x
        weight = torch.ones_like(bias)
    if x.is_cuda and torch.is_autocast_enabled("cuda"):
        # CUDA autocast runs torch's group_norm in float32; so do we.
        x = x.float()
        weight = None if weight is None else weight.float()
        bias = None if bias is None else bias.float()
    if _compiling():
        return torch.ops.miopen_bn.group_norm(x, num_groups, weight, bias, eps, silu)[0]
    if not (torch.is_grad_enabled() and (x.requires_grad or (weight is not None and weight.requires_grad)
                                         or (bias is not None and bias.requires_grad))):
        return native.group_norm_forward(x, num_groups, weight, bias, eps, silu, stats=False)[0]
    if _direct_apply():
        return _group_norm_apply(_unwrap(x), num_groups, _unwrapped(weight), _unwrapped(bias), eps, silu)
    return _GroupNorm.apply(x, num_groups, weight, bias, eps, silu)
