"""``SyncBatchNorm``: batch norm over a batch split across processes, its
statistics exchanged with ``torch.distributed`` (NCCL on GPUs, gloo on the
CPU; any initialized backend) and computed by the library's split-phase ops
(``miopen_bn.distributed``).

Per training step, each rank computes its partial statistics (count, mean,
M2 per channel), all-gathers them, merges them into the whole batch's mean
and inverse std (updating the running statistics with the variance unbiased
over the global count), and normalizes its own part; backward all-reduces
the per-channel sums of dy and dy*(x - mean) and computes dx from them.
Ranks may hold different batch sizes, including one sample or none.  The
weight and bias gradients are this rank's share, which DDP's gradient
all-reduce then combines as it does for every parameter.

Like ``torch.nn.SyncBatchNorm``: the same arguments, ``process_group``,
``convert_sync_batchnorm``; inputs (N, C, ...) with 2 to 5 dimensions in any
layout (channels_last stays channels_last); float16, bfloat16, float32 and
float64.  Evaluation, and training outside an initialized process group,
need no exchange (the latter runs the same ops on one rank).
"""

from __future__ import annotations

import threading
from typing import Optional

import torch
import torch.distributed as dist
from torch.nn.modules.batchnorm import _BatchNorm

from .. import distributed as split
from ..handle import Handle, default_handle
from .native import current_stream

_per_thread = threading.local()


def _handle_for(x: torch.Tensor) -> Handle:
    """A CPU handle for host tensors; for device tensors, a GPU handle on
    torch's current stream (one per stream, kept per thread)."""
    if not x.is_cuda:
        return default_handle("cpu")
    device = x.get_device()
    stream = current_stream(device)
    handles = getattr(_per_thread, "gpu_handles", None)
    if handles is None:
        handles = _per_thread.gpu_handles = {}
    key = (device, stream)
    handle = handles.get(key)
    if handle is None or handle.closed:
        handle = handles[key] = Handle("gpu", stream=stream)
    return handle


def _through_host(group) -> bool:
    """gloo's collectives take CUDA tensors only partly: go through the host."""
    return dist.get_backend(group) == "gloo"


def _all_gather(tensor: torch.Tensor, group, world_size: int) -> torch.Tensor:
    """Every rank's ``tensor`` stacked along a new first axis."""
    source = tensor.cpu() if tensor.is_cuda and _through_host(group) else tensor
    parts = [torch.empty_like(source) for _ in range(world_size)]
    dist.all_gather(parts, source, group=group)
    return torch.stack(parts).to(tensor.device)


def _all_reduce(tensor: torch.Tensor, group) -> None:
    if tensor.is_cuda and _through_host(group):
        host = tensor.cpu()
        dist.all_reduce(host, group=group)
        tensor.copy_(host)
    else:
        dist.all_reduce(tensor, group=group)


def _param_dtype(x: torch.Tensor) -> torch.dtype:
    """Parameters and saved statistics: float64 for float64 x, else float32."""
    return torch.float64 if x.dtype == torch.float64 else torch.float32


class _SyncBatchNormFunction(torch.autograd.Function):
    """Training forward and backward of synchronized batch norm (spatial)."""

    @staticmethod
    def forward(ctx, x, weight, bias, running_mean, running_var, eps, factor, group, world_size):
        handle = _handle_for(x)
        channels = x.shape[1]
        p_dtype = _param_dtype(x)
        xd = x.detach()
        w = (weight.detach() if weight is not None else x.new_ones(channels)).to(p_dtype)
        b = (bias.detach() if bias is not None else x.new_zeros(channels)).to(p_dtype)

        # This rank's partials as three rows of one buffer: one all-gather.
        local = torch.zeros((3, channels), dtype=torch.float64, device=x.device)
        if x.numel() > 0:
            split.batchnorm_local_statistics(xd, count=local[0], mean=local[1], m2=local[2], handle=handle)
        gathered = _all_gather(local, group, world_size) if world_size > 1 else local.unsqueeze(0)
        mean = torch.empty(channels, dtype=p_dtype, device=x.device)
        inv_std = torch.empty_like(mean)
        running = {}
        if running_mean is not None:
            running = {"running_mean": running_mean, "running_var": running_var}
        split.batchnorm_merge_statistics(
            gathered[:, 0], gathered[:, 1], gathered[:, 2], epsilon=eps, exp_avg_factor=factor,
            saved_mean=mean, saved_inv_std=inv_std, handle=handle, **running,
        )
        count = gathered[:, 0].sum(0)  # the global count per channel, for backward

        y = torch.empty_like(x)  # x's memory format
        if x.numel() > 0:
            split.batchnorm_forward_normalize(xd, w, b, mean, inv_std, y=y, handle=handle)
        ctx.save_for_backward(xd, w, mean, inv_std, count)
        ctx.group, ctx.world_size = group, world_size
        ctx.weight_dtypes = (None if weight is None else weight.dtype, None if bias is None else bias.dtype)
        return y

    @staticmethod
    def backward(ctx, dy):
        x, w, mean, inv_std, count = ctx.saved_tensors
        needs_dx, needs_dw, needs_db = ctx.needs_input_grad[:3]
        handle = _handle_for(x)
        dy = dy.detach()
        if dy.dtype != x.dtype:
            dy = dy.to(x.dtype)
        sums = torch.zeros((2, x.shape[1]), dtype=torch.float64, device=x.device)
        dscale = dbias = None
        param_grads = needs_dw or needs_db
        if param_grads:
            dscale, dbias = torch.zeros_like(mean), torch.zeros_like(mean)
        if x.numel() > 0:
            split.batchnorm_backward_reduce(
                x, dy, mean, inv_std, sum_dy=sums[0], sum_dy_xmu=sums[1], param_grads=param_grads,
                dscale=dscale, dbias=dbias, handle=handle,
            )
        dx = None
        if needs_dx:
            if ctx.world_size > 1:
                _all_reduce(sums, ctx.group)
            dx = torch.empty_like(x)
            if x.numel() > 0:
                split.batchnorm_backward_elementwise(
                    x, dy, w, mean, inv_std, sums[0], sums[1], count, dx=dx, handle=handle
                )
        weight_dtype, bias_dtype = ctx.weight_dtypes
        dweight = dscale.to(weight_dtype) if needs_dw else None
        dbias_out = dbias.to(bias_dtype) if needs_db else None
        return dx, dweight, dbias_out, None, None, None, None, None, None


