#!/usr/bin/env python3
"""Per-call kernel times from CUPTI (torch.profiler): ours, torch.compile and
cuDNN, with the L2 flushed before each call.

    python bench/kernel_times.py bn_train:2x256x14x14:fp16:nchw ...

A case is op:NxCxHxW:dtype:layout with op bn_train, bn_bwd, bn_infer, gn_fwd,
gn_fwd_swish or gn_bwd (group norm with G = 32, its affine parameters in x's
dtype as in the bench).  Each
line names the kernels one call launches (how many per call, median us) and
their summed device time: what is left of the bench's event time once the
launch and event overhead are taken away.
"""
import os
import statistics
import sys

import torch
from torch.profiler import ProfilerActivity, profile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench_compiled as compiled  # noqa: E402
import miopen_bn as mbn  # noqa: E402
from bench_data import EPSILON, EXP_AVG_FACTOR  # noqa: E402
from bench_shapes import GN_GROUPS, parse_shape  # noqa: E402

DTYPES = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}
REPS = 20
# Launched by this script between calls, not by the call itself.
NOT_THE_CALL = ("fill", "spin_kernel", "sleep", "Memset", "Memcpy")


def calls(case, handle):
    """{who: zero-argument call} for one case."""
    op, shape, dtype, layout = case.split(":")
    shape = parse_shape(shape)
    channels = shape[1]
    x = torch.randn(shape, device="cuda", dtype=DTYPES[dtype])
    if layout == "nhwc":
        x = x.contiguous(memory_format=torch.channels_last)
    w = torch.rand(channels, device="cuda") + 0.5
    b = torch.randn(channels, device="cuda")
    rm = torch.zeros(channels, device="cuda")
    rv = torch.ones(channels, device="cuda")
    dy, y, dx = torch.randn_like(x), torch.empty_like(x), torch.empty_like(x)
    _, sm, si = mbn.batchnorm_forward_training(x, w, b, y=y, handle=handle)
    if op == "bn_train":
        fn = torch.compile(compiled.bn_train, dynamic=False, fullgraph=True)
        return {"ours": lambda: mbn.batchnorm_forward_training(x, w, b, running_mean=rm, running_var=rv, y=y,
                                                              handle=handle),
                "cudnn": lambda: torch.cudnn_batch_norm(x, w, b, rm, rv, True, EXP_AVG_FACTOR, EPSILON),
                "compiled": lambda: fn(x, w, b, rm, rv)}
    if op == "bn_bwd":
        fn = torch.compile(compiled.bn_bwd, dynamic=False, fullgraph=True)
        _, csm, csi, reserve = torch.cudnn_batch_norm(x, w, b, rm, rv, True, EXP_AVG_FACTOR, EPSILON)
        return {"ours": lambda: mbn.batchnorm_backward(x, dy, w, saved_mean=sm, saved_inv_std=si, dx=dx,
                                                      handle=handle),
                "cudnn": lambda: torch.ops.aten.cudnn_batch_norm_backward(x, dy, w, rm, rv, csm, csi, EPSILON,
                                                                          reserve),
                "compiled": lambda: fn(dy, x, w, rm, rv, sm, si)}
    if op == "bn_infer":
        fn = torch.compile(compiled.bn_infer, dynamic=False, fullgraph=True)
        return {"ours": lambda: mbn.batchnorm_forward_inference(x, w, b, rm, rv, y=y, handle=handle),
                "compiled": lambda: fn(x, w, b, rm, rv)}
    if op in ("gn_fwd", "gn_fwd_swish"):
        gw, gb = w.to(x.dtype), b.to(x.dtype)
        swish = op == "gn_fwd_swish"
        fn = torch.compile(compiled.gn_fwd_swish if swish else compiled.gn_fwd, dynamic=False, fullgraph=True)
        return {"ours": lambda: mbn.groupnorm_forward(x, GN_GROUPS, gw, gb, activation="swish" if swish else None,
                                                     y=y, handle=handle),
                "compiled": lambda: fn(x, GN_GROUPS, gw, gb)}
    if op == "gn_bwd":
        gw, gb = w.to(x.dtype), b.to(x.dtype)
        _, mean, rstd = mbn.groupnorm_forward(x, GN_GROUPS, gw, gb, y=y, handle=handle)
        tmean, trstd = compiled.torch_group_statistics(x, gw, gb, GN_GROUPS)
        fn = torch.compile(compiled.gn_bwd, dynamic=False, fullgraph=True)
        return {"ours": lambda: mbn.groupnorm_backward(x, dy, GN_GROUPS, gw, mean, rstd, dx=dx, handle=handle),
                "compiled": lambda: fn(dy, x, GN_GROUPS, tmean, trstd, gw)}
    raise SystemExit(f"unknown op in {case!r}")


def kernel_times(call, flush):
    """{kernel name: [device us of each launch]} over REPS calls."""
    for _ in range(3):
        call()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for i in range(REPS):
            flush.fill_(i & 0x7F)
            torch.cuda._sleep(200_000)  # the call's launches queue behind it
            call()
        torch.cuda.synchronize()
    times = {}
    for event in prof.events():
        if event.device_type.name != "CUDA" or any(s.lower() in event.name.lower() for s in NOT_THE_CALL):
            continue
        times.setdefault(event.name, []).append(event.device_time)
    return times


def main(cases):
    flush = torch.empty(256 << 20, dtype=torch.uint8, device="cuda")
    with mbn.Handle(backend="gpu", stream=torch.cuda.current_stream()) as handle:
        for case in cases:
            for who, call in calls(case, handle).items():
                try:
                    times = kernel_times(call, flush)
                except Exception as error:  # a compile failure is the row's result, not the run's end
                    print(f"{case:34s} {who:9s} FAILED {type(error).__name__}: {str(error).splitlines()[0][:120]}")
                    continue
                total = sum(statistics.median(t) * len(t) / REPS for t in times.values())
                kernels = "; ".join(f"{name[:70]} x{len(t) / REPS:.0f} {statistics.median(t):.2f}"
                                    for name, t in times.items())
                print(f"{case:34s} {who:9s} kernel_us {total:6.2f} | {kernels}", flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
