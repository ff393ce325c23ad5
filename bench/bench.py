#!/usr/bin/env python3
"""miopen-bn's bench: our batch norm and group norm against PyTorch's, side by side.

    python bench/bench.py --backend gpu|cpu [--quick] [--ops ...] [--json PATH]

In one process, on the same tensors, it times our library and the anchors:
on the GPU PyTorch's F.batch_norm with cuDNN on and with cuDNN off ("torch
native"), on the CPU PyTorch's CPU F.batch_norm at 2 threads (ours at 2
threads too); for group norm F.group_norm (and F.silu(F.group_norm(...))
for the fused swish), which has no cuDNN path; on both, torch.compile of the
same ops (bench_compiled.py; --no-compiled leaves it out).  Each op's output,
ours and the compiled anchor's, is checked against the float64 reference
before it is timed.  Times never fail the run; a wrong result shows as
verified = false.  The header records the launch floor: an empty kernel
timed as the rows are; on the GPU each row also records copy_us, a plain
PyTorch op moving the row's tensor bytes, timed as the anchors are (the
bound bench/targets.py sets on each target).  Output: one table on stdout,
a JSON file, a Markdown section for bench/RESULTS.md and, with matplotlib,
a roofline plot.
"""
import argparse
import datetime
import math
import os
import platform
import re
import sys
import time
import traceback

BENCH_DIR = os.path.dirname(os.path.abspath(__file__))
BN_OPS = ("bn_infer", "bn_train", "bn_bwd")
GN_OPS = ("gn_fwd", "gn_fwd_swish", "gn_bwd")
OPS = BN_OPS + GN_OPS
LAYOUTS = ("nchw", "nhwc")


class DeviceBroken(RuntimeError):
    """The GPU context is unusable; later measurements would be meaningless."""


def parse_args(argv):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backend", choices=("gpu", "cpu"), required=True)
    parser.add_argument("--quick", action="store_true", help="a handful of shapes")
    parser.add_argument("--shapes", help="comma list of shapes such as 32x512x7x7 "
                        "(batch norm's, instead of the backend's default list)")
    parser.add_argument("--json", help="output JSON (default bench/results/<device>.json)")
    parser.add_argument("--markdown", help="Markdown section (default: the JSON path, .md)")
    parser.add_argument("--plot", help="roofline PNG (default bench/roofline_<device>.png)")
    parser.add_argument("--dtypes", help="comma list of fp32,fp16,bf16 "
                        "(default: all on the GPU, fp32 on the CPU)")
    parser.add_argument("--layouts", default="nchw,nhwc", help="comma list of nchw,nhwc")
    parser.add_argument("--ops", default=",".join(OPS), help="comma list of " + ",".join(OPS))
    parser.add_argument("--threads", type=int, default=2, help="CPU threads (ours and torch)")
    parser.add_argument("--budget-s", type=float, default=None,
                        help="stop starting new cases after this many seconds")
    parser.add_argument("--no-verify", action="store_true", help="skip the reference checks")
    parser.add_argument("--gn-shapes", help="group norm's shapes: a comma list of groups (all, sd, unet, "
                        "vae) or of shapes such as 2x320x64x64 (default: all on the GPU, sd,vae on the CPU)")
    parser.add_argument("--no-compiled", action="store_true",
                        help="leave out the torch.compile anchor (no compiles)")
    parser.add_argument("--compiled-budget-s", type=float, default=None,
                        help="seconds of torch.compile compiles for the whole run; rows past it "
                        "record that they were left out")
    parser.add_argument("--compile-workers", type=int, default=None,
                        help="processes that pre-compile the compiled anchor's rows before any "
                        "timing (default: most cores on the GPU, 0 on the CPU)")
    return parser.parse_args(argv)


def _split(text, allowed, what):
    items = [item.strip() for item in text.split(",") if item.strip()]
    for item in items:
        if item not in allowed:
            raise SystemExit(f"unknown {what} {item!r}; choose from {', '.join(allowed)}")
    return items


def _slug(text):
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")


def cpu_model_name():
    try:
        with open("/proc/cpuinfo") as handle:
            for line in handle:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


