#!/usr/bin/env python3
"""Host cost of one call: miopen_bn.torch against eager PyTorch, on the same tensors.

    python bench/host_cost.py --device cpu|cuda [--shape 2x8x2x2] [--clock wall|cpu] [--json PATH]

``host_us`` is the host (Python + C) time of one repeated call with the same
layout: calls are issued in bursts and the burst is timed without waiting for
the device (CUDA tensors; the device catches up between bursts, outside the
timer), so on a GPU it is what the caller's thread spends, not kernel time.
On the CPU the work itself runs on the calling thread and is included; the
default shape is tiny so that the call's overhead dominates.  Rows: each
functional op of ``miopen_bn.torch`` (inference, training, training with
autograd forward and backward, group norm, group norm + SiLU, group norm
forward and backward), the modules (BatchNorm2d train step,
GroupNorm+SiLU), and the array API (``miopen_bn.batchnorm_*`` /
``groupnorm_*`` on the same torch tensors), ours beside torch's
(``F.silu(F.group_norm(...))`` for the fused swish).

Ours and torch's are timed interleaved, so that both see the same noise of
a shared host: after a warm-up burst of each, ``--bursts`` pairs of bursts
run, each pair one burst of ours and one of torch's on the same tensors (in
alternating order: ours first in even pairs, torch's first in odd ones, so
neither side always follows the other).  Per row: ``ours_host_us`` /
``torch_host_us``, the best burst of each (the least disturbed; what
earlier versions reported, timed then in separate runs), and ``ratio``,
their quotient; ``ours_median_us`` / ``torch_median_us``, the median of
each side's bursts; ``paired_ratio``, the median over pairs of ours/torch
within a pair, the figure a noisy host moves least (a slow spell slows both
bursts of a pair alike); ``ours_bursts_us`` / ``torch_bursts_us``, every
burst's per-call time in the order run.  ``--clock cpu`` times the
process's CPU time instead of the wall clock: on a machine shared with
other work it leaves out the time other processes took the cores (GPU runs
want the wall clock).  ``ops``: the torch operators one call dispatches
(allocations included, counted with a TorchDispatchMode), ours and
torch's.
"""
import argparse
import collections
import json
import os
import sys
import time

BENCH_DIR = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(BENCH_DIR, "..", "python"))

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from torch.utils._python_dispatch import TorchDispatchMode  # noqa: E402

import miopen_bn as mbn  # noqa: E402
import miopen_bn.torch as mbt  # noqa: E402


def parse_args(argv):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    parser.add_argument("--shape", default="2x8x2x2", help="N x C x H x W")
    parser.add_argument("--dtype", choices=("fp32", "bf16", "fp16"), default="fp32")
    parser.add_argument("--channels-last", action="store_true")
    parser.add_argument("--threads", type=int, default=1, help="torch CPU threads")
    parser.add_argument("--burst", type=int, default=200, help="calls per timed burst")
    parser.add_argument("--bursts", type=int, default=15)
    parser.add_argument("--clock", choices=("wall", "cpu"), default="wall",
                        help="wall: perf_counter; cpu: this process's CPU time (all its threads)")
    parser.add_argument("--json", help="write the rows here")
    return parser.parse_args(argv)


def _median(values) -> float:
    ordered = sorted(values)
    middle = len(ordered) // 2
    return ordered[middle] if len(ordered) % 2 else (ordered[middle - 1] + ordered[middle]) / 2


