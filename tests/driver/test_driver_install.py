"""The driver as a user meets it: the ``miopen-bn-driver`` console script the
package installs, ``python -m miopen_bn.driver``, and the README's "run"
command, executed as written (minus its pip install)."""

from __future__ import annotations

import importlib.metadata
import os
import re
import shlex
import shutil
import subprocess
import sys

import pytest
from support import REPO

README = REPO / "README.md"


def _readme_run_command() -> list:
    """The arguments of the README's first driver command."""
    for line in README.read_text().splitlines():
        if "miopen-bn-driver " in line and line.startswith("python3 -m pip install . && "):
            return shlex.split(line.split("&& ", 1)[1])[1:]
    pytest.fail("README.md has no 'python3 -m pip install . && miopen-bn-driver ...' line")


def _driver_command() -> list:
    """The installed console script when it is on this interpreter's bin
    directory or PATH, else the module it runs."""
    script = shutil.which("miopen-bn-driver", path=os.path.dirname(sys.executable)) or shutil.which(
        "miopen-bn-driver")
    return [script] if script else [sys.executable, "-m", "miopen_bn.driver"]


def _run(command: list) -> subprocess.CompletedProcess:
    env = {**os.environ, "MIOPEN_LOG_LEVEL": "1"}
    return subprocess.run(command, capture_output=True, text=True, env=env, timeout=300)


def test_console_script_is_registered():
    scripts = {e.name: e.value for e in importlib.metadata.entry_points(group="console_scripts")}
    assert scripts.get("miopen-bn-driver") == "miopen_bn.driver:main"


def test_module_runs_and_exits_with_the_status():
    ok = _run([sys.executable, "-m", "miopen_bn.driver", "bnorm", "-n", "2", "-c", "3", "-H", "3", "-W", "3"])
    assert ok.returncode == 0 and "Forward Training: verified" in ok.stdout, ok.stdout + ok.stderr
    bad = _run([sys.executable, "-m", "miopen_bn.driver", "bnorm", "-F", "0"])
    assert bad.returncode == 2 and "nothing to run" in bad.stderr


def test_readme_run_command_works_on_the_cpu():
    arguments = _readme_run_command()
    assert arguments[0] == "bnorm" and "-V" in arguments and "-t" in arguments
    result = _run(_driver_command() + arguments)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "Forward Training: verified" in result.stdout and "Backward: verified" in result.stdout
    assert re.search(r"^stats: bn_train, 32, 256, 1, 56, 56, NCHW, fp32, \d+, [\d.e-]+, [\d.]+$", result.stdout, re.M)
    assert re.search(r"^stats: bn_bwd, ", result.stdout, re.M)