class SyncBatchNorm(_BatchNorm):
    """``torch.nn.SyncBatchNorm`` on the library's split-phase ops.

    Arguments as torch.nn's: ``num_features`` (C), ``eps``, ``momentum``
    (None: a cumulative average), ``affine``, ``track_running_stats``,
    ``process_group`` (None: the whole world), ``device``, ``dtype``."""

    def __init__(
        self,
        num_features: int,
        eps: float = 1e-5,
        momentum: Optional[float] = 0.1,
        affine: bool = True,
        track_running_stats: bool = True,
        process_group=None,
        device=None,
        dtype=None,
    ):
        super().__init__(num_features, eps, momentum, affine, track_running_stats, device=device, dtype=dtype)
        self.process_group = process_group

    def _check_input_dim(self, input: torch.Tensor) -> None:
        if not 2 <= input.dim() <= 5:
            raise ValueError(f"expected 2D to 5D input (N, C, ...), got {input.dim()}D input")

    def forward(self, input: torch.Tensor) -> torch.Tensor:
        self._check_input_dim(input)
        if input.shape[1] != self.num_features:
            raise ValueError(f"expected {self.num_features} channels, got input of shape {tuple(input.shape)}")
        factor = 0.0 if self.momentum is None else self.momentum
        if self.training and self.track_running_stats and self.num_batches_tracked is not None:
            self.num_batches_tracked.add_(1)
            factor = 1.0 / float(self.num_batches_tracked) if self.momentum is None else self.momentum
        batch_stats = self.training or (self.running_mean is None and self.running_var is None)
        if not batch_stats:
            return torch.nn.functional.batch_norm(
                input, self.running_mean, self.running_var, self.weight, self.bias, False, 0.0, self.eps
            )
        group, world_size = None, 1
        if self.training and dist.is_available() and dist.is_initialized():
            group = self.process_group or dist.group.WORLD
            world_size = dist.get_world_size(group)
        track = self.training and self.track_running_stats and self.running_mean is not None
        return _SyncBatchNormFunction.apply(
            input, self.weight, self.bias, self.running_mean if track else None,
            self.running_var if track else None, self.eps, factor, group, world_size,
        )

    @classmethod
    def convert_sync_batchnorm(cls, module: torch.nn.Module, process_group=None) -> torch.nn.Module:
        """``module`` with every batch-norm layer (torch.nn's BatchNorm*d and
        SyncBatchNorm) replaced by this SyncBatchNorm holding the same
        parameters, buffers and mode; other modules are kept."""
        converted = module
        if isinstance(module, _BatchNorm) and not isinstance(module, cls):
            converted = cls(module.num_features, module.eps, module.momentum, module.affine,
                            module.track_running_stats, process_group)
            if module.affine:
                with torch.no_grad():
                    converted.weight = module.weight
                    converted.bias = module.bias
            converted.running_mean = module.running_mean
            converted.running_var = module.running_var
            converted.num_batches_tracked = module.num_batches_tracked
            converted.training = module.training
            if hasattr(module, "qconfig"):
                converted.qconfig = module.qconfig
        for name, child in module.named_children():
            converted.add_module(name, cls.convert_sync_batchnorm(child, process_group))
        return converted
