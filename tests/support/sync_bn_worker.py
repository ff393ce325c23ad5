"""One rank of a SyncBatchNorm run (test_sync_batchnorm.py starts one
process per rank): ``python sync_bn_worker.py RANK WORLD INIT_FILE DEVICE``.

Every rank makes the same global batch, takes its own (unequal) slice, runs
miopen_bn.torch.SyncBatchNorm forward and backward, and checks its slice of
y and dx, the running statistics and the weight/bias gradients summed over
the ranks against the float64 reference over the whole batch.  Prints one
"ok <case>" line per case; any failure raises (non-zero exit)."""

from __future__ import annotations

import datetime
import sys
import zlib

import numpy as np
import torch
import torch.distributed as dist

from miopen_bn import reference
from miopen_bn.tolerances import check
from miopen_bn.torch import SyncBatchNorm

# Batch sizes per rank: unequal, and one rank with a single sample.
SIZES = {2: (4, 1), 3: (1, 3, 2)}

# name, x dtype, module dtype, spatial lengths, channels_last, affine, momentum
CASES = [
    ("float32-nchw", torch.float32, torch.float32, (4, 5), False, True, 0.1),
    ("float16-channels-last-fp32-params", torch.float16, torch.float32, (3, 4), True, True, 0.3),
    ("float64-2d-no-affine-cumulative", torch.float64, torch.float64, (), False, False, None),
]
CHANNELS = 3


def run_case(rank, world, device, case, sizes, group=None) -> None:
    name, x_dtype, p_dtype, spatial, channels_last, affine, momentum = case
    rng = np.random.default_rng(zlib.crc32(name.encode()))  # the same on every rank
    shape = (sum(sizes), CHANNELS) + spatial
    x_all = (rng.standard_normal(shape) * 2 + 1).astype(np.float32)
    dy_all = rng.standard_normal(shape).astype(np.float32)
    weight = rng.uniform(0.5, 2, CHANNELS)
    bias = rng.uniform(-1, 1, CHANNELS)
    run_mean0, run_var0 = rng.uniform(-1, 1, CHANNELS), rng.uniform(0.5, 2, CHANNELS)

    module = SyncBatchNorm(CHANNELS, momentum=momentum, affine=affine, process_group=group).to(device, p_dtype)
    with torch.no_grad():
        if affine:
            module.weight.copy_(torch.from_numpy(weight))
            module.bias.copy_(torch.from_numpy(bias))
        module.running_mean.copy_(torch.from_numpy(run_mean0))
        module.running_var.copy_(torch.from_numpy(run_var0))
    index = list(range(world)).index(rank) if group is None else dist.get_group_rank(group, rank)
    start = sum(sizes[:index])
    own = slice(start, start + sizes[index])

    def put(array):
        t = torch.from_numpy(np.ascontiguousarray(array[own])).to(device=device, dtype=x_dtype)
        return t.to(memory_format=torch.channels_last) if channels_last and t.dim() == 4 else t

    x = put(x_all).requires_grad_()
    y = module(x)
    y.backward(put(dy_all))
    assert y.dtype == x_dtype and y.shape == x.shape
    if channels_last and x.dim() == 4:
        assert y.is_contiguous(memory_format=torch.channels_last), "y lost x's channels_last layout"

    # What the reference sees: the inputs as the library got them.
    x_ref = x.detach().cpu().double().numpy() if sizes[index] else None
    x_full = torch.from_numpy(x_all).to(x_dtype).double().numpy()
    dy_full = torch.from_numpy(dy_all).to(x_dtype).double().numpy()
    assert x_ref is None or np.array_equal(x_ref, x_full[own])
    factor = 1.0 if momentum is None else momentum  # the first step of a cumulative average takes the batch's
    scale = weight if affine else np.ones(CHANNELS)
    expected = reference.batchnorm_forward_training(
        x_full, scale, bias if affine else np.zeros(CHANNELS), running_mean=run_mean0, running_var=run_var0,
        exp_avg_factor=factor, epsilon=module.eps,
    )
    grads = reference.batchnorm_backward(x_full, dy_full, scale, epsilon=module.eps)
    x_name, p_name = str(x_dtype).split(".")[1], str(p_dtype).split(".")[1]
    check(y.detach().cpu().double().numpy(), expected["y"][own], x_name, "elementwise", f"{name}: y")
    check(x.grad.cpu().double().numpy(), grads["dx"][own], x_name, "elementwise", f"{name}: dx")
    for buffer in ("running_mean", "running_var"):
        got = getattr(module, buffer).cpu().double().numpy()
        check(got, expected[buffer].reshape(CHANNELS), p_name, "reduction", f"{name}: {buffer}")
    if affine:
        for param, key in ((module.weight, "dscale"), (module.bias, "dbias")):
            total = param.grad.detach().cpu().clone()  # gloo, on the host whatever the device
            dist.all_reduce(total, group=group)  # what DDP's gradient all-reduce adds up
            check(total.double().numpy(), grads[key].reshape(CHANNELS), p_name, "reduction",
                  f"{name}: {key}")
    print(f"ok {name} (rank {rank} of {world})", flush=True)


def main() -> None:
    rank, world, init_file, device = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], sys.argv[4]
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=world,
                            timeout=datetime.timedelta(seconds=60))
    try:
        for case in CASES:
            run_case(rank, world, device, case, SIZES[world])
        if world == 3:
            # A process group of two of the three ranks; the third takes no part.
            pair = dist.new_group([0, 1])
            if rank < 2:
                run_case(rank, world, device, CASES[0], (2, 3), group=pair)
        dist.barrier()
    finally:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
