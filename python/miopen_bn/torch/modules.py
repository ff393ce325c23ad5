"""Drop-in replacements for torch.nn's batch-norm and group-norm modules.

Each subclasses its torch.nn counterpart, so constructor arguments,
parameters, buffers, ``state_dict`` keys, ``extra_repr``, ``isinstance``
checks and ``load_state_dict`` are torch's own; only ``forward`` runs on the
library.  ``convert(model)`` swaps torch's modules for these in place.
"""

from __future__ import annotations

from typing import Optional

import numpy as np
import torch
from torch import Tensor, nn

from .ops import batch_norm, group_norm


class _BatchNormForward:
    """torch's _BatchNorm.forward, with the library doing the normalization."""

    def forward(self, input: Tensor) -> Tensor:
        self._check_input_dim(input)
        factor = 0.0 if self.momentum is None else self.momentum
        if self.training and self.track_running_stats and self.num_batches_tracked is not None:
            self.num_batches_tracked.add_(1)
            # momentum None: the cumulative moving average, as torch does it
            factor = 1.0 / float(self.num_batches_tracked) if self.momentum is None else self.momentum
        use_batch_stats = self.training or (self.running_mean is None and self.running_var is None)
        keep_running = not self.training or self.track_running_stats
        return batch_norm(
            input,
            self.running_mean if keep_running else None,
            self.running_var if keep_running else None,
            self.weight,
            self.bias,
            use_batch_stats,
            factor,
            self.eps,
        )


class BatchNorm1d(_BatchNormForward, nn.BatchNorm1d):
    """``torch.nn.BatchNorm1d`` on the library: (N, C) or (N, C, L)."""


class BatchNorm2d(_BatchNormForward, nn.BatchNorm2d):
    """``torch.nn.BatchNorm2d`` on the library: (N, C, H, W), any memory format."""


class BatchNorm3d(_BatchNormForward, nn.BatchNorm3d):
    """``torch.nn.BatchNorm3d`` on the library: (N, C, D, H, W), any memory format."""


class GroupNorm(nn.GroupNorm):
    """``torch.nn.GroupNorm`` on the library; ``activation="silu"`` fuses the
    SiLU that usually follows it (Stable Diffusion's GroupNorm + SiLU)."""

    def __init__(self, num_groups: int, num_channels: int, eps: float = 1e-5, affine: bool = True,
                 device=None, dtype=None, *, activation: Optional[str] = None, **kwargs):
        if activation not in (None, "silu"):
            raise ValueError(f"activation must be None or 'silu', got {activation!r}")
        super().__init__(num_groups, num_channels, eps, affine, device, dtype, **kwargs)
        self.activation = activation

    def forward(self, input: Tensor) -> Tensor:
        return group_norm(input, self.num_groups, self.weight, self.bias, self.eps, self.activation)

    def extra_repr(self) -> str:
        text = super().extra_repr()
        return text if self.activation is None else f"{text}, activation={self.activation!r}"


_REPLACEMENTS = {
    nn.BatchNorm1d: BatchNorm1d,
    nn.BatchNorm2d: BatchNorm2d,
    nn.BatchNorm3d: BatchNorm3d,
    nn.GroupNorm: GroupNorm,
}


def _swapped(module: nn.Module) -> Optional[nn.Module]:
    """The library's module taking ``module``'s place (sharing its
    parameters and buffers), or None when there is none for its type."""
    replacement = _REPLACEMENTS.get(type(module))
    if replacement is None:
        return None
    new = replacement.__new__(replacement)
    new.__dict__.update(module.__dict__)  # parameters, buffers, hooks, training flag: the same objects
    if replacement is GroupNorm:
        new.activation = None
    return new


def convert(model: nn.Module) -> nn.Module:
    """Replaces every torch.nn BatchNorm1d/2d/3d and GroupNorm in ``model``
    (itself included) by the library's, keeping their parameters and buffers
    (the same tensors: optimizers holding them keep working).  Subclasses of
    those modules are left alone, as their forward may differ.  Returns the
    model, or its replacement when ``model`` itself is one of them."""
    top = _swapped(model)
    if top is not None:
        return top
    for parent in model.modules():
        for name, child in list(parent.named_children()):
            new = _swapped(child)
            if new is not None:
                setattr(parent, name, new)
    return model


def load_layer(path, device=None) -> nn.Module:
    """The torch module of a ``miopen_bn.BatchNorm`` file (``layer.save``):
    BatchNorm1d, 2d or 3d by its layout, with its parameters and statistics."""
    from .. import layer, safetensors_io

    tensors, metadata = safetensors_io.load(path)
    config = layer.config_of(path, metadata)
    if config.get("mode") != "spatial":
        raise ValueError(f"{path}: a {config.get('mode')} batch norm has no torch.nn module (torch's are spatial)")
    cls = {"NC": BatchNorm1d, "NCW": BatchNorm1d, "NWC": BatchNorm1d, "NCDHW": BatchNorm3d,
           "NDHWC": BatchNorm3d}.get(config.get("layout"), BatchNorm2d)
    dtype = getattr(torch, config.get("param_dtype", "float32"))
    module = cls(config["num_features"], eps=config["epsilon"], momentum=config["momentum"], device=device,
                 dtype=dtype)
    wide = np.float64 if dtype == torch.float64 else np.float32  # NumPy's bfloat16 is no torch dtype: go through it
    state = {name: torch.from_numpy(tensors[name].astype(wide)).to(dtype)
             for name in ("weight", "bias", "running_mean", "running_var")}
    state["num_batches_tracked"] = torch.tensor(int(tensors["num_batches_tracked"]))
    module.load_state_dict(state)
    return module


__all__ = ["BatchNorm1d", "BatchNorm2d", "BatchNorm3d", "GroupNorm", "convert", "load_layer"]