class Environment:
    """The backend-specific pieces: library handle, timer, array conversion,
    anchors."""

    def __init__(self, args, torch, miopen_bn):
        self.torch = torch
        self.mbn = miopen_bn
        self.backend = args.backend
        if args.backend == "gpu":
            from bench_timing import GpuTimer
            if not torch.cuda.is_available():
                raise SystemExit("bench: --backend gpu but torch sees no CUDA device")
            if not miopen_bn.lib.miopenBNHasGpuSupport():
                raise SystemExit("bench: --backend gpu but libmiopen_bn was built without a GPU")
            self.device = "cuda"
            props = torch.cuda.get_device_properties(0)
            self.device_name = torch.cuda.get_device_name(0)
            self.l2_bytes = int(getattr(props, "L2_cache_size", 0) or (50 << 20))
            self.machine_note = (f"{props.multi_processor_count} SMs, L2 "
                                 f"{self.l2_bytes >> 20} MiB, "
                                 f"{props.total_memory / 2**30:.0f} GiB; "
                                 f"CUDA {torch.version.cuda}, cuDNN "
                                 f"{torch.backends.cudnn.version()}")
            self.timer = GpuTimer(torch, self.l2_bytes)
            self.slug = _slug(self.device_name)
            self.anchor_variants = (("cudnn", True), ("torch_native", False))
        else:
            from bench_timing import CpuTimer
            torch.set_num_threads(args.threads)
            self.device = "cpu"
            self.device_name = cpu_model_name()
            self.l2_bytes = 0
            self.machine_note = (f"{os.cpu_count()} logical CPUs, {args.threads} threads "
                                 f"(torch.set_num_threads, MIOPEN_BN_NUM_THREADS)")
            self.timer = CpuTimer()
            self.slug = "cpu-" + _slug(self.device_name)[:40] + f"-{args.threads}t"
            self.anchor_variants = (("torch_native", None),)
        self.compiled = None
        if not args.no_compiled:
            from bench_compiled import CompiledAnchors
            self.compiled = CompiledAnchors(self.synchronize, args.compiled_budget_s)
            self.anchor_variants += (("compiled", None),)
        # On the GPU our work goes to torch's current stream, where the timing
        # events are recorded.
        stream = torch.cuda.current_stream() if args.backend == "gpu" else None
        self.handle = miopen_bn.Handle(backend=args.backend, stream=stream)

    def anchor_variants_for(self, op):
        """Group norm has no cuDNN path in PyTorch: its native kernels and
        torch.compile's."""
        if op in GN_OPS:
            return tuple(v for v in self.anchor_variants if v[0] != "cudnn")
        return self.anchor_variants

    def launch_floor(self):
        """{"us": time, "how": what was timed, ...}: the least a call can
        take through the same timer as the rows.  On the GPU an empty kernel,
        torch.cuda._sleep(0): one launch of a kernel that reads the clock
        and returns, with no arguments to marshal and no allocation, so the
        events see nothing but the launch (a 1-element torch op, timed too,
        adds the dispatcher's host work, which the timer hides anyway, and an
        elementwise kernel's index set-up).  On the CPU there is no launch:
        an empty Python call gives the timer's own floor."""
        timer = self.timer
        if self.backend != "gpu":
            return {"us": timer.device_us([lambda: None]),
                    "how": "an empty Python call (the CPU has no kernel launch)"}
        torch = self.torch
        one = torch.zeros(1, device="cuda")
        floor = {"one_element_op_us": timer.device_us([lambda: one.add_(1.0)])}
        if hasattr(torch.cuda, "_sleep"):
            floor.update(us=timer.device_us([lambda: torch.cuda._sleep(0)]),
                         how="empty kernel: torch.cuda._sleep(0)")
        else:
            floor.update(us=floor["one_element_op_us"], how="1-element torch add_ (no torch.cuda._sleep)")
        return floor

    def synchronize(self):
        if self.backend == "gpu":
            self.torch.cuda.synchronize()

    def raise_if_device_broken(self):
        """A sticky CUDA error (illegal address, ...) spoils every later
        measurement: stop then, keeping what was measured."""
        if self.backend != "gpu":
            return
        try:
            self.torch.cuda.synchronize()
        except Exception as error:
            raise DeviceBroken(f"the CUDA context is broken: {error}") from error

    def lib_array(self, tensor):
        """What our library receives for a torch tensor: the tensor itself on
        the GPU, a NumPy view of the same memory on the CPU."""
        if self.backend == "gpu":
            return tensor
        if tensor.dtype == self.torch.bfloat16:
            import ml_dtypes
            return tensor.view(self.torch.int16).numpy().view(ml_dtypes.bfloat16)
        return tensor.numpy()

    def as_torch(self, array):
        """Back from what the library returned (for the checks)."""
        if self.backend == "gpu" or isinstance(array, self.torch.Tensor):
            return array
        return self.torch.from_numpy(array)

    def anchor_context(self, flag):
        if flag is None:
            import contextlib
            return contextlib.nullcontext()
        return self.torch.backends.cudnn.flags(enabled=flag)

    def rotation_slots(self, tensor_bytes):
        """Copies of the inputs to rotate through, so that small tensors are
        fetched from memory at each repetition, not from L2."""
        if self.backend != "gpu" or tensor_bytes >= 2 * self.l2_bytes:
            return 1
        return max(1, min(8, math.ceil(3 * self.l2_bytes / max(tensor_bytes, 1))))


