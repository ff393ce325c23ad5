"""Where the C library and its headers are, for C and C++ code built against
the library that this Python package carries (the way ``numpy.get_include()``
and ``python -m pybind11 --cmakedir`` serve extension builds).

A pip-installed package holds the library, ``include/miopen_bn.h``,
``include/miopen/miopen.h``, the CMake package (``cmake/miopen_bn``) and
``pkgconfig/miopen_bn.pc``; a source checkout has only the headers, and its
library is the one ``$MIOPEN_BN_LIBRARY`` names.  ``python -m miopen_bn``
prints these paths and flags (see ``__main__.py``).
"""

from __future__ import annotations

import os
from pathlib import Path

from . import cdef
from .library import ENV_VARIABLE, candidate_paths, library_file_name

LIBRARY_NAME = "miopen_bn"


def get_include() -> str:
    """The directory holding ``miopen_bn.h`` and ``miopen/miopen.h``."""
    return str(cdef.header_path().parent)


def get_library() -> str:
    """The path of the shared library: the package's own, else the file that
    ``$MIOPEN_BN_LIBRARY`` names (the first two places the loader tries)."""
    for source, path in candidate_paths():
        if path and os.path.isabs(path) and os.path.isfile(path):
            return path
    raise FileNotFoundError(
        f"no {library_file_name()} inside the package and ${ENV_VARIABLE} names no file: "
        f"install the package with pip, or set ${ENV_VARIABLE} to the library built with CMake"
    )


def get_library_dir() -> str:
    """The directory of :func:`get_library`, for ``-L`` and the run path."""
    return str(Path(get_library()).parent)


def _packaged_dir(*parts: str) -> str:
    path = Path(__file__).resolve().parent.joinpath(*parts)
    if not path.is_dir():
        raise FileNotFoundError(f"{path} does not exist: only a pip-installed package ships it")
    return str(path)


def get_cmake_dir() -> str:
    """The CMake package inside a pip-installed package: pass it as
    ``-Dmiopen_bn_DIR=...`` to ``find_package(miopen_bn CONFIG)``."""
    return _packaged_dir("cmake", "miopen_bn")


def get_pkgconfig_dir() -> str:
    """The directory of ``miopen_bn.pc`` inside a pip-installed package, for
    ``PKG_CONFIG_PATH``."""
    return _packaged_dir("pkgconfig")


def cflags() -> list[str]:
    return [f"-I{get_include()}"]


def libs() -> list[str]:
    """Link flags, with a run path: a pip install's directory is in no
    loader's search path."""
    library_dir = get_library_dir()
    return [f"-L{library_dir}", f"-Wl,-rpath,{library_dir}", f"-l{LIBRARY_NAME}"]
