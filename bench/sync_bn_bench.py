#!/usr/bin/env python3
"""Per-step time of a SyncBatchNorm layer: miopen_bn.torch.SyncBatchNorm
against torch.nn.SyncBatchNorm, same world size, shapes and tensors.

    python bench/sync_bn_bench.py [--world 2] [--device cuda|cpu] [--dist-backend gloo|nccl]
                                  [--dtypes float16,bfloat16] [--layouts channels_last,nchw]
                                  [--shapes 32x64x56x56,...] [--iters 20] [--json PATH]

Starts --world processes on localhost (one GPU is shared by every rank on a
one-GPU machine: use gloo there, NCCL refuses two ranks on one device).  A
step is one training forward and backward of the layer (y = bn(x);
y.backward(dy)), statistics exchanged across the ranks; the time is rank
0's median over --iters steps after warm-up, with the device synchronized.
Before timing, each implementation's y and dx are checked against the
other's.  Prints a Markdown table and a JSON document (also written to
--json)."""

from __future__ import annotations

import argparse
import datetime
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

DEFAULT_SHAPES = "32x64x56x56,32x256x28x28,64x512x7x7"


def parse_args(argv):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--world", type=int, default=2)
    parser.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    parser.add_argument("--dist-backend", choices=("gloo", "nccl"), default="gloo")
    parser.add_argument("--dtypes", default="float16,bfloat16")
    parser.add_argument("--layouts", default="channels_last,nchw")
    parser.add_argument("--shapes", default=DEFAULT_SHAPES, help="per-rank N x C x H x W, comma separated")
    parser.add_argument("--iters", type=int, default=20)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--json", help="also write the JSON document here")
    parser.add_argument("--timeout", type=int, default=540, help="seconds before the ranks are killed")
    parser.add_argument("--rank", type=int, help=argparse.SUPPRESS)  # set for the worker processes
    parser.add_argument("--init-file", help=argparse.SUPPRESS)
    return parser.parse_args(argv)


# ---- one rank ---------------------------------------------------------------------------


def step_times(module, x, dy, iters: int, warmup: int, sync) -> list:
    times = []
    for i in range(warmup + iters):
        x.grad = None
        sync()
        start = time.perf_counter()
        module(x).backward(dy)
        sync()
        if i >= warmup:
            times.append((time.perf_counter() - start) * 1e3)
    return times


def run_rank(args) -> None:
    import torch
    import torch.distributed as dist

    from miopen_bn.torch import SyncBatchNorm

    device = torch.device(args.device, 0) if args.device == "cuda" else torch.device("cpu")
    dist.init_process_group(args.dist_backend, init_method=f"file://{args.init_file}", rank=args.rank,
                            world_size=args.world, timeout=datetime.timedelta(seconds=args.timeout))
    sync = (lambda: torch.cuda.synchronize(device)) if device.type == "cuda" else (lambda: None)
    rows = []
    for shape_text in args.shapes.split(","):
        shape = tuple(int(v) for v in shape_text.split("x"))
        for dtype_name in args.dtypes.split(","):
            for layout in args.layouts.split(","):
                dtype = getattr(torch, dtype_name)
                generator = torch.Generator(device="cpu").manual_seed(1000 * args.rank + len(rows))
                x = torch.randn(shape, generator=generator).to(device, dtype)
                dy = torch.randn(shape, generator=generator).to(device, dtype)
                if layout == "channels_last":
                    x, dy = x.to(memory_format=torch.channels_last), dy.to(memory_format=torch.channels_last)
                x.requires_grad_()
                row = {"shape": shape_text, "dtype": dtype_name, "layout": layout}
                outputs = {}
                for name, cls in (("ours", SyncBatchNorm), ("torch", torch.nn.SyncBatchNorm)):
                    module = cls(shape[1]).to(device)  # float32 parameters, as under AMP
                    try:
                        x.grad = None
                        y = module(x)
                        y.backward(dy)
                        outputs[name] = (y.detach().float(), x.grad.float())
                        times = step_times(module, x, dy, args.iters, args.warmup, sync)
                        row[f"{name}_ms"] = statistics.median(times)
                    except Exception as error:  # one side failing must not hide the other's time
                        row[f"{name}_ms"] = None
                        row[f"{name}_error"] = f"{type(error).__name__}: {error}"[:200]
                if len(outputs) == 2:
                    row["max_diff_y"] = float((outputs["ours"][0] - outputs["torch"][0]).abs().max())
                    row["max_diff_dx"] = float((outputs["ours"][1] - outputs["torch"][1]).abs().max())
                if row.get("ours_ms") and row.get("torch_ms"):
                    row["speedup"] = row["torch_ms"] / row["ours_ms"]
                rows.append(row)
    dist.barrier()
    if args.rank == 0:
        print("ROWS " + json.dumps(rows), flush=True)
    dist.destroy_process_group()