def bytes_min(op, numel, channels, dtype_size):
    """Each tensor read once and written once; batch norm's parameters
    (float32) counted, group norm's left out: 2B forward (x, y) and 3B
    backward (x, dy, dx) for B = the tensor's bytes."""
    if op in GN_OPS:
        return (3 if op == "gn_bwd" else 2) * numel * dtype_size
    param = 4 * channels
    if op == "bn_infer":  # x, y; scale, bias, mean, var
        return 2 * numel * dtype_size + 4 * param
    if op == "bn_train":  # x, y; scale, bias; running mean/var read+write; saved mean/invstd
        return 2 * numel * dtype_size + 8 * param
    return 3 * numel * dtype_size + 5 * param  # x, dy, dx; scale, saved x2; dscale, dbias


class Slot:
    """One rotation slot: its own copies of the inputs and its own outputs."""

    def __init__(self, env, x, dy):
        torch = env.torch
        from bench_data import poisoned_like
        self.x, self.dy = x.clone(), dy.clone()
        self.y = poisoned_like(torch, x)
        self.dx = poisoned_like(torch, dy)
        channels = x.shape[1]
        self.dscale = torch.full((channels,), float("nan"), device=x.device)
        self.dbias = torch.full((channels,), float("nan"), device=x.device)
        self.lib = {name: env.lib_array(getattr(self, name))
                    for name in ("x", "dy", "y", "dx", "dscale", "dbias")}


