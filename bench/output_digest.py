#!/usr/bin/env python3
"""Bitwise comparison of two builds of the library on the CPU backend.

    python bench/output_digest.py OLD.so NEW.so [--quick]

Runs a fixed set of calls (every batch-norm, split-phase and group-norm op;
float32, float16, bfloat16 and float64; packed, channels-last, padded,
strided and mixed layouts; spatial and per-activation; blended, in place,
with and without fused activations and saved statistics) in fresh
processes, one per library and environment (thread counts 1, 2 and 3; the
last-level cache as reported and shrunk so that small tensors take the
streamed and fused paths of large ones), hashes every output of every call,
and reports how many (environment, call) digests there are and which ones
differ.  A refactor of the CPU kernels must leave them all identical.

With --worker it is that child process: it prints one "name digest" line
per call for the library that MIOPEN_BN_LIBRARY names.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ENVIRONMENTS = (  # (label, MIOPEN_BN_NUM_THREADS, MIOPEN_BN_CPU_CACHE_BYTES or None)
    ("t1", "1", None),
    ("t2", "2", None),
    ("t3", "3", None),
    ("t2-cache64k", "2", "65536"),
    ("t1-cache256k", "1", "262144"),
)

BN_SHAPES = (
    (8, 24, 18, 18),  # parallel, fused NCHW units
    (2, 3, 150, 150),  # runs longer than a task: pieces
    (4, 16, 5, 5),  # serial
    (3, 2500, 2, 2),  # channels-last rows over several feature blocks
    (64, 40),  # a fully connected layer's
    (2, 4, 6, 10, 12),  # rank 5
)
GN_SHAPES = (((4, 16, 24, 24), 4), ((2, 6, 5, 7), 3), ((2, 32, 9, 9), 8), ((3, 12, 40, 40), 2))
LAYOUTS = ("nchw", "nhwc", "padded", "strided", "nhwc_padded", "mixed")
ACTIVATIONS = (("elu", (1.0, 0.0, 0.0)), ("leakyrelu", (0.1, 0.0, 0.0)), ("clippedrelu", (2.0, 0.0, 0.0)),
               ("logistic", (0.0, 0.0, 0.0)), ("power", (1.0, 0.5, 2.0)))


def worker(quick: bool) -> None:
    import ml_dtypes
    import numpy as np

    import miopen_bn as bn
    from miopen_bn import reference

    dtypes = {"fp32": np.float32, "fp64": np.float64, "fp16": np.float16, "bf16": ml_dtypes.bfloat16}
    handle = bn.Handle(backend="cpu")

    def lay(values, layout):
        """values (float64, NC...) in dtype and layout, as a view."""
        if values.ndim < 3 or layout == "nchw":
            return np.ascontiguousarray(values)
        if layout == "nhwc":
            perm = (0,) + tuple(range(2, values.ndim)) + (1,)
            inverse = tuple(np.argsort(perm))
            return np.ascontiguousarray(values.transpose(perm)).transpose(inverse)
        if layout == "padded":  # the last dim padded by 3
            big = np.zeros(values.shape[:-1] + (values.shape[-1] + 3,), values.dtype)
            big[..., : values.shape[-1]] = values
            return big[..., : values.shape[-1]]
        if layout == "strided":  # every other element of the last dim
            big = np.zeros(values.shape[:-1] + (2 * values.shape[-1],), values.dtype)
            big[..., ::2] = values
            return big[..., ::2]
        if layout == "nhwc_padded":  # channels last, the W dim padded by 2
            perm = (0,) + tuple(range(2, values.ndim)) + (1,)
            inverse = tuple(np.argsort(perm))
            t = values.transpose(perm)
            big = np.zeros(t.shape[:-2] + (t.shape[-2] + 2, t.shape[-1]), values.dtype)
            big[..., : t.shape[-2], :] = t
            return big[..., : t.shape[-2], :].transpose(inverse)
        raise ValueError(layout)

    def values(rng, shape, dtype, offset=1.5):
        return (rng.standard_normal(shape) * 2.0 + offset).astype(dtype)

    def data(rng, shape, dtype, layout, offset=1.5):
        return lay(values(rng, shape, dtype, offset), layout)

    def emit(name, *outputs):
        sha = hashlib.sha256()
        for out in outputs:
            if out is None:
                sha.update(b"none")
                continue
            a = np.asarray(out)
            # -0.0 as 0.0: an exact zero's sign can depend on where the
            # tensors lie (a clipped-ReLU backward's all-zero dx; RESULTS.md).
            a = np.where(a == 0, np.zeros_like(a), a) if a.dtype.kind == "f" or "float" in str(a.dtype) else a
            sha.update(str((a.dtype, a.shape)).encode())
            sha.update(np.ascontiguousarray(a).view(np.uint8).tobytes())
        print(name, sha.hexdigest(), flush=True)

    def guarded(name, fn):
        try:
            emit(name, *fn())
        except Exception as error:  # an error is an outcome too
            print(name, "error:" + type(error).__name__ + ":" + str(error).replace(" ", "_")[:80], flush=True)

    shapes = BN_SHAPES[:3] if quick else BN_SHAPES
    for shape in shapes:
        for dname, dtype in dtypes.items():
            for layout in LAYOUTS:
                for mode in ("spatial", "per_activation"):
                    if quick and (dname in ("bf16",) or layout in ("strided", "mixed")):
                        continue
                    tag = f"{'x'.join(map(str, shape))}-{dname}-{layout}-{mode}"
                    rng = np.random.default_rng(sum(map(ord, tag)))
                    out_layout = "nhwc" if layout == "mixed" else layout
                    in_layout = "nchw" if layout == "mixed" else layout
                    pshape = reference.param_shape(shape, mode)[1:] if mode != "spatial" else (shape[1],)
                    pdtype = np.float64 if dname == "fp64" else np.float32
                    scale = (rng.standard_normal(pshape) + 1.0).astype(pdtype)
                    bias = rng.standard_normal(pshape).astype(pdtype)
                    mean = (rng.standard_normal(pshape) + 1.5).astype(pdtype)
                    var = (rng.random(pshape) * 3.0 + 0.5).astype(pdtype)
                    x_values, dy_values = values(rng, shape, dtype), values(rng, shape, dtype, 0.0)
                    x, dy = lay(x_values, in_layout), lay(dy_values, out_layout)
                    dy32 = data(rng, shape, np.float32, out_layout, 0.0)
                    prior = values(rng, shape, dtype)

                    def fresh_out():  # a new output holding the prior, in the output's layout
                        return lay(prior.copy(), out_layout)

                    kw = dict(mode=mode, handle=handle)

                    def train(**extra):
                        rm, rv = mean.copy(), var.copy()
                        y = extra.pop("y", None)
                        out = bn.batchnorm_forward_training(x, scale, bias, running_mean=rm, running_var=rv, y=y,
                                                            **kw, **extra)
                        return (*out, rm, rv)

                    guarded(f"train-{tag}", lambda: train())
                    guarded(f"train-blend-{tag}", lambda: train(alpha=0.75, beta=0.5, y=fresh_out()))
                    guarded(f"train-eps-{tag}", lambda: train(epsilon=1e-2, exp_avg_factor=0.3, save_stats=False))
                    for act, params in ACTIVATIONS[: 2 if quick else None]:
                        guarded(f"train-{act}-{tag}", lambda: train(activation=act, activation_params=params))
                    if layout in ("nchw", "nhwc"):
                        guarded(f"train-inplace-{tag}", lambda: (lambda xc: (*bn.batchnorm_forward_training(
                            xc, scale, bias, y=xc, alpha=0.75, beta=0.5, **kw), xc))(lay(x_values.copy(), layout)))

                    guarded(f"infer-{tag}", lambda: (bn.batchnorm_forward_inference(x, scale, bias, mean, var, **kw),))
                    guarded(f"infer-inv-{tag}", lambda: (bn.batchnorm_forward_inference(
                        x, scale, bias, mean, var, inverse_variance=True, **kw),))
                    guarded(f"infer-blend-{tag}", lambda: (bn.batchnorm_forward_inference(
                        x, scale, bias, mean, var, alpha=0.5, beta=0.25, y=fresh_out(), **kw),))
                    guarded(f"infer-batch-{tag}", lambda: (bn.batchnorm_forward_inference(x, scale, bias, **kw),))
                    for act, params in ACTIVATIONS[: 2 if quick else None]:
                        guarded(f"infer-{act}-{tag}", lambda: (bn.batchnorm_forward_inference(
                            x, scale, bias, mean, var, activation=act, activation_params=params, **kw),))

                    try:
                        _, smean, sinv = bn.batchnorm_forward_training(x, scale, bias, **kw)
                    except Exception:
                        smean = sinv = None
                    guarded(f"bwd-saved-{tag}", lambda: bn.batchnorm_backward(
                        x, dy, scale, saved_mean=smean, saved_inv_std=sinv, **kw))
                    guarded(f"bwd-recompute-{tag}", lambda: bn.batchnorm_backward(x, dy, scale, **kw))
                    guarded(f"bwd-dy32-{tag}", lambda: bn.batchnorm_backward(
                        x, dy32, scale, saved_mean=smean, saved_inv_std=sinv, **kw))
                    guarded(f"bwd-dy32-recompute-{tag}", lambda: bn.batchnorm_backward(x, dy32, scale, **kw))
                    guarded(f"bwd-blend-{tag}", lambda: bn.batchnorm_backward(
                        x, dy, scale, alpha_data=0.75, beta_data=0.5, alpha_param=0.5, beta_param=0.25,
                        dx=fresh_out(), dscale=scale.copy(), dbias=bias.copy(), **kw))
                    for act, params in ACTIVATIONS[: 2 if quick else None]:
                        guarded(f"bwd-{act}-saved-{tag}", lambda: bn.batchnorm_backward(
                            x, dy, scale, saved_mean=smean, saved_inv_std=sinv, bias=bias, activation=act,
                            activation_params=params, **kw))
                        guarded(f"bwd-{act}-recompute-{tag}", lambda: bn.batchnorm_backward(
                            x, dy, scale, bias=bias, activation=act, activation_params=params, **kw))
                    if layout in ("nchw", "nhwc"):
                        guarded(f"bwd-inplace-{tag}", lambda: (lambda g: (*bn.batchnorm_backward(
                            x, g, scale, dx=g, alpha_data=0.75, beta_data=0.5, **kw), g))(lay(dy_values.copy(), layout)))

                    def split():
                        count, lmean, m2 = bn.batchnorm_local_statistics(x, mode=mode, handle=handle)
                        half = (np.stack([count, count]), np.stack([lmean, lmean * 0.5]), np.stack([m2, m2 * 2]))
                        rm, rv = mean.astype(np.float32), var.astype(np.float32)
                        gmean, ginv = bn.batchnorm_merge_statistics(*half, running_mean=rm, running_var=rv,
                                                                    handle=handle)
                        ps = [a.astype(gmean.dtype) for a in (scale, bias)]
                        yn = bn.batchnorm_forward_normalize(x, *ps, gmean, ginv, alpha=0.75, beta=0.5, y=fresh_out(),
                                                            **kw)
                        sdy, sdx, dsc, dbi = bn.batchnorm_backward_reduce(x, dy, gmean, ginv, **kw)
                        dx = bn.batchnorm_backward_elementwise(x, dy, ps[0], gmean, ginv, sdy, sdx, count * 2, **kw)
                        return count, lmean, m2, gmean, ginv, rm, rv, yn, sdy, sdx, dsc, dbi, dx

                    guarded(f"split-{tag}", split)

    for shape, groups in GN_SHAPES[:2] if quick else GN_SHAPES:
        for dname, dtype in dtypes.items():
            for layout in ("nchw", "nhwc", "padded"):
                tag = f"{'x'.join(map(str, shape))}g{groups}-{dname}-{layout}"
                rng = np.random.default_rng(sum(map(ord, tag)))
                x = data(rng, shape, dtype, layout)
                dy = data(rng, shape, dtype, layout, 0.0)
                weight = (rng.standard_normal(shape[1]) + 1.0).astype(np.float32)
                bias = rng.standard_normal(shape[1]).astype(np.float32)
                for act in (None, "swish"):
                    for affine in (True, False):
                        w, b = (weight, bias) if affine else (None, None)
                        name = f"gn-{act}-{'affine' if affine else 'plain'}-{tag}"
                        fwd = []

                        def forward():
                            fwd[:] = bn.groupnorm_forward(x, groups, w, b, activation=act, swish_beta=1.5,
                                                          epsilon=1e-3, handle=handle)
                            return fwd

                        guarded(f"{name}-fwd", forward)
                        if fwd:
                            guarded(f"{name}-bwd", lambda: bn.groupnorm_backward(
                                x, dy, groups, w, fwd[1], fwd[2], bias=b, activation=act, swish_beta=1.5,
                                handle=handle))


def run_library(library: str, quick: bool) -> dict:
    """The library's digests, kept beside it (LIBRARY.digests[-quick].json)
    while the library and this script stay unchanged."""
    cache = f"{library}.digests{'-quick' if quick else ''}.json"
    sources = (library, os.path.abspath(__file__))
    if os.path.exists(cache) and all(os.path.getmtime(cache) > os.path.getmtime(p) for p in sources):
        with open(cache) as f:
            return json.load(f)
    results = {}
    for label, threads, cache_bytes in ENVIRONMENTS:
        env = dict(os.environ, MIOPEN_BN_LIBRARY=os.path.abspath(library), MIOPEN_BN_NUM_THREADS=threads)
        env.pop("MIOPEN_BN_CPU_CACHE_BYTES", None)
        if cache_bytes:
            env["MIOPEN_BN_CPU_CACHE_BYTES"] = cache_bytes
        args = [sys.executable, os.path.abspath(__file__), "--worker"] + (["--quick"] if quick else [])
        out = subprocess.run(args, env=env, capture_output=True, text=True, check=True).stdout
        for line in out.splitlines():
            name, digest = line.split(" ", 1)
            results[f"{label} {name}"] = digest
    with open(cache, "w") as f:
        json.dump(results, f)
    return results


def main(argv: list) -> int:
    quick = "--quick" in argv
    argv = [a for a in argv if a != "--quick"]
    if argv[:1] == ["--worker"]:
        worker(quick)
        return 0
    if len(argv) != 2:
        sys.exit(__doc__)
    old, new = (run_library(path, quick) for path in argv)
    differ = sorted(k for k in old if old[k] != new.get(k))
    missing = sorted(set(old) ^ set(new))
    errors = sum(1 for v in old.values() if v.startswith("error:"))
    print(f"{len(old)} digests ({len(ENVIRONMENTS)} environments x {len(old) // len(ENVIRONMENTS)} calls, "
          f"{errors} of them refused calls), {len(differ)} differ, {len(missing)} missing")
    for key in differ:
        print("  differs:", key, "(refused before)" if old[key].startswith("error:") else "")
    for key in missing[:20]:
        print("  missing:", key)
    return 1 if differ or missing else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
