#!/usr/bin/env python3
"""End to end: the same training with torch.nn's norm layers and with miopen_bn.torch's.

    python bench/train_e2e.py --device cuda --json e2e.json     # H100: ResNet-50 + UNet stack
    python bench/train_e2e.py --device cpu --json e2e.json      # CI: small models, a few steps

Per model, both implementations start from the same seed (same weights, same
synthetic batches) and train with SGD (momentum 0.9):

* **loss curves**: ``--steps`` eager steps each; they agree when every step's
  loss is within ``--rtol`` of torch's (relative) over the first
  ``--early-steps`` steps and the mean loss of the last 10% of steps is within
  ``--rtol-final``.  Reduction orders differ, so bf16 curves drift apart
  slowly: the defaults on CUDA are 2% early and 5% at the end; float32 on the
  CPU 1e-3 throughout.
* **step time** (ms, mean of ``--time-steps`` steps after warm-up): eager;
  ``torch.compile`` (inductor, default mode; the fwd+bwd is compiled, the
  optimizer step stays eager); CUDA graphs (the whole step, optimizer
  included, captured once with ``torch.cuda.graph`` and replayed).

Models on CUDA: torchvision ResNet-50 (channels_last, bf16 autocast, 224x224,
``convert()`` swaps its BatchNorm2d) and a UNet-style stack of residual
GroupNorm + SiLU + conv blocks (ours fuses the SiLU into the group norm).
ResNet-50 under torch.compile is off unless ``--compile-resnet`` (its two
compiles take minutes); everything else fits in about 4 minutes on an H100.
On the CPU: a small conv + BatchNorm2d net and the UNet stack, float32.
Prints a table and writes the JSON to ``--json``.
"""
import argparse
import json
import os
import sys
import time

BENCH_DIR = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(BENCH_DIR, "..", "python"))

import torch  # noqa: E402
from torch import nn  # noqa: E402

import miopen_bn.torch as mbt  # noqa: E402

IMPLS = ("torch", "ours")


def parse_args(argv):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cuda")
    parser.add_argument("--models", help="comma list of resnet50,unet,small_bn (default per device)")
    parser.add_argument("--steps", type=int, help="eager steps for the loss curves (cuda 200, cpu 6)")
    parser.add_argument("--time-steps", type=int, help="timed steps per variant (cuda 30, cpu 3)")
    parser.add_argument("--variants", help="comma list of eager,compile,graphs (default: all on cuda, eager on cpu)")
    parser.add_argument("--compile-resnet", action="store_true", help="also time ResNet-50 under torch.compile")
    parser.add_argument("--batch", type=int, help="batch size (resnet50 32, unet 8, cpu 4)")
    parser.add_argument("--rtol", type=float, help="per-step relative loss tolerance, early steps")
    parser.add_argument("--rtol-final", type=float, help="relative tolerance of the final mean loss")
    parser.add_argument("--early-steps", type=int, default=10)
    parser.add_argument("--json", help="write the results here")
    args = parser.parse_args(argv)
    cuda = args.device == "cuda"
    args.models = (args.models or ("resnet50,unet" if cuda else "small_bn,unet")).split(",")
    args.steps = args.steps or (200 if cuda else 6)
    args.time_steps = args.time_steps or (30 if cuda else 3)
    args.variants = (args.variants or ("eager,compile,graphs" if cuda else "eager")).split(",")
    args.rtol = args.rtol if args.rtol is not None else (2e-2 if cuda else 1e-3)
    args.rtol_final = args.rtol_final if args.rtol_final is not None else (5e-2 if cuda else 1e-3)
    return args


# --------------------------------------------------------------------------- #
# Models
# --------------------------------------------------------------------------- #
class ResBlock(nn.Module):
    """GroupNorm + SiLU + conv, twice, plus the skip: a UNet's building block."""

    def __init__(self, channels, norm_act):
        super().__init__()
        self.body = nn.Sequential(norm_act(channels), nn.Conv2d(channels, channels, 3, padding=1),
                                  norm_act(channels), nn.Conv2d(channels, channels, 3, padding=1))

    def forward(self, x):
        return x + self.body(x)


