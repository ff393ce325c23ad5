#!/usr/bin/env python3
"""CPU A/B of two builds of the library in one process.

    python bench/ab_cpu.py OLD.so NEW.so [--quick] [--rounds N] [--ops ...]

Both libraries are opened side by side (cffi, each with its own thread pool
of --threads workers) and called through the C API on the same tensors: for
each row of the CPU bench (batch norm on ResNet-50 at N = 32, group norm on
the Stable Diffusion shapes; NCHW and NHWC; float32) the two are timed in
alternating blocks (bench_timing.CpuTimer.alternating_us), so that a shared
machine's changing load hits both alike.  Rounds repeat the whole list; the
report gives, per row, the median over rounds of each library's median time
and their ratio, then geometric means per op, and the spread of OLD against
itself across rounds as the noise floor.
"""

from __future__ import annotations

import argparse
import math
import os
import statistics
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "python"))

BN_OPS = ("bn_infer", "bn_train", "bn_bwd")
GN_OPS = ("gn_fwd", "gn_fwd_swish", "gn_bwd")


class Lib:
    """One opened library with a CPU handle."""

    def __init__(self, ffi, path):
        self.ffi, self.lib = ffi, ffi.dlopen(path)
        handle = ffi.new("miopenHandle_t*")
        self.check(self.lib.miopenBNCreateWithBackend(handle, self.lib.miopenBNBackendCPU))
        self.handle = handle[0]

    def check(self, status):
        if status != 0:
            raise RuntimeError(self.ffi.string(self.lib.miopenBNGetLastErrorMessage()).decode())

    def desc(self, array):
        """A float32 tensor descriptor with the array's lengths and strides."""
        d = self.ffi.new("miopenTensorDescriptor_t*")
        self.check(self.lib.miopenCreateTensorDescriptor(d))
        dims = self.ffi.new("int[]", list(array.shape))
        strides = self.ffi.new("int[]", [s // array.itemsize for s in array.strides])
        self.check(self.lib.miopenSetTensorDescriptor(d[0], self.lib.miopenFloat, array.ndim, dims, strides))
        return d[0]

    def bn_desc(self, x_desc):
        d = self.ffi.new("miopenTensorDescriptor_t*")
        self.check(self.lib.miopenCreateTensorDescriptor(d))
        self.check(self.lib.miopenDeriveBNTensorDescriptor(d[0], x_desc, self.lib.miopenBNSpatial))
        return d[0]


def ptr(ffi, array):
    return ffi.cast("void*", array.ctypes.data)


def in_layout(values, layout):
    if layout == "nchw":
        return np.ascontiguousarray(values)
    return np.ascontiguousarray(values.transpose(0, 2, 3, 1)).transpose(0, 3, 1, 2)


def calls_for(lib, op, t):
    """A zero-argument call of `op` on tensors t, through `lib`."""
    ffi, L, p = lib.ffi, lib.lib, lambda a: ptr(lib.ffi, a)
    xd, yd = lib.desc(t["x"]), lib.desc(t["y"])
    one, zero = ffi.new("float*", 1.0), ffi.new("float*", 0.0)
    if op in BN_OPS:
        pd = lib.bn_desc(xd)
        if op == "bn_infer":
            return lambda: lib.check(L.miopenBatchNormalizationForwardInference(
                lib.handle, L.miopenBNSpatial, one, zero, xd, p(t["x"]), yd, p(t["y"]), pd, p(t["scale"]),
                p(t["bias"]), p(t["mean"]), p(t["var"]), 1e-5))
        if op == "bn_train":
            return lambda: lib.check(L.miopenBatchNormalizationForwardTraining(
                lib.handle, L.miopenBNSpatial, one, zero, xd, p(t["x"]), yd, p(t["y"]), pd, p(t["scale"]),
                p(t["bias"]), 0.1, p(t["run_mean"]), p(t["run_var"]), 1e-5, p(t["save_mean"]), p(t["save_inv"])))
        dyd, dxd = lib.desc(t["dy"]), lib.desc(t["dx"])
        return lambda: lib.check(L.miopenBatchNormalizationBackward(
            lib.handle, L.miopenBNSpatial, one, zero, one, zero, xd, p(t["x"]), dyd, p(t["dy"]), dxd, p(t["dx"]), pd,
            p(t["scale"]), p(t["dscale"]), p(t["dbias"]), 1e-5, p(t["mean"]), p(t["inv"])))
    wd, sd = lib.desc(t["scale"]), lib.desc(t["gn_mean"])
    groups = t["groups"]
    if op == "gn_bwd":
        dyd, dxd = lib.desc(t["dy"]), lib.desc(t["dx"])
        return lambda: lib.check(L.miopenBNGroupNormBackward(
            lib.handle, L.MIOPEN_WEIGHT_BIAS, xd, p(t["x"]), dyd, p(t["dy"]), wd, p(t["scale"]), wd, p(t["bias"]),
            sd, p(t["gn_mean"]), sd, p(t["gn_rstd"]), groups, L.miopenBNActivationNone, 1.0, dxd, p(t["dx"]), wd,
            p(t["dscale"]), wd, p(t["dbias"])))
    activation = L.miopenBNActivationSwish if op == "gn_fwd_swish" else L.miopenBNActivationNone
    return lambda: lib.check(L.miopenBNGroupNormForwardActivation(
        lib.handle, L.MIOPEN_WEIGHT_BIAS, xd, p(t["x"]), wd, p(t["scale"]), wd, p(t["bias"]), groups, 1e-5,
        activation, 1.0, yd, p(t["y"]), sd, p(t["out_mean"]), sd, p(t["out_rstd"])))


def tensors(shape, layout, groups):
    rng = np.random.default_rng(0)
    c = shape[1]
    t = {
        "x": in_layout((rng.standard_normal(shape) + 0.5).astype(np.float32), layout),
        "dy": in_layout(rng.standard_normal(shape).astype(np.float32), layout),
    }
    t["y"], t["dx"] = in_layout(np.empty(shape, np.float32), layout), in_layout(np.empty(shape, np.float32), layout)
    for name in ("scale", "bias", "mean", "var", "inv", "run_mean", "run_var", "save_mean", "save_inv", "dscale",
                 "dbias"):
        t[name] = (rng.random(c) + 0.5).astype(np.float32)
    t["groups"] = groups
    for name in ("gn_mean", "gn_rstd", "out_mean", "out_rstd"):
        t[name] = (rng.random((shape[0], groups)) + 0.5).astype(np.float32)
    return t


def main(argv):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("old")
    parser.add_argument("new")
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--ops", default=",".join(BN_OPS + GN_OPS))
    parser.add_argument("--shapes", help="comma list such as 32x64x56x56,2x320x64x64 (default: the bench's)")
    args = parser.parse_args(argv)
    os.environ["MIOPEN_BN_NUM_THREADS"] = str(args.threads)  # read when each pool starts

    from bench_shapes import GN_GROUPS, cpu_default_shapes, group_norm_shapes, quick_shapes
    from bench_timing import CpuTimer
    from miopen_bn import cdef

    ffi = cdef.header_ffi()
    libs = {"old": Lib(ffi, args.old), "new": Lib(ffi, args.new)}
    ops = args.ops.split(",")
    bn_shapes = [s for s in (quick_shapes("cpu") if args.quick else cpu_default_shapes()) if len(s) == 4]
    rows = [(op, s, layout) for s in bn_shapes for layout in ("nchw", "nhwc") for op in ops if op in BN_OPS]
    rows += [(op, s, layout) for s in group_norm_shapes(args.quick) for layout in ("nchw", "nhwc")
             for op in ops if op in GN_OPS]
    if args.shapes:
        wanted = {tuple(int(n) for n in text.split("x")) for text in args.shapes.split(",")}
        rows = [row for row in rows if row[1] in wanted] + [
            (op, s, layout) for s in wanted - {row[1] for row in rows} for layout in ("nchw", "nhwc")
            for op in ops if op in BN_OPS]
    timer = CpuTimer()
    times = {row: {"old": [], "new": []} for row in rows}
    for r in range(args.rounds):
        for row in rows:
            op, shape, layout = row
            t = tensors(shape, layout, GN_GROUPS)
            named = {name: [calls_for(lib, op, t)] for name, lib in libs.items()}
            if r % 2:  # the order within a block pair alternates from round to round
                named = dict(reversed(list(named.items())))
            for name, (median, _) in timer.alternating_us(named).items():
                times[row][name].append(median)
        print(f"round {r + 1} of {args.rounds} done", file=sys.stderr, flush=True)

    def geomean(values):
        return math.exp(sum(math.log(v) for v in values) / len(values))

    print("op | shape | layout | old_us | new_us | old/new")
    ratios, noise = {}, []
    for row in rows:
        op, shape, layout = row
        old, new = statistics.median(times[row]["old"]), statistics.median(times[row]["new"])
        ratios.setdefault(op, []).append(old / new)
        olds = times[row]["old"]
        noise.append(max(olds) / min(olds))
        print(f"{op} | {'x'.join(map(str, shape))} | {layout} | {old:.1f} | {new:.1f} | {old / new:.3f}")
    every = [v for values in ratios.values() for v in values]
    print(f"\ngeomean old/new (> 1: new faster): {geomean(every):.3f} over {len(every)} rows "
          f"(min {min(every):.2f}, max {max(every):.2f})")
    for op, values in ratios.items():
        print(f"  {op:13s} {geomean(values):.3f} ({len(values)} rows, min {min(values):.2f}, max {max(values):.2f})")
    print(f"noise: old's spread across {args.rounds} rounds (max/min per row): median {statistics.median(noise):.2f}, "
          f"90th percentile {sorted(noise)[int(0.9 * (len(noise) - 1))]:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
