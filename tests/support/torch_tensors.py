"""Torch-side helpers of the GPU tests: data on the CUDA device in a chosen
layout, NaN-poisoned outputs, and the tolerance check against a float64
reference.  Imported after ``pytest.importorskip("torch")``."""
import torch

from miopen_bn import tolerances

DEVICE = "cuda"
TORCH_DTYPE = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16,
               "fp64": torch.float64}


def generator(seed):
    return torch.Generator(device=DEVICE).manual_seed(seed)


def arrange(tensor, layout):
    """The same logical values stored NCHW, NHWC or as a padded strided view."""
    if layout == "nchw":
        return tensor.contiguous()
    if layout == "nhwc":
        if tensor.dim() == 4:
            return tensor.contiguous(memory_format=torch.channels_last)
        if tensor.dim() == 5:
            return tensor.contiguous(memory_format=torch.channels_last_3d)
        return tensor.movedim(1, -1).contiguous().movedim(-1, 1)
    # strided: channels sliced out of a wider buffer, innermost dim stepped by 2
    padded = list(tensor.shape)
    padded[1] += 3
    index = [slice(None), slice(1, 1 + tensor.shape[1])]
    if tensor.dim() > 2:
        padded[-1] = 2 * tensor.shape[-1] + 1
        index += [slice(None)] * (tensor.dim() - 3) + [slice(1, None, 2)]
    base = torch.full(padded, float("nan"), dtype=tensor.dtype, device=tensor.device)
    view = base[tuple(index)]
    view.copy_(tensor)
    return view


def random_data(shape, dtype, seed, layout="nchw"):
    """Channels (or features) with their own mean and spread, never zeros."""
    gen = generator(seed)
    view = (1, shape[1]) + (1,) * (len(shape) - 2)
    mean = torch.rand(view, generator=gen, device=DEVICE, dtype=torch.float64) * 4 - 2
    std = torch.rand(view, generator=gen, device=DEVICE, dtype=torch.float64) * 1.5 + 0.5
    x = torch.randn(shape, generator=gen, device=DEVICE, dtype=torch.float64) * std + mean
    return arrange(x.to(TORCH_DTYPE[dtype]), layout)


def random_param(shape, seed, low, high):
    gen = generator(seed)
    return torch.rand(shape, generator=gen, device=DEVICE, dtype=torch.float32) * (high - low) + low


def poisoned(like):
    return torch.full_like(like, float("nan"))


def host64(tensor):
    return tensor.detach().to(torch.float64).cpu().numpy()


def check(name, out, expected, kind, tol=None):
    """The package's tolerance table for `out`'s own dtype (a torch tensor);
    `expected` is the float64 reference, in any shape of the same size."""
    __tracebackhide__ = True
    tolerances.check(host64(out), expected, out.dtype, kind, name=name, tol=tol)
