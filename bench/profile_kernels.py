#!/usr/bin/env python3
"""Runs chosen batch-norm calls once each, between cudaProfilerStart/Stop, so
that Nsight Compute profiles exactly those kernels:

    ncu --profile-from-start off --clock-control none --csv --metrics ... \\
        python bench/profile_kernels.py bn_train:32x1024x14x14:fp32:nchw ...

A case is op:NxCxHxW:dtype:layout, op one of bn_infer, bn_train, bn_bwd,
gn_fwd, gn_fwd_swish, gn_bwd (group norm with G = 32).
Each call is made once outside the profiled range first (module load, scratch
growth), then once inside it, with a marker line on stdout naming the case.
"""
import sys

import torch

import miopen_bn as mbn
from bench_shapes import GN_GROUPS, parse_shape

DTYPES = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}


def make_call(case, handle):
    op, shape, dtype, layout = case.split(":")
    shape = parse_shape(shape)
    x = torch.randn(shape, device="cuda", dtype=DTYPES[dtype])
    if layout == "nhwc":
        x = x.contiguous(memory_format=torch.channels_last)
    channels = shape[1]
    scale = torch.rand(channels, device="cuda") + 0.5
    bias = torch.randn(channels, device="cuda")
    mean, var = torch.randn(channels, device="cuda"), torch.rand(channels, device="cuda") + 0.5
    y = torch.empty_like(x)
    if op == "bn_infer":
        return lambda: mbn.batchnorm_forward_inference(x, scale, bias, mean, var, y=y, handle=handle)
    if op == "bn_train":
        return lambda: mbn.batchnorm_forward_training(
            x, scale, bias, running_mean=mean, running_var=var, y=y, handle=handle)
    if op == "bn_bwd":
        dy = torch.randn_like(x)
        _, saved_mean, saved_inv = mbn.batchnorm_forward_training(x, scale, bias, y=y, handle=handle)
        dx = torch.empty_like(x)
        return lambda: mbn.batchnorm_backward(
            x, dy, scale, saved_mean=saved_mean, saved_inv_std=saved_inv, dx=dx, handle=handle)
    if op in ("gn_fwd", "gn_fwd_swish"):
        activation = "swish" if op == "gn_fwd_swish" else None
        return lambda: mbn.groupnorm_forward(x, GN_GROUPS, scale, bias, activation=activation, y=y, handle=handle)
    if op == "gn_bwd":
        dy = torch.randn_like(x)
        _, mean, rstd = mbn.groupnorm_forward(x, GN_GROUPS, scale, bias, handle=handle)
        dx = torch.empty_like(x)
        return lambda: mbn.groupnorm_backward(x, dy, GN_GROUPS, scale, mean, rstd, dx=dx, handle=handle)
    raise SystemExit(f"unknown op in {case!r}")


def main(cases):
    with mbn.Handle(backend="gpu") as handle:
        calls = [(case, make_call(case, handle)) for case in cases]
        for _, call in calls:
            call()
        torch.cuda.synchronize()
        for case, call in calls:
            print(f"case {case}", flush=True)
            torch.cuda.profiler.start()
            call()
            torch.cuda.synchronize()
            torch.cuda.profiler.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
