"""``BatchNorm``: a batch-norm layer that owns its parameters and statistics.

Framework-neutral: on the CPU its tensors are NumPy arrays; on the GPU
(``device="gpu"``) torch CUDA tensors, and it takes any device arrays the
functions of ``miopen_bn.batchnorm`` take.  ``info()`` describes it as JSON;
``save(path)`` / ``BatchNorm.load(path)`` round-trip it through a
safetensors file whose tensor names are torch.nn.BatchNorm's state_dict keys
(``weight``, ``bias``, ``running_mean``, ``running_var``,
``num_batches_tracked``, plus ``saved_mean`` / ``saved_inv_std`` once a
training forward ran), so ``miopen_bn.torch.load_layer`` reads it as a module.
Files that name the inverse std ``saved_inv_var`` (written before it was
renamed) load too.
"""

from __future__ import annotations

import json
from typing import Optional, Sequence

import numpy as np

from . import dtypes, renamed, safetensors_io
from .batchnorm import batchnorm_backward, batchnorm_forward_inference, batchnorm_forward_training
from .library import header_version

FORMAT = "miopen_bn.BatchNorm"
_MODES = ("spatial", "per_activation")
_LAYOUTS = ("NCHW", "NHWC", "NCDHW", "NDHWC", "NC", "NCW", "NWC")
_TENSORS = ("weight", "bias", "running_mean", "running_var")


