"""The driver's command line: MIOpenDriver's subcommands and flags for batch
norm and group norm, plus the extensions the library's logged commands use
(``--rank``, ``--grad-type``, ``--alpha-param``, ``--beta-param``, the fp64
subcommands), parsed into one validated ``Options``.

Subcommands name the operation, x's type, and a trailing ``fp32`` when the
parameters are float32 under another x type: ``bnorm`` (float32),
``bnormfp16`` (float16 x and parameters), ``bnormfp16fp32`` (float16 x,
float32 parameters), ``bnormbfp16[fp32]``, ``bnormfp64[fp32]``, and the same
after ``groupnorm``.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from typing import Optional, Sequence

from .. import dtypes

PROGRAM = "miopen-bn-driver"
BNORM, GROUPNORM = "bnorm", "groupnorm"

# The dtype part of a subcommand and of --grad-type values.
DTYPE_SUFFIXES = {"": dtypes.FLOAT32, "fp16": dtypes.FLOAT16, "bfp16": dtypes.BFLOAT16, "fp64": dtypes.FLOAT64}
GRAD_TYPES = {"fp16": dtypes.FLOAT16, "bfp16": dtypes.BFLOAT16, "fp32": dtypes.FLOAT32, "fp64": dtypes.FLOAT64}
SHORT_DTYPE = {dtype: name or "fp32" for name, dtype in DTYPE_SUFFIXES.items()}

CHANNELS_FIRST, CHANNELS_LAST = ("NCHW", "NCDHW"), ("NHWC", "NDHWC")
BN_MODES = {0: "per_activation", 1: "spatial"}
GN_MODES = range(6)  # miopenNormMode_t; 0 ignores weight and bias


@dataclass(frozen=True)
class Subcommand:
    name: str
    operation: str  # BNORM or GROUPNORM
    x_dtype: str
    param_dtype: str


def _subcommands() -> dict:
    table = {}
    for operation in (BNORM, GROUPNORM):
        for suffix, dtype in DTYPE_SUFFIXES.items():
            table[operation + suffix] = Subcommand(operation + suffix, operation, dtype, dtype)
            if dtype != dtypes.FLOAT32:
                name = operation + suffix + "fp32"
                table[name] = Subcommand(name, operation, dtype, dtypes.FLOAT32)
    return table


SUBCOMMANDS = _subcommands()


@dataclass(frozen=True)
class Options:
    """One validated driver run."""

    subcommand: Subcommand
    shape: tuple  # logical (N, C[, D][, H][, W])
    channels_last: bool
    mode: int  # bnorm: 0 per activation, 1 spatial; groupnorm: miopenNormMode_t
    forward: int  # bnorm: 0 none, 1 training, 2 inference; groupnorm: 0 or 1
    backward: bool
    save: bool
    running: bool
    verify: int  # 0 off, 1 on (a sample of whole channels when large), 2 every channel
    time: bool
    wall: bool
    iterations: int
    alpha: float
    beta: float
    alpha_param: float
    beta_param: float
    grad_dtype: str
    epsilon: float
    groups: int
    activation: Optional[str]  # None or "swish"
    activation_beta: float
    bn_activation: Optional[tuple]  # bnorm's fused activation: (mode code, (alpha, beta, gamma)), or None
    inverse_variance: bool  # bnorm inference from 1 / sqrt(var + eps)
    ping_pong: bool  # bnorm training reads the running statistics from other buffers than it writes (V3)
    tuning_policy: int  # miopenTuningPolicy_t set on the handle, 0 for none
    backend: str
    seed: Optional[int]

    @property
    def rank(self) -> int:
        return len(self.shape)

    @property
    def layout(self) -> str:
        names = CHANNELS_LAST if self.channels_last else CHANNELS_FIRST
        return names[1] if self.rank == 5 else names[0]

    @property
    def bn_mode(self) -> str:
        return BN_MODES[self.mode]


class UsageError(ValueError):
    """A command line the driver cannot run (exit status 2)."""


def _flag_01(text: str) -> int:
    value = int(text)
    if value not in (0, 1):
        raise argparse.ArgumentTypeError(f"must be 0 or 1, got {text}")
    return value


def _common_flags(parser: argparse.ArgumentParser) -> None:
    shape = parser.add_argument_group("shape")
    shape.add_argument("-n", "--batchsize", type=int, default=32, help="N (default 32)")
    shape.add_argument("-c", "--in_channels", type=int, default=3, help="C (default 3)")
    shape.add_argument("-D", "--in_d", type=int, default=0, help="D; > 0 makes the tensor 5-D (default 0)")
    shape.add_argument("-H", "--in_h", type=int, default=32, help="H (default 32)")
    shape.add_argument("-W", "--in_w", type=int, default=32, help="W (default 32)")
    shape.add_argument(
        "--rank", type=int, choices=(2, 3, 4, 5),
        help="extension: 2 is (N, C) (-H 1 -W 1), 3 is (N, C, W) (-H 1); default 5 with -D, else 4",
    )
    shape.add_argument(
        "-L", "--layout", default=None, choices=CHANNELS_FIRST + CHANNELS_LAST,
        help="memory layout of every data tensor (default NCHW / NCDHW)",
    )
    run = parser.add_argument_group("run")
    run.add_argument("-V", "--verify", type=int, default=1, choices=(0, 1, 2),
                     help="check against the float64 reference: 0 no, 1 yes (large tensors: a sample of "
                          "whole channels), 2 every channel (default 1)")
    run.add_argument("-t", "--time", type=_flag_01, default=0, help="report kernel time and a stats line")
    run.add_argument("-w", "--wall", type=_flag_01, default=0, help="report the wall time of each call")
    run.add_argument("-i", "--iter", type=int, default=1, help="calls per direction (default 1)")
    run.add_argument("-e", "--epsilon", type=float, default=1e-5, help="epsilon (default 1e-5)")
    run.add_argument("--backend", choices=("cpu", "gpu"), default="cpu",
                     help="cpu (NumPy arrays) or gpu (PyTorch or CuPy device arrays); default cpu")
    run.add_argument("--seed", type=int, default=None, help="random data seed (default: fresh each run)")


def _bnorm_flags(parser: argparse.ArgumentParser) -> None:
    bn = parser.add_argument_group("batch norm")
    bn.add_argument("-m", "--mode", type=int, default=0, choices=(0, 1),
                    help="0 per activation, 1 spatial (default 0)")
    bn.add_argument("-F", "--forw", type=int, default=1, choices=(0, 1, 2),
                    help="forward: 0 none, 1 training, 2 inference (default 1)")
    bn.add_argument("-b", "--back", type=_flag_01, default=0, help="run backward (default 0)")
    bn.add_argument("-s", "--save", type=_flag_01, default=0,
                    help="training writes the saved mean and inverse std; backward reads them")
    bn.add_argument("-r", "--run", type=_flag_01, default=0,
                    help="training updates running statistics; inference reads them as estimates "
                         "(0: the batch's own statistics)")
    bn.add_argument("-A", "--alpha", type=float, default=1.0, help="result scale for y and dx (default 1)")
    bn.add_argument("-B", "--beta", type=float, default=0.0, help="prior scale for y and dx (default 0)")
    bn.add_argument("--alpha-param", type=float, default=1.0, help="extension: result scale for dscale/dbias")
    bn.add_argument("--beta-param", type=float, default=0.0, help="extension: prior scale for dscale/dbias")
    bn.add_argument("--grad-type", choices=sorted(GRAD_TYPES), default=None,
                    help="extension: type of dy and dx (default x's type; fp32 is the other choice)")
    bn.add_argument("-f", "--activ_mode", type=int, default=0, choices=range(11),
                    help="fused activation, miopenActivationMode_t (default 0: none)")
    bn.add_argument("-x", "--activ_alpha", type=float, default=1.0, help="activation alpha (default 1)")
    bn.add_argument("-y", "--activ_beta", type=float, default=1.0, help="activation beta (default 1)")
    bn.add_argument("--activ_gamma", type=float, default=1.0, help="extension: activation gamma (default 1)")
    bn.add_argument("-I", "--inverse_variance", type=_flag_01, default=0,
                    help="inference takes 1 / sqrt(var + eps) instead of the variance (needs -F 2)")
    bn.add_argument("-Q", "--ping_pong_buffers", type=_flag_01, default=0,
                    help="training reads the running statistics from other buffers than it writes "
                         "(V3; needs -F 1 -r 1)")
    bn.add_argument("--tuning_policy", type=int, default=0, choices=range(6),
                    help="miopenTuningPolicy_t set on the handle; accepted, changes nothing (default 0: none)")


def _groupnorm_flags(parser: argparse.ArgumentParser) -> None:
    gn = parser.add_argument_group("group norm")
    gn.add_argument("-g", "--num_groups", type=int, default=1, help="G, divides C (default 1)")
    gn.add_argument("-m", "--mode", type=int, default=0, choices=GN_MODES,
                    help="miopenNormMode_t: 0 no weight/bias, any other applies them (default 0)")
    gn.add_argument("-F", "--forw", type=_flag_01, default=1, help="run forward (default 1)")
    gn.add_argument("-b", "--back", type=_flag_01, default=0, help="run backward (default 0)")
    gn.add_argument("--activation", choices=("none", "swish"), default="none",
                    help="fused activation after the normalization (default none)")
    gn.add_argument("--activation-beta", type=float, default=1.0,
                    help="swish's beta: y / (1 + exp(-beta * y)) (default 1, SiLU)")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=PROGRAM,
        description="Runs, verifies and times one batch-norm or group-norm layer, as MIOpenDriver does.",
        epilog="Exit status: 0 success, 1 a verification failed, 2 bad command line, 3 the run failed.",
    )
    commands = parser.add_subparsers(dest="subcommand", metavar="SUBCOMMAND", required=True)
    for sub in SUBCOMMANDS.values():
        params = "" if sub.param_dtype == sub.x_dtype else f", {sub.param_dtype} parameters"
        what = "batch norm" if sub.operation == BNORM else "group norm"
        command = commands.add_parser(sub.name, help=f"{what}, {sub.x_dtype} x{params}")
        _common_flags(command)
        (_bnorm_flags if sub.operation == BNORM else _groupnorm_flags)(command)
    return parser


def _shape(args) -> tuple:
    n, c, d, h, w = args.batchsize, args.in_channels, args.in_d, args.in_h, args.in_w
    for flag, value in (("-n", n), ("-c", c), ("-H", h), ("-W", w)):
        if value < 1:
            raise UsageError(f"{flag} must be at least 1, got {value}")
    if d < 0:
        raise UsageError(f"-D must be 0 (4-D) or more, got {d}")
    rank = args.rank if args.rank is not None else (5 if d > 0 else 4)
    if rank == 5:
        return (n, c, max(d, 1), h, w)
    if d > 1:
        raise UsageError(f"-D {d} needs a 5-D tensor, but --rank is {rank}")
    if rank == 4:
        return (n, c, h, w)
    if h != 1:
        raise UsageError(f"--rank {rank} has no H dimension: -H must be 1, got {h}")
    if rank == 3:
        return (n, c, w)
    if w != 1:
        raise UsageError(f"--rank 2 has no W dimension: -W must be 1, got {w}")
    return (n, c)


def _channels_last(layout: Optional[str], rank: int) -> bool:
    if layout is None:
        return False
    if rank != 5 and layout in ("NCDHW", "NDHWC"):
        raise UsageError(f"layout {layout} is 5-D but the tensor has rank {rank} (use NCHW or NHWC)")
    return layout in CHANNELS_LAST


def _check_run(args, sub: Subcommand) -> None:
    if args.iter < 1:
        raise UsageError(f"-i must be at least 1, got {args.iter}")
    if not args.forw and not args.back:
        raise UsageError("nothing to run: --forw 0 and --back 0")
    grad_type = getattr(args, "grad_type", None)
    if grad_type and GRAD_TYPES[grad_type] not in (sub.x_dtype, dtypes.FLOAT32):
        raise UsageError(f"--grad-type {grad_type}: dy and dx are x's type ({sub.x_dtype}) or fp32")
    if getattr(args, "inverse_variance", 0) and args.forw != 2:
        raise UsageError("-I 1 (inverse variance) needs forward inference (-F 2)")
    if getattr(args, "ping_pong_buffers", 0) and (args.forw != 1 or not args.run):
        raise UsageError("-Q 1 (ping-pong running statistics) needs forward training with -r 1")
    if getattr(args, "activ_mode", 0) and args.beta != 0 and args.forw:
        raise UsageError("-B with a fused activation (-f) is not implemented for the forward")
    if sub.operation == GROUPNORM:
        groups, channels = args.num_groups, args.in_channels
        if groups < 1 or channels % groups:
            raise UsageError(f"-g {groups} must be at least 1 and divide -c {channels}")


def parse(argv: Sequence[str]) -> Options:
    """Options from a command line (without the program name).  Raises
    SystemExit for argparse's own errors and --help, UsageError for
    combinations argparse cannot judge."""
    args = build_parser().parse_args(list(argv))
    sub = SUBCOMMANDS[args.subcommand]
    _check_run(args, sub)
    shape = _shape(args)
    bnorm = sub.operation == BNORM
    grad_type = getattr(args, "grad_type", None)
    return Options(
        subcommand=sub,
        shape=shape,
        channels_last=_channels_last(args.layout, len(shape)),
        mode=args.mode,
        forward=args.forw,
        backward=bool(args.back),
        save=bool(args.save) if bnorm else False,
        running=bool(args.run) if bnorm else False,
        verify=args.verify,
        time=bool(args.time),
        wall=bool(args.wall),
        iterations=args.iter,
        alpha=args.alpha if bnorm else 1.0,
        beta=args.beta if bnorm else 0.0,
        alpha_param=args.alpha_param if bnorm else 1.0,
        beta_param=args.beta_param if bnorm else 0.0,
        grad_dtype=GRAD_TYPES[grad_type] if grad_type else sub.x_dtype,
        epsilon=args.epsilon,
        groups=1 if bnorm else args.num_groups,
        activation=None if bnorm or args.activation == "none" else args.activation,
        activation_beta=1.0 if bnorm else args.activation_beta,
        bn_activation=(args.activ_mode, (args.activ_alpha, args.activ_beta, args.activ_gamma))
        if bnorm and args.activ_mode else None,
        inverse_variance=bool(args.inverse_variance) if bnorm else False,
        ping_pong=bool(args.ping_pong_buffers) if bnorm else False,
        tuning_policy=args.tuning_policy if bnorm else 0,
        backend=args.backend,
        seed=args.seed,
    )
