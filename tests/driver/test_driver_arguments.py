"""miopen-bn-driver's command line: MIOpenDriver's subcommands and flags (short
and long), our extensions, and a clear exit-2 message for every command line
it cannot run."""

from __future__ import annotations

import pytest
from support.driver_support import drive

from miopen_bn.driver.arguments import SUBCOMMANDS, parse

F16, BF16, F32, F64 = "float16", "bfloat16", "float32", "float64"


def test_subcommands_name_the_operation_and_both_types():
    table = {name: (s.operation, s.x_dtype, s.param_dtype) for name, s in SUBCOMMANDS.items()}
    assert table == {
        "bnorm": ("bnorm", F32, F32),
        "bnormfp16": ("bnorm", F16, F16),
        "bnormfp16fp32": ("bnorm", F16, F32),
        "bnormbfp16": ("bnorm", BF16, BF16),
        "bnormbfp16fp32": ("bnorm", BF16, F32),
        "bnormfp64": ("bnorm", F64, F64),
        "bnormfp64fp32": ("bnorm", F64, F32),
        "groupnorm": ("groupnorm", F32, F32),
        "groupnormfp16": ("groupnorm", F16, F16),
        "groupnormfp16fp32": ("groupnorm", F16, F32),
        "groupnormbfp16": ("groupnorm", BF16, BF16),
        "groupnormbfp16fp32": ("groupnorm", BF16, F32),
        "groupnormfp64": ("groupnorm", F64, F64),
        "groupnormfp64fp32": ("groupnorm", F64, F32),
    }


def test_defaults_follow_miopendriver():
    o = parse(["bnorm"])
    assert o.shape == (32, 3, 32, 32) and o.layout == "NCHW" and not o.channels_last
    assert (o.mode, o.forward, o.backward, o.save, o.running) == (0, 1, False, False, False)
    assert (o.verify, o.time, o.wall, o.iterations) == (1, False, False, 1)
    assert (o.alpha, o.beta, o.alpha_param, o.beta_param) == (1.0, 0.0, 1.0, 0.0)
    assert o.backend == "cpu" and o.grad_dtype == F32 and o.epsilon == 1e-5


def test_long_flags_match_the_short_ones():
    short = parse("bnormfp16 -n 4 -c 5 -D 2 -H 6 -W 7 -m 1 -F 2 -b 1 -s 1 -r 1 -V 2 -t 1 -i 3 -w 1 "
                  "-L NHWC -A 0.5 -B 0.25".split())
    long = parse("bnormfp16 --batchsize 4 --in_channels 5 --in_d 2 --in_h 6 --in_w 7 --mode 1 --forw 2 "
                 "--back 1 --save 1 --run 1 --verify 2 --time 1 --iter 3 --wall 1 --layout NHWC --alpha 0.5 "
                 "--beta 0.25".split())
    assert short == long
    assert short.shape == (4, 5, 2, 6, 7) and short.layout == "NDHWC"
    assert (short.forward, short.backward, short.save, short.running, short.verify) == (2, True, True, True, 2)


@pytest.mark.parametrize("flags, shape, layout", [
    ("-n 2 -c 3 -H 4 -W 5", (2, 3, 4, 5), "NCHW"),
    ("-n 2 -c 3 -H 4 -W 5 -L NHWC", (2, 3, 4, 5), "NHWC"),
    ("-n 2 -c 3 -D 6 -H 4 -W 5", (2, 3, 6, 4, 5), "NCDHW"),
    ("-n 2 -c 3 -D 6 -H 4 -W 5 --layout NDHWC", (2, 3, 6, 4, 5), "NDHWC"),
    ("-n 2 -c 3 -D 6 -H 4 -W 5 -L NHWC", (2, 3, 6, 4, 5), "NDHWC"),
    ("-n 2 -c 3 -H 4 -W 5 --rank 5", (2, 3, 1, 4, 5), "NCDHW"),
    ("-n 2 -c 3 -H 1 -W 5 --rank 3 -L NHWC", (2, 3, 5), "NHWC"),
    ("-n 2 -c 3 -H 1 -W 1 --rank 2", (2, 3), "NCHW"),
])
def test_shape_rank_and_layout(flags, shape, layout):
    options = parse(["bnorm", *flags.split()])
    assert options.shape == shape and options.layout == layout


def test_group_norm_flags():
    o = parse("groupnormbfp16fp32 -n 2 -c 8 -H 3 -W 3 -g 4 -m 1 -F 1 -b 1 --activation swish "
              "--activation-beta 0.5".split())
    assert (o.groups, o.mode, o.forward, o.backward) == (4, 1, 1, True)
    assert (o.activation, o.activation_beta) == ("swish", 0.5)
    assert parse("groupnorm -c 4 -g 2".split()).activation is None


@pytest.mark.parametrize("command, message", [
    ("bnorm -F 0", "nothing to run"),
    ("bnorm -F 0 -b 0", "nothing to run"),
    ("bnorm -n 0", "-n must be at least 1"),
    ("bnorm -W -3", "-W must be at least 1"),
    ("bnorm -D -1", "-D must be 0"),
    ("bnorm -D 3 --rank 4", "needs a 5-D tensor"),
    ("bnorm --rank 2", "-H must be 1"),
    ("bnorm --rank 2 -H 1", "-W must be 1"),
    ("bnorm -L NCDHW", "5-D"),
    ("bnorm -i 0", "-i must be at least 1"),
    ("bnormfp16 --grad-type bfp16", "dy and dx are x's type"),
    ("groupnorm -c 6 -g 4", "must be at least 1 and divide -c 6"),
    ("groupnorm -c 6 -g 0", "must be at least 1 and divide"),
    ("bnorm -m 2", "invalid choice"),
    ("bnorm -F 3", "invalid choice"),
    ("bnorm -s 2", "must be 0 or 1"),
    ("bnorm -V 3", "invalid choice"),
    ("bnorm -L CHWN", "invalid choice"),
    ("bnorm --backend tpu", "invalid choice"),
    ("bnorm --bogus 1", "unrecognized arguments"),
    ("bnormfp8", "invalid choice"),
    ("groupnorm -s 1", "unrecognized arguments"),
    ("bnorm -F 1 -I 1", "needs forward inference"),
    ("bnorm -F 1 -r 0 -Q 1", "needs forward training with -r 1"),
    ("bnorm -F 2 -f 3 -B 0.5", "not implemented"),
    ("bnorm -f 11", "invalid choice"),
    ("bnorm --tuning_policy 6", "invalid choice"),
    ("groupnorm -f 3", "unrecognized arguments"),
    ("", "required"),
])
def test_bad_command_lines_exit_2_with_a_message(capsys, command, message):
    status, out, err = drive(capsys, *command.split())
    assert status == 2
    assert message in err, err
    assert out == ""  # nothing ran


def test_batch_norm_issue25_flags():
    options = parse("bnorm -F 2 -r 1 -I 1 -f 6 -x 0.5 -y 2 --activ_gamma 3 --tuning_policy 4".split())
    assert options.bn_activation == (6, (0.5, 2.0, 3.0)) and options.inverse_variance and options.tuning_policy == 4
    options = parse("bnorm -F 1 -r 1 -Q 1 -f 0".split())
    assert options.ping_pong and options.bn_activation is None and not options.inverse_variance


def test_help_lists_subcommands_and_exit_statuses(capsys):
    status, out, _ = drive(capsys, "--help")
    assert status == 0
    assert "bnormbfp16fp32" in out and "groupnormfp16" in out
    assert "1 a verification failed" in out