class CaseRunner:
    """Runs the ops of one (shape, dtype, layout) for ours and anchors."""

    def __init__(self, env, case, layout, verifier, ops):
        from bench_data import in_layout
        self.env, self.case, self.layout, self.verifier = env, case, layout, verifier
        torch = env.torch
        self.x = in_layout(torch, case.x, layout)
        self.dy = in_layout(torch, case.dy, layout)
        esize = self.x.element_size()
        self.slots = [Slot(env, self.x, self.dy)
                      for _ in range(env.rotation_slots(self.x.numel() * esize))]
        names = ("scale", "bias", "est_mean", "est_var", "saved_mean", "saved_inv_std")
        self.params = {name: getattr(case, name) for name in names}
        self.lib_params = {name: env.lib_array(value) for name, value in self.params.items()}
        self.running = (case.running_mean.clone(), case.running_var.clone())
        self.lib_running = tuple(env.lib_array(t) for t in self.running)
        from bench_shapes import GN_GROUPS
        self.groups = GN_GROUPS
        self.lib_group_stats = None
        if any(op in GN_OPS for op in ops):
            self.lib_group_stats = tuple(env.lib_array(t) for t in case.group_statistics(self.groups))
        self._gn_params = self._torch_group_stats = self._compiled_running = None
        if env.compiled is not None:
            env.compiled.new_case()

    # -- our library -------------------------------------------------------
    def ours_call(self, op, slot, running=None):
        """Our call on one slot; `running` replaces the shared running-stat
        buffers (library arrays) for bn_train."""
        from bench_data import EPSILON, EXP_AVG_FACTOR
        mbn, handle, lp, s = self.env.mbn, self.env.handle, self.lib_params, slot.lib
        if op in GN_OPS:
            return self.gn_ours_call(op, slot)
        if op == "bn_infer":
            return lambda: mbn.batchnorm_forward_inference(
                s["x"], lp["scale"], lp["bias"], lp["est_mean"], lp["est_var"],
                mode="spatial", epsilon=EPSILON, y=s["y"], handle=handle)
        if op == "bn_train":
            rm, rv = running or self.lib_running
            return lambda: mbn.batchnorm_forward_training(
                s["x"], lp["scale"], lp["bias"], mode="spatial", epsilon=EPSILON,
                exp_avg_factor=EXP_AVG_FACTOR, running_mean=rm, running_var=rv,
                save_stats=True, y=s["y"], handle=handle)
        return lambda: mbn.batchnorm_backward(
            s["x"], s["dy"], lp["scale"], saved_mean=lp["saved_mean"],
            saved_inv_std=lp["saved_inv_std"], mode="spatial", epsilon=EPSILON,
            dx=s["dx"], dscale=s["dscale"], dbias=s["dbias"], handle=handle)

    def gn_ours_call(self, op, slot):
        """Our group-norm call on one slot (dscale/dbias hold dweight/dbias)."""
        from bench_data import EPSILON
        mbn, handle, lp, s = self.env.mbn, self.env.handle, self.lib_params, slot.lib
        if op == "gn_bwd":
            mean, rstd = self.lib_group_stats
            return lambda: mbn.groupnorm_backward(
                s["x"], s["dy"], self.groups, lp["scale"], mean, rstd, dx=s["dx"],
                dweight=s["dscale"], dbias=s["dbias"], handle=handle)
        activation = "swish" if op == "gn_fwd_swish" else None
        return lambda: mbn.groupnorm_forward(
            s["x"], self.groups, lp["scale"], lp["bias"], epsilon=EPSILON, activation=activation,
            y=s["y"], handle=handle)

    def verify_ours(self, op):
        """One call on NaN-poisoned outputs, checked against the reference.
        Returns a list of failure messages (empty: verified)."""
        env, case = self.env, self.case
        fresh = Slot(env, self.x, self.dy)
        if op in ("gn_fwd", "gn_fwd_swish"):
            _, mean, rstd = self.ours_call(op, fresh)()
            env.synchronize()
            activation = "swish" if op == "gn_fwd_swish" else None
            return self.verifier.groupnorm_forward(case, self.groups, activation, fresh.y,
                                                   env.as_torch(mean), env.as_torch(rstd))
        if op == "gn_bwd":
            self.ours_call(op, fresh)()
            env.synchronize()
            return self.verifier.groupnorm_backward(case, self.groups, fresh.dx, fresh.dscale,
                                                    fresh.dbias)
        if op == "bn_infer":
            self.ours_call(op, fresh)()
            env.synchronize()
            return self.verifier.inference(case, fresh.y)
        if op == "bn_train":
            before = (case.running_mean.clone(), case.running_var.clone())
            running = tuple(t.clone() for t in before)
            call = self.ours_call(op, fresh, tuple(env.lib_array(t) for t in running))
            _, saved_mean, saved_inv_std = call()
            env.synchronize()
            return self.verifier.training(case, fresh.y, env.as_torch(saved_mean),
                                          env.as_torch(saved_inv_std), running[0], running[1],
                                          before[0], before[1])
        self.ours_call(op, fresh)()
        env.synchronize()
        return self.verifier.backward(case, fresh.dx, fresh.dscale, fresh.dbias)

    # -- PyTorch anchors ---------------------------------------------------
    def anchor_calls(self, op, key, flag):
        """Callables per slot, and a note naming the backward node PyTorch
        picked (it says whether cuDNN really ran)."""
        from bench_data import EPSILON, EXP_AVG_FACTOR
        torch = self.env.torch
        functional = torch.nn.functional
        p = self.params
        if key == "compiled":
            return self.compiled_calls(op), None
        if op in GN_OPS:
            return self.gn_anchor_calls(op, flag)
        if op == "bn_infer":
            return [lambda s=s: functional.batch_norm(s.x, p["est_mean"], p["est_var"],
                                                      p["scale"], p["bias"], False, 0.0, EPSILON)
                    for s in self.slots], None
        if op == "bn_train":
            rm, rv = (t.clone() for t in self.running)
            return [lambda s=s: functional.batch_norm(s.x, rm, rv, p["scale"], p["bias"], True,
                                                      EXP_AVG_FACTOR, EPSILON)
                    for s in self.slots], None
        return self._autograd_calls(flag, lambda xg, wg, bg: functional.batch_norm(
            xg, *(t.clone() for t in self.running), wg, bg, True, EXP_AVG_FACTOR, EPSILON))

    def gn_params(self):
        """Group norm's weight and bias for PyTorch: its CUDA group norm takes
        them only in x's type (it has no mixed-precision path, unlike batch
        norm), so they are cast once, outside the timed calls."""
        if self._gn_params is None:
            dtype = self.x.dtype
            self._gn_params = (self.params["scale"].to(dtype), self.params["bias"].to(dtype))
        return self._gn_params

    def gn_anchor_calls(self, op, flag):
        """F.group_norm, with F.silu after it for the fused swish; backward
        through autograd, as the batch-norm anchors."""
        from bench_data import EPSILON
        functional = self.env.torch.nn.functional
        groups = self.groups
        weight, bias = self.gn_params()
        if op != "gn_bwd":
            after = functional.silu if op == "gn_fwd_swish" else (lambda y: y)
            return [lambda s=s: after(functional.group_norm(s.x, groups, weight, bias, EPSILON))
                    for s in self.slots], None
        return self._autograd_calls(
            flag, lambda xg, wg, bg: functional.group_norm(xg, groups, wg, bg, EPSILON), (weight, bias))

    def _autograd_calls(self, flag, forward, params=None):
        """Backward anchors: forward(x, weight, bias) run once per slot with
        gradients on, then a callable per slot computing the gradients of x,
        weight and bias for the slot's dy; and the backward node's name.
        ``params`` is (weight, bias), by default the bench's float32 ones."""
        torch = self.env.torch
        weight, bias = params if params is not None else (self.params["scale"], self.params["bias"])
        calls, note = [], None
        with self.env.anchor_context(flag):
            for s in self.slots:
                xg = s.x.detach().requires_grad_(True)
                wg = weight.detach().clone().requires_grad_(True)
                bg = bias.detach().clone().requires_grad_(True)
                out = forward(xg, wg, bg)
                note = type(out.grad_fn).__name__
                calls.append(lambda out=out, xg=xg, wg=wg, bg=bg, dy=s.dy: torch.autograd.grad(
                    out, (xg, wg, bg), dy, retain_graph=True))
        return calls, note

    # -- the copy bound ----------------------------------------------------
    def copy_calls(self, op):
        """Per slot, a plain PyTorch op moving the row's tensor bytes and no
        more: forward ops read x and write y (y.copy_(x)), backward ops read x
        and dy and write dx (torch.add(x, dy, out=dx)), on the slot's own
        buffers, so dtype, shape, strides and rotation are the row's.  No
        kernel that reads those inputs and writes those outputs can beat it
        by much: targets.py turns its time into a bound on each target."""
        torch = self.env.torch
        if op in ("bn_bwd", "gn_bwd"):
            return [lambda s=s: torch.add(s.x, s.dy, out=s.dx) for s in self.slots]
        return [lambda s=s: s.y.copy_(s.x) for s in self.slots]

    # -- torch.compile anchor ----------------------------------------------
    def torch_group_stats(self):
        """PyTorch's own saved group-norm statistics for x (bench_compiled)."""
        if self._torch_group_stats is None:
            from bench_compiled import torch_group_statistics
            self._torch_group_stats = torch_group_statistics(self.x, *self.gn_params(), self.groups)
        return self._torch_group_stats

    def compiled_arguments(self, op, slot, running=None):
        """The compiled function's arguments for one slot (by
        bench_compiled.ARGUMENTS's names); `running` replaces bn_train's
        running statistics (by default its own copies, updated by every
        call as a model's buffers are)."""
        from bench_compiled import arguments
        if op == "bn_train" and running is None:
            if self._compiled_running is None:
                self._compiled_running = (self.case.running_mean.clone(), self.case.running_var.clone())
            running = self._compiled_running
        if running is None:  # read by bn_bwd only, which ignores them in training mode
            running = (self.case.running_mean, self.case.running_var)

        def value(name):
            if name in ("x", "dy"):
                return getattr(slot, name)
            if name == "groups":
                return self.groups
            if name in ("gn_weight", "gn_bias"):
                return self.gn_params()[name == "gn_bias"]
            if name in ("gn_mean", "gn_rstd"):
                return self.torch_group_stats()[name == "gn_rstd"]
            if name in ("running_mean", "running_var"):
                return running[name == "running_var"]
            return self.params[name]

        return arguments(op, value)

    def compiled_function(self, op):
        """The row's compiled callable (compiled on first request)."""
        key = (op, self.case.shape, self.case.dtype_name, self.layout)
        return self.env.compiled.get(key, op, self.compiled_arguments(op, self.slots[0]))

    def compiled_calls(self, op):
        function = self.compiled_function(op)[0]
        arguments = [self.compiled_arguments(op, s) for s in self.slots]
        return [lambda a=a: function(*a) for a in arguments]

    def verify_compiled(self, op, function):
        """The compiled op's outputs against the reference, as verify_ours
        (outputs it does not return, such as F.batch_norm's saved statistics,
        are not checked).  Returns the failure messages."""
        env, case, verifier = self.env, self.case, self.verifier
        if op == "bn_train":
            before = (case.running_mean.clone(), case.running_var.clone())
            running = tuple(t.clone() for t in before)
            y = function(*self.compiled_arguments(op, self.slots[0], running))
            env.synchronize()
            return verifier.training(case, y, None, None, running[0], running[1], before[0], before[1])
        out = function(*self.compiled_arguments(op, self.slots[0]))
        env.synchronize()
        if op == "bn_infer":
            return verifier.inference(case, out)
        if op == "bn_bwd":
            return verifier.backward(case, *out)
        weight, bias = self.gn_params()
        if op == "gn_bwd":
            return verifier.groupnorm_backward(case, self.groups, *out, statistics=self.torch_group_stats(),
                                               weight=weight)
        activation = "swish" if op == "gn_fwd_swish" else None
        return verifier.groupnorm_forward(case, self.groups, activation, out, weight=weight, bias=bias)

    def prepare_compiled(self, op, row, errors, verify):
        """Compiles the row's op (outside any timing) and checks its output;
        records compile_s, compiled_verified or compiled_error in the row.
        Returns whether there is a compiled callable to time."""
        from bench_compiled import CompileBudgetSpent, error_text
        env = self.env
        try:
            function, seconds, row["compile_cache"] = self.compiled_function(op)
            row["compile_s"] = round(seconds, 3)
        except CompileBudgetSpent as error:
            row["compiled_error"] = str(error)
        except Exception as error:  # a failed compile is a result, not a crash
            row["compiled_error"] = error_text(error)
            env.raise_if_device_broken()
        if "compiled_error" in row:
            errors.append("compiled: " + row["compiled_error"])
            return False
        if verify:
            try:
                failures = self.verify_compiled(op, function)
            except Exception as error:
                failures = [error_text(error)]
                env.raise_if_device_broken()
            row["compiled_verified"] = not failures
            errors += ["compiled: " + failure for failure in failures]
        return True

    def timed_anchors(self, op, row, errors, verify):
        """(key, flag) of the anchors to time for this row; compiles the
        compiled anchor first, leaving it out if that failed."""
        variants = self.env.anchor_variants_for(op)
        if any(key == "compiled" for key, _ in variants) and not self.prepare_compiled(op, row, errors, verify):
            variants = tuple(v for v in variants if v[0] != "compiled")
        return variants

    def run_op(self, op, verify):
        env, case = self.env, self.case
        row = {"op": op, "shape": [int(n) for n in case.shape], "dtype": case.dtype_name,
               "layout": self.layout,
               "bytes_min": bytes_min(op, case.numel(), case.shape[1],
                                      self.x.element_size()),
               "us": {"ours": None, "cudnn": None, "torch_native": None, "compiled": None},
               "verified": False, "host_us": None}
        errors = []
        if verify:
            try:
                failures = self.verify_ours(op)
                row["verified"] = not failures
                errors += failures
            except Exception as error:  # a failing call is a result, not a crash
                errors.append(f"ours: {type(error).__name__}: {error}")
                env.raise_if_device_broken()
        anchors = self.timed_anchors(op, row, errors, verify)
        if env.backend == "cpu":
            self._time_alternating(op, row, errors, anchors)
        else:
            self._time_one_by_one(op, row, errors, anchors)
        if errors:
            row["error"] = "; ".join(e.replace("\n", " ")[:300] for e in errors)
        return row

    def _time_one_by_one(self, op, row, errors, anchors):
        """GPU: device time of each implementation in turn, plus our host
        overhead, then the copy of the row's bytes (copy_calls)."""
        env = self.env
        try:
            ours = [self.ours_call(op, s) for s in self.slots]
            row["us"]["ours"] = env.timer.device_us(ours)
            row["host_us"] = env.timer.host_us(ours[0])
        except Exception as error:
            errors.append(f"ours: {type(error).__name__}: {error}")
            env.raise_if_device_broken()
        for key, flag in anchors:
            try:
                with env.anchor_context(flag):
                    calls, note = self.anchor_calls(op, key, flag)
                    row["us"][key] = env.timer.device_us(calls)
                if note:
                    row.setdefault("anchor_path", {})[key] = note
            except Exception as error:
                errors.append(f"{key}: {type(error).__name__}: {error}")
                env.raise_if_device_broken()
        # Beside "us", not in it: speedups take the fastest of "us"'s anchors.
        row["copy_us"] = None
        try:
            row["copy_us"] = env.timer.device_us(self.copy_calls(op))
        except Exception as error:
            errors.append(f"copy: {type(error).__name__}: {error}")
            env.raise_if_device_broken()

    def _time_alternating(self, op, row, errors, anchors):
        """CPU: ours and PyTorch in alternating blocks (a shared machine's load
        hits both alike); the median goes in "us", the minimum in "us_min"."""
        named = {}
        try:
            named["ours"] = [self.ours_call(op, s) for s in self.slots]
            named["ours"][0]()
        except Exception as error:
            named.pop("ours", None)
            errors.append(f"ours: {type(error).__name__}: {error}")
        for key, flag in anchors:
            try:
                named[key] = self.anchor_calls(op, key, flag)[0]
                named[key][0]()
            except Exception as error:
                named.pop(key, None)
                errors.append(f"{key}: {type(error).__name__}: {error}")
        if named:
            measured = self.env.timer.alternating_us(named)
            row["us_min"] = {}
            for key, (median_us, min_us) in measured.items():
                row["us"][key] = median_us
                row["us_min"][key] = min_us


