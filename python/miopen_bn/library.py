"""Finds and opens ``libmiopen_bn`` with cffi in ABI mode (no compiler needed).

Search order, first usable wins:

1. the package directory (where the wheel build installs the library),
   located with ``importlib.resources``;
2. the path in the environment variable ``MIOPEN_BN_LIBRARY``;
3. ``ctypes.util.find_library("miopen_bn")`` (the system's library path).

A candidate is usable when it opens and reports, through
``miopenBNGetLibraryVersion``, the version of the header the package was
built with.  When none is, the OSError raised lists every candidate and why it
was rejected.
"""

from __future__ import annotations

import ctypes.util
import functools
import importlib.resources
import os
import sys
from dataclasses import dataclass
from typing import Any, Callable, Iterator

import cffi

from . import cdef
from .errors import make_checker

ENV_VARIABLE = "MIOPEN_BN_LIBRARY"


def library_file_name() -> str:
    if sys.platform.startswith("win"):
        return "miopen_bn.dll"
    if sys.platform == "darwin":
        return "libmiopen_bn.dylib"
    return "libmiopen_bn.so"


@functools.lru_cache(maxsize=None)
def header_text() -> str:
    return cdef.header_path().read_text(encoding="utf-8")


def header_version() -> str:
    return cdef.header_version(header_text())


@dataclass(frozen=True)
class Library:
    """One opened library with its cffi FFI and a status checker."""

    ffi: Any
    lib: Any
    path: str
    check: Callable[[int], None]

    @property
    def version(self) -> str:
        return library_version(self.ffi, self.lib)

    def by_address(self, *names: str):
        """The entry points ``names`` declared to take every pointer as an
        integer address (cdef.address_declarations), from the same library."""
        ffi = cffi.FFI()
        ffi.cdef(cdef.address_declarations({name: self.ffi.typeof(getattr(self.lib, name)) for name in names}))
        return ffi.dlopen(self.path)


def library_version(ffi, lib) -> str:
    parts = ffi.new("size_t[3]")
    lib.miopenBNGetLibraryVersion(parts + 0, parts + 1, parts + 2)
    return f"{parts[0]}.{parts[1]}.{parts[2]}"


def candidate_paths() -> Iterator[tuple[str, str | None]]:
    """(where the candidate came from, path or None when that source had none),
    produced lazily: find_library runs only when the earlier places failed."""
    name = library_file_name()
    try:
        packaged = importlib.resources.files(__package__) / name
        yield f"package directory ({packaged})", str(packaged) if packaged.is_file() else None
    except (ModuleNotFoundError, TypeError) as exc:  # not a file-system package
        yield f"package directory ({exc})", None
    yield f"${ENV_VARIABLE}", os.environ.get(ENV_VARIABLE) or None
    yield 'ctypes.util.find_library("miopen_bn")', ctypes.util.find_library("miopen_bn")


def _open(path: str, expected_version: str) -> Library:
    ffi = cdef.header_ffi()
    lib = ffi.dlopen(path)
    found = library_version(ffi, lib)
    if found != expected_version:
        raise OSError(f"it is version {found}, the package needs {expected_version}")
    return Library(ffi=ffi, lib=lib, path=path, check=make_checker(ffi, lib))


@functools.lru_cache(maxsize=None)
def load() -> Library:
    """The library, opened once per process."""
    expected = header_version()
    tried: list[str] = []
    for source, path in candidate_paths():
        if path is None:
            tried.append(f"  {source}: nothing there")
            continue
        try:
            return _open(path, expected)
        except (OSError, AttributeError) as exc:
            tried.append(f"  {source}: {path}: {exc}")
    lines = "\n".join(tried)
    raise OSError(
        f"could not load {library_file_name()} version {expected}; places tried:\n{lines}\n"
        f"Install the package with pip, or set {ENV_VARIABLE} to the library built with CMake."
    )