# ---- the launcher -------------------------------------------------------------------------


def markdown(rows, header: dict) -> str:
    lines = [
        f"SyncBatchNorm step (forward + backward), world {header['world']}, {header['device']} "
        f"({header['device_name']}), {header['dist_backend']}; median ms of rank 0",
        "",
        "| shape (per rank) | dtype | layout | ours ms | torch ms | speedup | max abs diff y / dx |",
        "|---|---|---|---:|---:|---:|---|",
    ]
    for r in rows:
        def ms(key):
            return f"{r[key]:.3f}" if r.get(key) else "failed"
        diff = f"{r['max_diff_y']:.2g} / {r['max_diff_dx']:.2g}" if "max_diff_y" in r else "-"
        speed = f"{r['speedup']:.2f}x" if "speedup" in r else "-"
        lines.append(f"| {r['shape']} | {r['dtype']} | {r['layout']} | {ms('ours_ms')} | {ms('torch_ms')} | "
                     f"{speed} | {diff} |")
    errors = [(r, k) for r in rows for k in ("ours_error", "torch_error") if k in r]
    lines += [f"\n{r['shape']} {r['dtype']} {r['layout']} {k}: {r[k]}" for r, k in errors]
    return "\n".join(lines)


def main(argv) -> int:
    args = parse_args(argv)
    if args.rank is not None:
        run_rank(args)
        return 0
    with tempfile.TemporaryDirectory() as tmp:
        init_file = os.path.join(tmp, "store")
        env = dict(os.environ, OMP_NUM_THREADS=os.environ.get("OMP_NUM_THREADS", "1"))
        procs = [
            subprocess.Popen([sys.executable, os.path.abspath(__file__), *argv, "--rank", str(rank),
                              "--init-file", init_file], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                             text=True)
            for rank in range(args.world)
        ]
        outputs = []
        try:
            for proc in procs:
                outputs.append(proc.communicate(timeout=args.timeout)[0])
        finally:
            for proc in procs:
                if proc.poll() is None:
                    proc.kill()
    failed = [(rank, p.returncode) for rank, p in enumerate(procs) if p.returncode != 0]
    if failed:
        for rank, out in enumerate(outputs):
            print(f"--- rank {rank}:\n{out}", file=sys.stderr)
        return 1
    rows = json.loads(next(line for line in outputs[0].splitlines() if line.startswith("ROWS "))[5:])
    import torch

    header = {
        "world": args.world,
        "device": args.device,
        "device_name": torch.cuda.get_device_name(0) if args.device == "cuda" else "cpu",
        "dist_backend": args.dist_backend,
        "iters": args.iters,
        "torch": torch.__version__,
        "date": datetime.date.today().isoformat(),
    }
    print(markdown(rows, header))
    document = {"header": header, "rows": rows}
    print(json.dumps(document, indent=1))
    if args.json:
        with open(args.json, "w") as out:
            json.dump(document, out, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
