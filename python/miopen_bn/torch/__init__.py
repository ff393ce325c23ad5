"""miopen_bn for PyTorch: drop-in modules and autograd-aware operators.

    import miopen_bn.torch as mbt
    model = mbt.convert(torchvision.models.resnet50())   # BatchNorm2d -> mbt.BatchNorm2d
    block = torch.nn.Sequential(conv, mbt.GroupNorm(32, 320, activation="silu"))

Needs PyTorch (``pip install miopen-bn[torch]``).  ``torch.ops.miopen_bn``
holds the registered operators (batch_norm_train, batch_norm_infer,
batch_norm_backward, group_norm, group_norm_backward); ``batch_norm`` and
``group_norm`` are the functional forms.  CUDA tensors need a GPU build of
the library; CPU tensors run on its CPU backend.  ``SyncBatchNorm`` (with
its ``convert_sync_batchnorm``) is batch norm over a batch split across
processes (``torch.distributed``).
"""

from __future__ import annotations

try:
    import torch as _torch  # noqa: F401
except ImportError as exc:  # pragma: no cover - depends on the environment
    raise ImportError("miopen_bn.torch needs PyTorch: pip install 'miopen-bn[torch]'") from exc

from .modules import BatchNorm1d, BatchNorm2d, BatchNorm3d, GroupNorm, convert, load_layer
from .ops import batch_norm, group_norm
from .sync_batchnorm import SyncBatchNorm

__all__ = [
    "BatchNorm1d",
    "BatchNorm2d",
    "BatchNorm3d",
    "GroupNorm",
    "SyncBatchNorm",
    "batch_norm",
    "convert",
    "group_norm",
    "load_layer",
]