def unet_stack(impl, width):
    def norm_act(channels):
        if impl == "ours":
            return mbt.GroupNorm(32, channels, activation="silu")
        return nn.Sequential(nn.GroupNorm(32, channels), nn.SiLU())

    return nn.Sequential(
        nn.Conv2d(4, width, 3, padding=1), ResBlock(width, norm_act),
        nn.Conv2d(width, 2 * width, 3, stride=2, padding=1), ResBlock(2 * width, norm_act),
        nn.ConvTranspose2d(2 * width, width, 2, stride=2), ResBlock(width, norm_act),
        norm_act(width), nn.Conv2d(width, 4, 3, padding=1))


def small_bn_net():
    return nn.Sequential(nn.Conv2d(3, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU(),
                         nn.Conv2d(16, 16, 3, padding=1, stride=2), nn.BatchNorm2d(16), nn.ReLU(),
                         nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(16, 10))


class Task:
    """One model: how to build it and its synthetic batches and loss."""

    def __init__(self, name, device, batch):
        cuda = device == "cuda"
        self.name, self.device = name, device
        self.autocast = cuda  # bf16 autocast on the GPU, float32 on the CPU
        self.channels_last = name == "resnet50"
        if name == "resnet50":
            self.batch, self.input_shape, self.classes = batch or 32, (3, 224, 224), 1000
        elif name == "small_bn":
            self.batch, self.input_shape, self.classes = batch or 4, (3, 12, 12), 10
        else:
            self.batch, self.input_shape, self.classes = batch or (8 if cuda else 2), (4, 64 if cuda else 16,
                                                                                       64 if cuda else 16), None
        self.width = 128 if cuda else 32

    def build(self, impl):
        torch.manual_seed(0)
        if self.name == "resnet50":
            import torchvision

            model = torchvision.models.resnet50()
            model = mbt.convert(model) if impl == "ours" else model
        elif self.name == "small_bn":
            model = small_bn_net()
            model = mbt.convert(model) if impl == "ours" else model
        else:
            model = unet_stack(impl, self.width)
        model = model.to(self.device)
        if self.channels_last:
            model = model.to(memory_format=torch.channels_last)
        return model

    def batches(self, count=4):
        """A few fixed batches, cycled: the loss goes down, as in training."""
        gen = torch.Generator(device="cpu").manual_seed(1)
        out = []
        for _ in range(count):
            x = torch.randn((self.batch,) + self.input_shape, generator=gen)
            if self.classes:
                target = torch.randint(0, self.classes, (self.batch,), generator=gen)
            else:
                target = torch.randn((self.batch,) + self.input_shape, generator=gen)
            x, target = x.to(self.device), target.to(self.device)
            if self.channels_last:
                x = x.contiguous(memory_format=torch.channels_last)
            out.append((x, target))
        return out

    def loss(self, forward, x, target):
        with torch.autocast(self.device, dtype=torch.bfloat16, enabled=self.autocast):
            out = forward(x)
        out = out.float()
        if self.classes:
            return nn.functional.cross_entropy(out, target)
        return nn.functional.mse_loss(out, target)


# --------------------------------------------------------------------------- #
# Runs
# --------------------------------------------------------------------------- #
def _sync(device):
    if device == "cuda":
        torch.cuda.synchronize()


def loss_curve(task, impl, steps):
    model = task.build(impl)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    batches = task.batches()
    losses = []
    for step in range(steps):
        x, target = batches[step % len(batches)]
        opt.zero_grad(set_to_none=True)
        loss = task.loss(model, x, target)
        loss.backward()
        opt.step()
        losses.append(loss.detach())
    return [float(v) for v in losses]


def step_time_ms(task, impl, variant, steps):
    model = task.build(impl)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    batches = task.batches()
    forward = torch.compile(model) if variant == "compile" else model

    def step(x, target):
        opt.zero_grad(set_to_none=False)
        loss = task.loss(forward, x, target)
        loss.backward()
        opt.step()
        return loss

    if variant == "graphs":
        static_x, static_t = (t.clone() for t in batches[0])
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(3):
                step(static_x, static_t)
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            step(static_x, static_t)

        def run(x, target):
            static_x.copy_(x)
            static_t.copy_(target)
            graph.replay()
    else:
        run = step
    for i in range(3):  # warm-up (and compilation)
        run(*batches[i % len(batches)])
    _sync(task.device)
    start = time.perf_counter()
    for i in range(steps):
        run(*batches[i % len(batches)])
    _sync(task.device)
    return (time.perf_counter() - start) / steps * 1e3


def compare_curves(theirs, ours, args):
    rel = [abs(a - b) / max(abs(a), 1e-12) for a, b in zip(theirs, ours)]
    early = max(rel[:args.early_steps])
    tail = max(1, len(theirs) // 10)
    final_t, final_o = sum(theirs[-tail:]) / tail, sum(ours[-tail:]) / tail
    final = abs(final_t - final_o) / max(abs(final_t), 1e-12)
    return {"max_rel_early": early, "final_mean_torch": final_t, "final_mean_ours": final_o,
            "final_rel": final, "agree": early <= args.rtol and final <= args.rtol_final}


def main(argv=None):
    args = parse_args(argv)
    if args.device == "cuda" and not torch.cuda.is_available():
        raise SystemExit("no CUDA device")
    if args.device == "cpu":
        torch.set_num_threads(1)  # a CPU run checks agreement; torch's thread pool on shared cores only adds noise
    results = {"device": torch.cuda.get_device_name() if args.device == "cuda" else "cpu",
               "torch": torch.__version__, "steps": args.steps, "time_steps": args.time_steps,
               "rtol_early": args.rtol, "early_steps": args.early_steps, "rtol_final": args.rtol_final,
               "models": {}}
    started = time.perf_counter()
    for name in args.models:
        task = Task(name, args.device, args.batch)
        entry = {"batch": task.batch, "input": list(task.input_shape), "autocast_bf16": task.autocast,
                 "channels_last": task.channels_last}
        curves = {impl: loss_curve(task, impl, args.steps) for impl in IMPLS}
        entry["losses"] = curves
        entry["agreement"] = compare_curves(curves["torch"], curves["ours"], args)
        times = {}
        for variant in args.variants:
            if variant == "compile" and name == "resnet50" and not args.compile_resnet:
                continue
            if variant == "graphs" and args.device != "cuda":
                continue
            times[variant] = {impl: step_time_ms(task, impl, variant, args.time_steps) for impl in IMPLS}
        entry["step_ms"] = times
        results["models"][name] = entry
    results["wall_s"] = time.perf_counter() - started

    print(f"{'model':10} {'steps':>5} {'loss torch':>11} {'loss ours':>10} {'max rel (early)':>15} "
          f"{'final rel':>9} {'agree':>5}")
    for name, entry in results["models"].items():
        a = entry["agreement"]
        print(f"{name:10} {args.steps:5d} {a['final_mean_torch']:11.4f} {a['final_mean_ours']:10.4f} "
              f"{a['max_rel_early']:15.2e} {a['final_rel']:9.2e} {str(a['agree']):>5}")
    print(f"\n{'model':10} {'variant':8} {'torch ms':>9} {'ours ms':>8} {'ours/torch':>10}")
    for name, entry in results["models"].items():
        for variant, t in entry["step_ms"].items():
            print(f"{name:10} {variant:8} {t['torch']:9.2f} {t['ours']:8.2f} {t['ours'] / t['torch']:10.2f}")
    print(f"\nwall time {results['wall_s']:.0f} s")
    if args.json:
        with open(args.json, "w") as handle:
            json.dump(results, handle, indent=1)
    return results


if __name__ == "__main__":
    main()
