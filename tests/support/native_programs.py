"""Building and running C programs against the installed library, as a user
would: compiled with the repository's public headers, linked with the
library the package carries (miopen_bn.get_library()), run on the CPU backend.
Shared by the C ABI test and the examples' test; skips only when no C
compiler is installed."""

from __future__ import annotations

import os
import pathlib
import shutil
import subprocess

import pytest

import miopen_bn

from support import REPO

INCLUDE = REPO / "include"


def compiler(*names: str) -> str:
    for name in names:
        path = shutil.which(name)
        if path:
            return path
    pytest.skip(f"no compiler found among {names}")


def build_c_program(source: pathlib.Path, out: pathlib.Path) -> pathlib.Path:
    """Compiles one C99 source with every warning an error, linked with the library."""
    library = pathlib.Path(miopen_bn.get_library())
    subprocess.run(
        [compiler("cc", "gcc", "clang"), "-std=c99", "-Wall", "-Wextra", "-Werror", f"-I{INCLUDE}",
         str(source), str(library), f"-Wl,-rpath,{library.parent}", "-lm", "-o", str(out)],
        check=True, capture_output=True, text=True)
    return out


def run_program(binary: pathlib.Path, **env) -> subprocess.CompletedProcess:
    """Runs on the CPU backend, quiet unless ``env`` says otherwise."""
    environment = {**os.environ, "MIOPEN_BN_BACKEND": "cpu", "MIOPEN_LOG_LEVEL": "1", **env}
    return subprocess.run([str(binary)], capture_output=True, text=True, env=environment, timeout=120)
