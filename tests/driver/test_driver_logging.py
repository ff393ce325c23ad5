"""MIOPEN_ENABLE_LOGGING_CMD's commands, run back through miopen-bn-driver.

Real library calls (driver_logged_calls.py, in a subprocess: the library
reads its logging environment once per process) log their commands to a
file.  The test checks each command is the one expected, then runs every
command through the driver with logging on: the driver must verify, and its
own calls must log exactly the same commands, i.e. reproduce the same problem
(types, shape, mode, direction, -s/-r, blending, layout)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from support import TESTS
from support.driver_logged_calls import BN_CALLS, COMMAND, GN_CALLS
from support.driver_support import needs_groupnorm

from miopen_bn.driver.arguments import parse

SCRIPT = str(TESTS / "support" / "driver_logged_calls.py")
REPLAY = (
    "import shlex, sys\n"
    "from miopen_bn.driver import main\n"
    "statuses = [main(shlex.split(command)[1:]) for command in sys.argv[1:]]\n"
    "sys.exit(max(statuses))\n"
)


def _python(arguments: list, log) -> subprocess.CompletedProcess:
    env = {**os.environ, "MIOPEN_ENABLE_LOGGING_CMD": "1", "MIOPEN_BN_LOG_FILE": str(log),
           "MIOPEN_LOG_LEVEL": "1", "MIOPEN_BN_BACKEND": "cpu"}
    return subprocess.run([sys.executable, *arguments], capture_output=True, text=True, env=env, timeout=300)


def _logged_commands(log) -> list:
    lines = log.read_text().splitlines() if log.exists() else []
    return [line.split("] ", 1)[1] for line in lines if " Command [" in line]


@pytest.fixture(scope="module")
def logged(tmp_path_factory) -> list:
    log = tmp_path_factory.mktemp("logged") / "calls.log"
    result = _python([SCRIPT], log)
    assert result.returncode == 0, result.stderr
    return _logged_commands(log)


def test_each_call_logs_its_command(logged):
    assert logged == [COMMAND + command for _, command in BN_CALLS + GN_CALLS]


@pytest.mark.parametrize("operation", ["bnorm", pytest.param("groupnorm", marks=needs_groupnorm)])
def test_driver_replays_the_commands(logged, tmp_path, operation):
    commands = [c for c in logged if c.startswith(COMMAND + operation)]
    log = tmp_path / "replay.log"
    result = _python(["-c", REPLAY, *commands], log)
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.count(": verified") == len(commands), result.stdout
    assert _logged_commands(log) == commands


@pytest.mark.parametrize("call, command", GN_CALLS, ids=[c.split()[0] for _, c in GN_CALLS])
def test_group_norm_commands_parse_to_the_call(call, command):
    options = parse(command.split())
    assert options.subcommand.x_dtype == call["dtype"]
    assert options.subcommand.param_dtype == (call["pdtype"] if call["mode"] else call["dtype"])
    assert options.shape == call["shape"]
    assert options.channels_last == call["channels_last"]
    assert options.groups == call["groups"] and options.mode == call["mode"]
    assert (options.forward, options.backward) == ((0, True) if call["backward_call"] else (1, False))
    assert options.activation == ("swish" if call.get("activation") else None)
    assert options.activation_beta == call.get("beta", 1.0)
