"""The torch.compile anchor: each op as a PyTorch user who wants speed runs it,
compiled by Inductor for the row's static shape, dtype and layout.

    bn_infer      F.batch_norm(..., training=False)
    bn_train      F.batch_norm(..., training=True) updating running statistics
    bn_bwd        aten.native_batch_norm_backward from the saved statistics
    gn_fwd        F.group_norm
    gn_fwd_swish  F.silu(F.group_norm(...)), one compiled function
    gn_bwd        aten.native_group_norm_backward from torch's own saved mean/rstd, on
                  x and dy in their layout (see bench_compiled.gn_bwd)

Each row compiles once (`torch.compile(fn, dynamic=False, fullgraph=True)`),
the compile and its first call outside any timing; the verification and every
timed call reuse that compiled callable.  A full GPU bench compiles over a
thousand times, so four things keep that bounded and honest:

* bench_precompile.py compiles the planned rows ahead, in parallel worker
  processes, into Inductor's on-disk caches (arguments of the same metadata,
  from ARGUMENTS below), so the bench's own compiles are cache hits.

* Dynamo's caches are reset between (shape, dtype, layout) cases: each
  function's code object then holds at most one compiled entry, guards stay
  one entry long, and the recompile limit (8 per code object by default, past
  which Dynamo silently runs the function eagerly) is never approached.  The
  limits are raised anyway and hitting one raises instead of falling back.
* fullgraph=True: a graph break raises instead of running part of the op
  eagerly.  Every failure is the row's `compiled_error`, never fatal.
* An optional budget of compile seconds for the whole run: past it, rows
  record that they were left out instead of compiling.
"""
import time

import torch
import torch._dynamo
import torch.nn.functional as F

from bench_data import EPSILON, EXP_AVG_FACTOR, in_layout, torch_dtype
from bench_shapes import GN_GROUPS

# The functions compiled.  Module-level (one code object each) and taking
# every tensor as an argument, so Dynamo guards on the arguments' metadata
# only: the rotation slots' copies of a row's inputs share one compiled entry.


def bn_infer(x, weight, bias, mean, var):
    return F.batch_norm(x, mean, var, weight, bias, False, 0.0, EPSILON)


def bn_train(x, weight, bias, running_mean, running_var):
    return F.batch_norm(x, running_mean, running_var, weight, bias, True, EXP_AVG_FACTOR, EPSILON)


def bn_bwd(dy, x, weight, running_mean, running_var, saved_mean, saved_inv_std):
    # What autograd calls for F.batch_norm in training (running statistics
    # passed along, unused with train=True).
    return torch.ops.aten.native_batch_norm_backward(
        dy, x, weight, running_mean, running_var, saved_mean, saved_inv_std, True, EPSILON,
        [True, True, True])


def gn_fwd(x, groups, weight, bias):
    return F.group_norm(x, groups, weight, bias, EPSILON)


def gn_fwd_swish(x, groups, weight, bias):
    return F.silu(F.group_norm(x, groups, weight, bias, EPSILON))