def host_us_interleaved(ours, theirs, device, burst, bursts, clock="wall") -> dict:
    """Per-call host times of ``ours`` and ``theirs`` in ``bursts`` pairs of
    bursts of ``burst`` calls, the two sides alternating (the module
    docstring's method): the row's timing fields."""
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    now = time.perf_counter if clock == "wall" else time.process_time

    def timed(fn) -> float:
        start = now()
        for _ in range(burst):
            fn()
        elapsed = (now() - start) / burst * 1e6
        sync()  # the device catches up outside the timer
        return elapsed

    for fn in (ours, theirs):  # warm-up: first-call paths, caches, allocator
        timed(fn)
    sides, mine, torch_s = (ours, theirs), [], []
    for pair in range(bursts):
        for side in ((0, 1) if pair % 2 == 0 else (1, 0)):
            (mine, torch_s)[side].append(timed(sides[side]))
    return {"ours_host_us": min(mine), "torch_host_us": min(torch_s), "ratio": min(mine) / min(torch_s),
            "ours_median_us": _median(mine), "torch_median_us": _median(torch_s),
            "paired_ratio": _median([a / b for a, b in zip(mine, torch_s)]),
            "ours_bursts_us": mine, "torch_bursts_us": torch_s}


class _OpCount(TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.ops = collections.Counter()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.ops[func.overloadpacket.__name__] += 1
        return func(*args, **(kwargs or {}))


def torch_ops(fn) -> dict:
    """{operator name: count} of one call of ``fn``."""
    with _OpCount() as count:
        fn()
    return dict(count.ops)


def cases(shape, dtype, device, channels_last):
    n, c = shape[0], shape[1]
    groups = max(1, c // 4)
    make = dict(dtype=dtype, device=device)
    x = torch.randn(shape, **make)
    if channels_last and x.dim() == 4:
        x = x.contiguous(memory_format=torch.channels_last)
    param = dict(dtype=torch.float32 if dtype != torch.float64 else dtype, device=device)
    weight, bias = torch.rand(c, **param) + 0.5, torch.randn(c, **param)
    mean, var = torch.zeros(c, **param), torch.ones(c, **param)
    xg = x.detach().clone().requires_grad_()
    wg, bg = weight.clone().requires_grad_(), bias.clone().requires_grad_()
    dy = torch.randn_like(x)
    gn_w, gn_b = weight.to(dtype), bias.to(dtype)
    gn_wg, gn_bg = gn_w.clone().requires_grad_(), gn_b.clone().requires_grad_()

    def bn_train_step(fn):
        return lambda: fn(xg, mean, var, wg, bg, True, 0.1, 1e-5).backward(dy)

    def gn_step(ours):
        if ours:
            return lambda: mbt.group_norm(xg, groups, gn_wg, gn_bg, 1e-5).backward(dy)
        return lambda: F.group_norm(xg, groups, gn_wg, gn_bg, 1e-5).backward(dy)

    ours_bn2d, torch_bn2d = mbt.BatchNorm2d(c, **param), torch.nn.BatchNorm2d(c, **param)
    ours_gn, torch_gn = mbt.GroupNorm(groups, c, activation="silu", **make), torch.nn.GroupNorm(groups, c, **make)
    with torch.no_grad():
        yield ("bn_infer", lambda: mbt.batch_norm(x, mean, var, weight, bias, False, 0.1, 1e-5),
               lambda: F.batch_norm(x, mean, var, weight, bias, False, 0.1, 1e-5))
        yield ("bn_train", lambda: mbt.batch_norm(x, mean, var, weight, bias, True, 0.1, 1e-5),
               lambda: F.batch_norm(x, mean, var, weight, bias, True, 0.1, 1e-5))
        yield ("gn_fwd", lambda: mbt.group_norm(x, groups, gn_w, gn_b, 1e-5),
               lambda: F.group_norm(x, groups, gn_w, gn_b, 1e-5))
        yield ("gn_fwd_swish", lambda: mbt.group_norm(x, groups, gn_w, gn_b, 1e-5, activation="silu"),
               lambda: F.silu(F.group_norm(x, groups, gn_w, gn_b, 1e-5)))
    yield ("bn_train+bwd (autograd)", bn_train_step(mbt.batch_norm), bn_train_step(F.batch_norm))
    yield ("gn_fwd+bwd (autograd)", gn_step(True), gn_step(False))
    if x.dim() == 4:
        yield ("BatchNorm2d module, train fwd+bwd", lambda: ours_bn2d(xg).backward(dy),
               lambda: torch_bn2d(xg).backward(dy))
    yield ("GroupNorm+SiLU module, fwd+bwd", lambda: ours_gn(xg).backward(dy),
           lambda: F.silu(torch_gn(xg)).backward(dy))
    _, saved_mean, saved_inv_std = mbn.batchnorm_forward_training(x, weight, bias)
    _, gn_mean, gn_rstd = mbn.groupnorm_forward(x, groups, gn_w, gn_b)
    with torch.no_grad():
        yield ("array API: bn inference", lambda: mbn.batchnorm_forward_inference(x, weight, bias, mean, var),
               lambda: F.batch_norm(x, mean, var, weight, bias, False, 0.1, 1e-5))
        yield ("array API: bn training", lambda: mbn.batchnorm_forward_training(
            x, weight, bias, running_mean=mean, running_var=var),
            lambda: F.batch_norm(x, mean, var, weight, bias, True, 0.1, 1e-5))
        yield ("array API: bn backward", lambda: mbn.batchnorm_backward(
            x, dy, weight, saved_mean=saved_mean, saved_inv_std=saved_inv_std),
            lambda: torch.ops.aten.native_batch_norm_backward(
                dy, x, weight, None, None, saved_mean, saved_inv_std, True, 1e-5, [True, True, True]))
        yield ("array API: gn forward", lambda: mbn.groupnorm_forward(x, groups, gn_w, gn_b),
               lambda: F.group_norm(x, groups, gn_w, gn_b, 1e-5))
        yield ("array API: gn backward", lambda: mbn.groupnorm_backward(x, dy, groups, gn_w, gn_mean, gn_rstd),
               lambda: torch.ops.aten.native_group_norm_backward(
                   dy, x, gn_mean, gn_rstd, gn_w, n, c, x[0, 0].numel(), groups, [True, True, True]))


def main(argv=None):
    args = parse_args(argv)
    torch.set_num_threads(args.threads)
    shape = tuple(int(v) for v in args.shape.lower().split("x"))
    dtype = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}[args.dtype]
    if args.device == "cuda" and not torch.cuda.is_available():
        raise SystemExit("no CUDA device")
    rows = []
    print(f"host_us per call ({args.clock} clock), {args.device}, shape {shape}, {args.dtype}"
          f"{', channels_last' if args.channels_last else ''}")
    print(f"{'op':36} {'ours':>7} {'torch':>7} {'best':>6} {'ours~':>7} {'torch~':>7} {'paired':>7} "
          f"{'ops ours/torch':>15}")
    for name, ours, theirs in cases(shape, dtype, args.device, args.channels_last):
        row = {"op": name, **host_us_interleaved(ours, theirs, args.device, args.burst, args.bursts, args.clock)}
        row["ours_ops"], row["torch_ops"] = torch_ops(ours), torch_ops(theirs)
        rows.append(row)
        ops = f"{sum(row['ours_ops'].values())}/{sum(row['torch_ops'].values())}"
        print(f"{name:36} {row['ours_host_us']:7.1f} {row['torch_host_us']:7.1f} {row['ratio']:6.2f} "
              f"{row['ours_median_us']:7.1f} {row['torch_median_us']:7.1f} {row['paired_ratio']:7.2f} {ops:>15}")
    print("ours, torch: best burst; best: their ratio; ~: median burst; paired: median of ours/torch per pair")
    result = {"device": args.device, "device_name": torch.cuda.get_device_name() if args.device == "cuda"
              else "cpu", "shape": list(shape), "dtype": args.dtype, "channels_last": args.channels_last,
              "torch": torch.__version__, "threads": args.threads, "clock": args.clock, "burst": args.burst,
              "bursts": args.bursts, "timing": "interleaved", "rows": rows}
    if args.json:
        with open(args.json, "w") as handle:
            json.dump(result, handle, indent=1)
    return result


if __name__ == "__main__":
    main()
