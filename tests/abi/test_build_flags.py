"""Where C users find the library and headers of the Python package:
miopen_bn.get_include(), get_library() and python -m miopen_bn."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from support.native_programs import compiler, run_program

import miopen_bn
from miopen_bn import build_flags

PACKAGE_DIR = Path(miopen_bn.__file__).resolve().parent
PIP_INSTALLED = (PACKAGE_DIR / "libmiopen_bn.so").is_file()


def run_module(*arguments: str, cwd: Path) -> subprocess.CompletedProcess:
    """python -m miopen_bn on this process's package, outside the repository."""
    search_path = os.pathsep.join([str(PACKAGE_DIR.parent), os.environ.get("PYTHONPATH", "")])
    environment = {**os.environ, "PYTHONPATH": search_path}
    return subprocess.run([sys.executable, "-m", "miopen_bn", *arguments], capture_output=True, text=True,
                          cwd=cwd, env=environment, timeout=60)


def test_include_dir_holds_both_header_names():
    include = Path(miopen_bn.get_include())
    assert (include / "miopen_bn.h").read_text() == miopen_bn.library.header_text()
    assert '#include "../miopen_bn.h"' in (include / "miopen" / "miopen.h").read_text()


def test_library_is_the_one_python_loads(library):
    path = miopen_bn.get_library()
    assert os.path.isabs(path) and os.path.samefile(path, library.path)
    assert build_flags.get_library_dir() == str(Path(path).parent)


def test_missing_library_is_reported(monkeypatch):
    nothing_usable = [("package directory", None), ("$MIOPEN_BN_LIBRARY", "relative.so")]
    monkeypatch.setattr(build_flags, "candidate_paths", lambda: iter(nothing_usable))
    with pytest.raises(FileNotFoundError, match="MIOPEN_BN_LIBRARY names no file"):
        miopen_bn.get_library()


def test_cflags_and_libs_name_the_package_paths(tmp_path):
    result = run_module("--cflags", "--libs", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    library_dir = str(Path(miopen_bn.get_library()).parent)
    assert result.stdout.split() == [f"-I{miopen_bn.get_include()}", f"-L{library_dir}",
                                     f"-Wl,-rpath,{library_dir}", "-lmiopen_bn"]


def test_directory_options_and_version(tmp_path):
    result = run_module("--includedir", "--libdir", "--library", cwd=tmp_path)
    assert result.stdout.split() == [miopen_bn.get_include(), build_flags.get_library_dir(), miopen_bn.get_library()]
    assert run_module("--version", cwd=tmp_path).stdout.strip() == miopen_bn.__version__


@pytest.mark.skipif(not PIP_INSTALLED, reason="a source checkout ships no CMake or pkg-config package")
def test_pip_install_ships_cmake_and_pkgconfig_packages(tmp_path):
    result = run_module("--cmakedir", "--pkgconfigdir", cwd=tmp_path)
    cmake_dir, pkgconfig_dir = (Path(part) for part in result.stdout.split())
    assert (cmake_dir / "miopen_bn-config.cmake").is_file()
    pc = (pkgconfig_dir / "miopen_bn.pc").read_text()
    assert f"Version: {miopen_bn.__version__}" in pc and "-lmiopen_bn" in pc


@pytest.mark.skipif(PIP_INSTALLED, reason="the package is pip-installed")
def test_source_checkout_says_it_has_no_cmake_package(tmp_path):
    result = run_module("--cmakedir", cwd=tmp_path)
    assert result.returncode == 1 and "only a pip-installed package ships it" in result.stderr
    assert result.stdout == ""


def test_program_built_with_the_flags_runs(tmp_path):
    flags = run_module("--cflags", "--libs", cwd=tmp_path).stdout.split()
    source = tmp_path / "version.c"
    source.write_text('#include <stdio.h>\n#include <miopen/miopen.h>\n'
                      'int main(void) { size_t v[3]; miopenBNGetLibraryVersion(&v[0], &v[1], &v[2]);\n'
                      '  printf("%zu.%zu.%zu\\n", v[0], v[1], v[2]); return 0; }\n')
    binary = tmp_path / "version"
    subprocess.run([compiler("cc", "gcc", "clang"), "-std=c99", "-Wall", "-Werror", str(source), "-o", str(binary),
                    *flags], check=True, capture_output=True, text=True)
    result = run_program(binary)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == miopen_bn.__version__