def plan_cases(backend, quick, ops, dtypes, layouts, shapes=None, gn_shapes=None):
    """(shape, dtype, layout, ops) to run, group norm's shapes with its ops
    first (few rows, fast), then batch norm's; NHWC only where it differs
    from NCHW.  `shapes` and `gn_shapes`, when given, replace batch norm's
    and group norm's shape lists."""
    import bench_shapes
    if gn_shapes is None:
        gn_shapes = bench_shapes.default_group_norm_shapes(backend, quick)
    if shapes is not None:
        bn_shapes = shapes
    elif quick:
        bn_shapes = bench_shapes.quick_shapes(backend)
    elif backend == "gpu":
        bn_shapes = bench_shapes.full_shapes()
    else:
        bn_shapes = bench_shapes.cpu_default_shapes()
    families = ((gn_shapes, [op for op in ops if op in GN_OPS]),
                (bn_shapes, [op for op in ops if op in BN_OPS]))
    return [(shape, dtype, layout, family_ops) for shapes, family_ops in families if family_ops
            for shape in shapes for dtype in dtypes for layout in layouts
            if layout == "nchw" or bench_shapes.has_distinct_nhwc(shape)]


def _parse_shapes(text):
    """'32x512x7x7,8x64' -> [(32, 512, 7, 7), (8, 64)]: ranks 2 to 5."""
    from bench_shapes import parse_shape
    shapes = []
    for item in (part.strip() for part in text.split(",")):
        if not item:
            continue
        try:
            shape = parse_shape(item)
        except ValueError:
            raise SystemExit(f"bad shape {item!r}: lengths joined by x, e.g. 32x512x7x7")
        if not 2 <= len(shape) <= 5 or min(shape) < 1:
            raise SystemExit(f"bad shape {item!r}: 2 to 5 positive lengths")
        shapes.append(shape)
    return shapes


