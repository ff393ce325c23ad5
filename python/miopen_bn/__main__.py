"""``python -m miopen_bn --cflags --libs``: compiler and linker flags, or the
directories of the headers, the library and the CMake and pkg-config
packages, for C code built against this package's library."""

from __future__ import annotations

import argparse
import sys

from . import build_flags
from .library import header_version

# (option, help, what it prints), in the order the output lists them.
OUTPUTS = (
    ("--includedir", "the directory of miopen_bn.h and miopen/miopen.h", build_flags.get_include),
    ("--libdir", "the directory of the shared library", build_flags.get_library_dir),
    ("--library", "the shared library's path", build_flags.get_library),
    ("--cmakedir", "the CMake package, for -Dmiopen_bn_DIR= (pip installs only)", build_flags.get_cmake_dir),
    ("--pkgconfigdir", "the directory of miopen_bn.pc, for PKG_CONFIG_PATH (pip installs only)",
     build_flags.get_pkgconfig_dir),
    ("--cflags", "compiler flags (-I)", lambda: " ".join(build_flags.cflags())),
    ("--libs", "linker flags (-L, run path, -lmiopen_bn)", lambda: " ".join(build_flags.libs())),
)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m miopen_bn",
        description="Paths, compiler and linker flags for C code built against miopen-bn's library.")
    parser.add_argument("--version", action="version", version=header_version())
    for option, help_text, _ in OUTPUTS:
        parser.add_argument(option, action="store_true", help=help_text)
    arguments = parser.parse_args(argv)
    wanted = [produce for option, _, produce in OUTPUTS if getattr(arguments, option[2:])]
    if not wanted:
        parser.print_help()
        return 0
    try:
        print(" ".join(produce() for produce in wanted))
    except FileNotFoundError as error:
        print(f"python -m miopen_bn: {error}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