class BatchNorm:
    """Batch norm over ``num_features`` channels.

    ``mode`` "spatial" keeps one statistic per channel (parameters of shape
    (C,)); "per_activation" one per (channel, position), which needs
    ``feature_shape`` (the trailing lengths D, H, W of x).  ``dtype`` is the
    data's (x, y) and ``param_dtype`` the parameters' and statistics'
    (float32 or the data's); ``layout`` records the data layout the layer is
    used with (any strided array is accepted).  Names follow torch.nn's:
    ``weight`` is batch norm's scale and ``momentum`` its exp_avg_factor
    (docs/conventions.md#names); ``momentum`` None keeps the cumulative
    average of every batch, as torch.nn.BatchNorm does.
    """

    def __init__(self, num_features: int, *, mode: str = "spatial", feature_shape: Sequence[int] = (),
                 epsilon: float = 1e-5, momentum: Optional[float] = 0.1, dtype="float32",
                 param_dtype="float32", layout: str = "NCHW", device: str = "cpu", handle=None):
        if mode not in _MODES:
            raise ValueError(f"mode must be 'spatial' or 'per_activation', got {mode!r}")
        if layout not in _LAYOUTS:
            raise ValueError(f"layout must be one of {', '.join(_LAYOUTS)}, got {layout!r}")
        if device not in ("cpu", "gpu"):
            raise ValueError(f"device must be 'cpu' or 'gpu', got {device!r}")
        self.num_features = int(num_features)
        self.mode = mode
        self.feature_shape = tuple(int(n) for n in feature_shape) if mode == "per_activation" else ()
        self.epsilon = float(epsilon)
        self.momentum = None if momentum is None else float(momentum)
        self.dtype = dtypes.name_of(dtype)
        self.param_dtype = dtypes.name_of(param_dtype)
        self.layout = layout
        self.device = device
        self.handle = handle
        shape = self.param_shape
        self.weight = self._full(shape, 1.0)
        self.bias = self._full(shape, 0.0)
        self.running_mean = self._full(shape, 0.0)
        self.running_var = self._full(shape, 1.0)
        self.num_batches_tracked = 0
        self.saved_mean = self.saved_inv_std = None  # the last training forward's
        self.grad_weight = self.grad_bias = None  # the last backward's

    # -- configuration -------------------------------------------------------
    @property
    def param_shape(self) -> tuple:
        return (self.num_features,) + self.feature_shape

    def config(self) -> dict:
        return {"num_features": self.num_features, "mode": self.mode, "feature_shape": list(self.feature_shape),
                "epsilon": self.epsilon, "momentum": self.momentum, "dtype": self.dtype,
                "param_dtype": self.param_dtype, "layout": self.layout, "device": self.device}

    def _full(self, shape: tuple, value: float):
        if self.device == "cpu":
            return np.full(shape, value, dtype=dtypes.NUMPY_DTYPE[self.param_dtype])
        import torch

        return torch.full(shape, value, dtype=getattr(torch, self.param_dtype), device="cuda")

    def _to_host(self, array) -> np.ndarray:
        if isinstance(array, np.ndarray):
            return array
        return array.float().cpu().numpy().astype(dtypes.NUMPY_DTYPE[self.param_dtype])

    def _from_host(self, array: np.ndarray):
        array = np.ascontiguousarray(array, dtype=dtypes.NUMPY_DTYPE[self.param_dtype])
        if self.device == "cpu":
            return array
        import torch

        return torch.from_numpy(array.astype(np.float32)).to(getattr(torch, self.param_dtype)).cuda()

    # -- computation ---------------------------------------------------------
    def forward_training(self, x):
        """y from the batch's statistics; updates the running statistics and
        keeps the saved mean and inverse std for ``backward``."""
        self.num_batches_tracked += 1
        factor = 1.0 / self.num_batches_tracked if self.momentum is None else self.momentum
        y, self.saved_mean, self.saved_inv_std = batchnorm_forward_training(
            x, self.weight, self.bias, mode=self.mode, epsilon=self.epsilon, exp_avg_factor=factor,
            running_mean=self.running_mean, running_var=self.running_var, handle=self.handle)
        return y

    def forward_inference(self, x):
        """y from the running statistics."""
        return batchnorm_forward_inference(x, self.weight, self.bias, self.running_mean, self.running_var,
                                           mode=self.mode, epsilon=self.epsilon, handle=self.handle)

    def backward(self, x, dy):
        """dx, from the last training forward's saved statistics (recomputed
        from x if there was none); keeps ``grad_weight`` and ``grad_bias``."""
        dx, self.grad_weight, self.grad_bias = batchnorm_backward(
            x, dy, self.weight, saved_mean=self.saved_mean, saved_inv_std=self.saved_inv_std, mode=self.mode,
            epsilon=self.epsilon, handle=self.handle)
        return dx

    # -- description and files -----------------------------------------------
    def state(self) -> dict:
        """The tensors as host NumPy arrays, under torch.nn.BatchNorm's names."""
        tensors = {name: self._to_host(getattr(self, name)) for name in _TENSORS}
        tensors["num_batches_tracked"] = np.array(self.num_batches_tracked, dtype=np.int64)
        if self.saved_mean is not None:
            tensors["saved_mean"] = self._to_host(self.saved_mean)
            tensors["saved_inv_std"] = self._to_host(self.saved_inv_std)
        return tensors

    def info(self) -> dict:
        """The configuration with every tensor's values: JSON-serializable."""
        tensors = self.state()
        return {"format": FORMAT, "version": header_version(), "config": self.config(),
                "num_batches_tracked": self.num_batches_tracked,
                "tensors": {name: np.asarray(values, dtype=np.float64).tolist()
                            for name, values in tensors.items() if name != "num_batches_tracked"}}

    def save(self, path) -> None:
        """A safetensors file; the configuration goes in its metadata."""
        metadata = {"format": FORMAT, "version": header_version(), "config": json.dumps(self.config())}
        safetensors_io.save(path, self.state(), metadata)

    @classmethod
    def load(cls, path, *, device: Optional[str] = None, handle=None) -> "BatchNorm":
        """The layer ``save`` wrote (on ``device``, default the one it was saved from)."""
        tensors, metadata = safetensors_io.load(path)
        config = config_of(path, metadata)
        if device is not None:
            config["device"] = device
        layer = cls(config.pop("num_features"), handle=handle, **config)
        for name in _TENSORS:
            if name not in tensors:
                raise safetensors_io.SafetensorsError(f"{path}: the layer's tensor {name!r} is missing")
            if tensors[name].shape != layer.param_shape:
                raise safetensors_io.SafetensorsError(
                    f"{path}: {name} has shape {tensors[name].shape}, the configuration says {layer.param_shape}")
            setattr(layer, name, layer._from_host(tensors[name]))
        layer.num_batches_tracked = int(tensors.get("num_batches_tracked", np.array(0)))
        inv_std = tensors.get("saved_inv_std", tensors.get("saved_inv_var"))  # the old name in older files
        if "saved_mean" in tensors and inv_std is not None:
            layer.saved_mean = layer._from_host(tensors["saved_mean"])
            layer.saved_inv_std = layer._from_host(inv_std)
        return layer

    @property
    def saved_inv_var(self):
        """Deprecated: ``saved_inv_std``."""
        renamed.warn_renamed("saved_inv_var", "BatchNorm", stacklevel=2)
        return self.saved_inv_std

    @saved_inv_var.setter
    def saved_inv_var(self, value):
        renamed.warn_renamed("saved_inv_var", "BatchNorm", stacklevel=2)
        self.saved_inv_std = value


def config_of(path, metadata: dict) -> dict:
    """The layer configuration in a file's metadata, checked to be one."""
    if metadata.get("format") != FORMAT or "config" not in metadata:
        raise safetensors_io.SafetensorsError(f"{path}: not a {FORMAT} file (its metadata has no layer config)")
    try:
        config = json.loads(metadata["config"])
    except json.JSONDecodeError as exc:
        raise safetensors_io.SafetensorsError(f"{path}: the layer config is not JSON ({exc})") from None
    if not isinstance(config, dict) or "num_features" not in config:
        raise safetensors_io.SafetensorsError(f"{path}: the layer config {config!r} has no num_features")
    return config