def _parse_gn_shapes(text):
    """--gn-shapes: groups of bench_shapes.GN_SHAPE_GROUPS or "all", or
    shapes whose C the bench's group count divides; None: the backend's
    default."""
    import bench_shapes
    if text is None:
        return None
    names = [name.strip() for name in text.split(",") if name.strip()]
    if names == ["all"]:
        return bench_shapes.group_norm_shapes()
    if names and all(name in bench_shapes.GN_SHAPE_GROUPS for name in names):
        return bench_shapes.group_norm_shapes(groups=names)
    shapes = _parse_shapes(text)
    for shape in shapes:
        if shape[1] % bench_shapes.GN_GROUPS:
            raise SystemExit(f"bad group-norm shape {_shape_text(shape)}: C must be a multiple of "
                             f"{bench_shapes.GN_GROUPS}")
    return shapes


def _shape_text(shape):
    from bench_shapes import shape_text
    return shape_text(shape)


def main(argv=None):
    args = parse_args(sys.argv[1:] if argv is None else argv)
    started = time.monotonic()
    if args.backend == "cpu":
        # Read by the library's thread pool when it starts: set before loading.
        os.environ["MIOPEN_BN_NUM_THREADS"] = str(args.threads)
    sys.path.insert(0, BENCH_DIR)
    import torch
    import miopen_bn
    import bench_report
    from bench_data import DTYPES, CaseData

    ops = _split(args.ops, OPS, "op")
    layouts = _split(args.layouts, LAYOUTS, "layout")
    default_dtypes = ",".join(DTYPES) if args.backend == "gpu" else "fp32"
    dtypes = _split(args.dtypes or default_dtypes, DTYPES, "dtype")

    env = Environment(args, torch, miopen_bn)
    verifier = None
    if not args.no_verify:
        from bench_verify import Verifier
        verifier = Verifier(torch, miopen_bn)

    json_path = args.json or os.path.join(BENCH_DIR, "results", env.slug + ".json")
    md_path = args.markdown or os.path.splitext(json_path)[0] + ".md"
    plot_path = args.plot or os.path.join(BENCH_DIR, f"roofline_{env.slug}.png")
    print(f"bench: {env.device_name} ({args.backend}); {env.machine_note}", flush=True)
    copy_gbs = env.timer.copy_gbs()
    print(f"bench: copy bandwidth {copy_gbs:.1f} GB/s (read + write)", flush=True)
    floor = env.launch_floor()
    print(f"bench: launch floor {floor['us']:.2f} us ({floor['how']})", flush=True)
    document = {
        "device": env.device_name, "backend": args.backend,
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "command": "python " + " ".join(
            [os.path.relpath(os.path.abspath(sys.argv[0]))] + sys.argv[1:]),
        "copy_gbs": round(copy_gbs, 2), "torch": torch.__version__,
        "miopen_bn": getattr(miopen_bn, "__version__", None),
        "machine_note": env.machine_note,
        "timing": getattr(env.timer, "mode", "median wall time"),
        "launch_floor_us": round(floor["us"], 3), "launch_floor": floor,
        "anchors": [key for key, _ in env.anchor_variants], "rows": [], "skipped": [],
    }
    shapes = None if args.shapes is None else _parse_shapes(args.shapes)
    gn_shapes = _parse_gn_shapes(args.gn_shapes)
    cases = plan_cases(args.backend, args.quick, ops, dtypes, layouts, shapes, gn_shapes)
    if env.compiled is not None:
        from bench_precompile import default_workers, precompile
        workers = default_workers(args.backend) if args.compile_workers is None else args.compile_workers
        jobs = [(op, tuple(shape), dtype, layout) for shape, dtype, layout, case_ops in cases for op in case_ops]
        document["precompile"] = precompile(
            jobs, workers, env.device, None if args.budget_s is None else args.budget_s / 2,
            threads=torch.get_num_threads(), log=lambda text: print(text, flush=True))
    print(f"bench: {len(cases)} (shape, dtype, layout) cases, {len(ops)} ops; "
          f"verify={'no' if verifier is None else 'yes'}; budget "
          f"{'none' if args.budget_s is None else f'{args.budget_s:.0f} s'}", flush=True)
    print(bench_report.table_header(), flush=True)
    status = 0
    case = None
    try:
        for index, (shape, dtype, layout, case_ops) in enumerate(cases):
            elapsed = time.monotonic() - started
            if args.budget_s is not None and elapsed > args.budget_s:
                document["skipped"] = [f"{_shape_text(s)} {d} {l}" for s, d, l, _ in cases[index:]]
                print(f"bench: time budget reached after {elapsed:.0f} s; "
                      f"{len(cases) - index} cases left out", flush=True)
                break
            if case is None or case.shape != tuple(shape) or case.dtype_name != dtype:
                case = None
                if args.backend == "gpu":
                    torch.cuda.empty_cache()
                case = CaseData(torch, shape, dtype, env.device)
                print(f"# [{time.monotonic() - started:6.1f} s] {_shape_text(shape)} {dtype}",
                      flush=True)
            runner = CaseRunner(env, case, layout, verifier, case_ops)
            for op in case_ops:
                row = runner.run_op(op, verifier is not None)
                document["rows"].append(row)
                print(bench_report.table_line(row, copy_gbs), flush=True)
                if verifier is not None and not row["verified"]:
                    status = 1
            del runner
            if env.compiled is not None:
                document["compiled"] = env.compiled.summary()
            bench_report.write_json(json_path, document)
    except DeviceBroken as error:
        print(f"bench: stopping: {error}", flush=True)
        status = 2
    except KeyboardInterrupt:
        print("bench: interrupted; writing what was measured", flush=True)
        status = 130
    document["seconds"] = round(time.monotonic() - started, 1)
    if env.compiled is not None:
        document["compiled"] = env.compiled.summary()
    bench_report.write_json(json_path, document)
    bench_report.write_markdown(md_path, document)
    plotted = bench_report.write_plot(plot_path, document)
    print("\nbench summary:")
    for line in bench_report.summary_lines(document):
        print("  " + line)
    print(f"bench: wrote {json_path}, {md_path}"
          + (f", {plot_path}" if plotted else " (no matplotlib: no plot)"))
    print(f"bench: {time.monotonic() - started:.0f} s in all", flush=True)
    return status


if __name__ == "__main__":
    try:
        sys.exit(main())
    except SystemExit:
        raise
    except Exception:
        traceback.print_exc()
        sys.exit(3)
