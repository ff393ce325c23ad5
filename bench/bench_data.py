"""Input tensors for one (shape, dtype) of the bench, and their layouts.

Everything is made with torch on the bench's device; the library receives the
same memory (torch tensors on the GPU, NumPy views of them on the CPU), so our
calls and the PyTorch anchors read identical bytes.
"""
import zlib

DTYPES = ("fp32", "fp16", "bf16")
EPSILON = 1e-5
EXP_AVG_FACTOR = 0.1


def torch_dtype(torch, name):
    return {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16,
            "fp64": torch.float64}[name]


def element_size(name):
    return {"fp32": 4, "fp16": 2, "bf16": 2, "fp64": 8}[name]


def channel_view_shape(shape):
    """Shape that broadcasts a (C,) vector along dim 1 of a tensor of `shape`."""
    return (1, shape[1]) + (1,) * (len(shape) - 2)


def reduce_dims(shape):
    return tuple(d for d in range(len(shape)) if d != 1)


class CaseData:
    """Logical (NCHW-ordered) inputs of one shape and dtype, parameters in
    float32, plus the saved statistics backward consumes."""

    def __init__(self, torch, shape, dtype_name, device):
        self.torch = torch
        self.shape = tuple(shape)
        self.dtype_name = dtype_name
        self.device = device
        seed = zlib.crc32(repr((self.shape, dtype_name)).encode())
        gen = torch.Generator(device=device).manual_seed(seed)
        channels = shape[1]
        f32 = torch.float32
        io = torch_dtype(torch, dtype_name)

        def uniform(low, high):
            values = torch.rand(channels, generator=gen, device=device, dtype=f32)
            return values * (high - low) + low

        # Channels with distinct means and spreads, so a swapped or skipped
        # channel, a wrong mean or a wrong variance all show.
        mean = uniform(-2.0, 2.0)
        std = uniform(0.5, 2.0)
        view = channel_view_shape(shape)
        self.x = self._randn(gen, f32).mul_(std.view(view)).add_(mean.view(view)).to(io)
        self.dy = self._randn(gen, f32).to(io)
        self.scale = uniform(0.5, 1.5)
        self.bias = uniform(-0.5, 0.5)
        self.running_mean = uniform(-0.2, 0.2)
        self.running_var = uniform(0.5, 1.5)
        self.est_mean = mean + uniform(-0.1, 0.1)
        self.est_var = std * std * uniform(0.8, 1.2)
        var, batch_mean = torch.var_mean(self.x.to(torch.float64), dim=reduce_dims(shape),
                                         correction=0)
        self.saved_mean = batch_mean.to(f32)
        self.saved_inv_std = torch.rsqrt(var + EPSILON).to(f32)
        self._group_statistics = {}

    def group_statistics(self, num_groups):
        """(mean, rstd) of each (n, g) as float32 (N, G) tensors, what gn_bwd
        consumes (the forward's saved statistics), computed in float64."""
        if num_groups not in self._group_statistics:
            torch = self.torch
            grouped = self.x.to(torch.float64).reshape(self.shape[0], num_groups, -1)
            var, mean = torch.var_mean(grouped, dim=2, correction=0)
            self._group_statistics[num_groups] = (mean.to(torch.float32),
                                                  torch.rsqrt(var + EPSILON).to(torch.float32))
        return self._group_statistics[num_groups]

    def _randn(self, gen, dtype):
        return self.torch.randn(self.shape, generator=gen, device=self.device, dtype=dtype)

    def numel(self):
        count = 1
        for length in self.shape:
            count *= length
        return count


def in_layout(torch, tensor, layout):
    """The same logical tensor stored NCHW (packed) or NHWC (channels last)."""
    if layout == "nchw":
        return tensor.contiguous()
    if tensor.dim() == 4:
        return tensor.contiguous(memory_format=torch.channels_last)
    if tensor.dim() == 5:
        return tensor.contiguous(memory_format=torch.channels_last_3d)
    if tensor.dim() == 3:  # (N, C, W) -> (N, W, C) storage
        return tensor.transpose(1, 2).contiguous().transpose(1, 2)
    raise ValueError(f"no NHWC layout for rank {tensor.dim()}")


def poisoned_like(torch, tensor):
    """An output buffer of tensor's shape, dtype and strides, full of NaN."""
    return torch.full_like(tensor, float("nan"))