def gn_bwd(dy, x, groups, mean, rstd, weight):
    """The backward a compiled model runs: Inductor lowers the aten op to its
    own kernels, which read x and dy in their layout (channels-last
    included), where eager autograd saves a contiguous copy of a
    channels-last x and makes dy contiguous for its CUDA kernel."""
    n, c = x.shape[0], x.shape[1]
    return torch.ops.aten.native_group_norm_backward(
        dy, x, mean, rstd, weight, n, c, x.numel() // (n * c), groups, [True, True, True])


FUNCTIONS = {f.__name__: f for f in (bn_infer, bn_train, bn_bwd, gn_fwd, gn_fwd_swish, gn_bwd)}

# Each function's arguments by name, in order.  The bench (from its data)
# and the pre-compile workers (blank_arguments) both build them from these
# names, so both compile for the same shapes, strides and dtypes, and the
# workers' cache entries serve the bench.
_GN_FORWARD = ("x", "groups", "gn_weight", "gn_bias")
ARGUMENTS = {
    "bn_infer": ("x", "scale", "bias", "est_mean", "est_var"),
    "bn_train": ("x", "scale", "bias", "running_mean", "running_var"),
    "bn_bwd": ("dy", "x", "scale", "running_mean", "running_var", "saved_mean", "saved_inv_std"),
    "gn_fwd": _GN_FORWARD,
    "gn_fwd_swish": _GN_FORWARD,
    "gn_bwd": ("dy", "x", "groups", "gn_mean", "gn_rstd", "gn_weight"),
}


def arguments(op, value):
    """The op's arguments in order, `value(name)` giving each."""
    return tuple(value(name) for name in ARGUMENTS[op])


def torch_group_statistics(x, weight, bias, groups):
    """The mean and rstd PyTorch's own group-norm forward saves (in its
    dtype), what the compiled backward of a compiled model reads.  (Eager's
    CUDA kernel takes contiguous data only; the statistics do not depend on
    the layout.)"""
    n, c = x.shape[0], x.shape[1]
    if x.is_cuda:
        x = x.contiguous()
    _, mean, rstd = torch.ops.aten.native_group_norm(x, weight, bias, n, c, x.numel() // (n * c), groups, EPSILON)
    return mean, rstd


def blank_arguments(op, shape, dtype_name, layout, device):
    """Arguments with the shapes, strides and dtypes of the bench's (x and dy
    in the layout and dtype, batch norm's parameters float32, group norm's in
    x's dtype), their values uninitialized.  Every name gets its own tensor:
    Dynamo would compile a different graph for aliased arguments."""
    io = torch_dtype(torch, dtype_name)
    channels = shape[1]

    def blank(name):
        if name in ("x", "dy"):
            return in_layout(torch, torch.empty(shape, dtype=io, device=device), layout)
        if name == "groups":
            return GN_GROUPS
        if name.startswith("gn_"):
            return torch.empty(channels, dtype=io, device=device)
        return torch.empty(channels, dtype=torch.float32, device=device)

    values = {name: blank(name) for name in set(ARGUMENTS[op]) - {"gn_mean", "gn_rstd"}}
    if op == "gn_bwd":
        values["gn_mean"], values["gn_rstd"] = torch_group_statistics(
            values["x"], values["gn_weight"], torch.empty_like(values["gn_weight"]), GN_GROUPS)
    return arguments(op, values.__getitem__)


# Dynamo's limits, under their current names and their names before torch
# 2.6/2.7 (the device has 2.11, this machine 2.13).
_LIMITS = (("recompile_limit", "cache_size_limit", 1 << 16),
           ("accumulated_recompile_limit", "accumulated_cache_size_limit", 1 << 20))
_FAIL_ON_LIMIT = ("fail_on_recompile_limit_hit", "fail_on_cache_limit_hit")


def configure_dynamo():
    """Limits no bench run reaches; if one were reached anyway, an error (the
    row's compiled_error) rather than a silent eager fallback; no suppressed
    errors."""
    config = torch._dynamo.config
    for current, old, value in _LIMITS:
        name = current if hasattr(config, current) else old
        if hasattr(config, name):
            setattr(config, name, max(getattr(config, name), value))
    for name in _FAIL_ON_LIMIT:
        if hasattr(config, name):
            setattr(config, name, True)
            break
    config.suppress_errors = False


def _cache_counts():
    """(hits, misses) of Inductor's and AOTAutograd's on-disk caches so far."""
    from torch._dynamo.utils import counters
    return (counters["inductor"]["fxgraph_cache_hit"] + counters["aot_autograd"]["autograd_cache_hit"],
            counters["inductor"]["fxgraph_cache_miss"] + counters["aot_autograd"]["autograd_cache_miss"])


class CompileBudgetSpent(RuntimeError):
    """The run's compile budget is spent: this row is left out, on purpose."""


def error_text(error, limit=400):
    """One line: the exception's type and the start of its message (Inductor's
    errors carry pages of traceback)."""
    text = " ".join(str(error).split())
    return f"{type(error).__name__}: {text[:limit]}"


class CompiledAnchors:
    """Compiles each row's function once, counts the seconds spent, and keeps
    the compiled callables of the current case (see the module docstring)."""

    def __init__(self, synchronize, budget_s=None):
        self.synchronize = synchronize
        self.budget_s = budget_s
        self.compile_s = []  # per compile, successful or not
        self.failures = 0
        self.cache_hits = 0
        self._cache = {}
        configure_dynamo()

    def new_case(self):
        """Forget the previous case's compiled code (see the module docstring)."""
        self._cache.clear()
        torch._dynamo.reset()

    @property
    def total_s(self):
        return sum(self.compile_s)

    def get(self, key, op, args):
        """(callable, seconds its compile and first call took, "hit" or
        "miss": whether Inductor's on-disk caches had it) for row `key`; the
        callable takes the op's arguments.  Compiles on the
        first request, with `args`.  Raises CompileBudgetSpent past the
        budget, or whatever the compile raised (each only once per key)."""
        if key in self._cache:
            cached = self._cache[key]
            if isinstance(cached, BaseException):
                raise cached
            return cached
        try:
            if self.budget_s is not None and self.total_s >= self.budget_s:
                raise CompileBudgetSpent(
                    f"left out: the run's compile budget of {self.budget_s:.0f} s was spent "
                    f"({len(self.compile_s)} compiles)")
            self._cache[key] = self._compile(op, args)
        except Exception as error:
            self._cache[key] = error
            raise
        return self._cache[key]

    def _compile(self, op, args):
        compiled = torch.compile(FUNCTIONS[op], dynamic=False, fullgraph=True)
        before = _cache_counts()
        start = time.perf_counter()
        try:
            compiled(*args)  # compiles, then runs once: autotuning, first allocations
            self.synchronize()
        except Exception:
            self.failures += 1
            raise
        finally:
            self.compile_s.append(time.perf_counter() - start)
        hits, misses = (after - earlier for after, earlier in zip(_cache_counts(), before))
        cache = "hit" if hits and not misses else "miss"
        self.cache_hits += cache == "hit"
        return compiled, self.compile_s[-1], cache

    def summary(self):
        """What the compiles cost, for the JSON header."""
        times = sorted(self.compile_s)
        return {"compiles": len(times), "failures": self.failures, "cache_hits": self.cache_hits,
                "total_s": round(sum(times), 1),
                "median_s": round(times[len(times) // 2], 2) if times else None,
                "max_s": round(times[-1], 2) if times else None,
                "budget_s": self.budget_s}
