"""Turns ``miopen_bn.h`` into the declarations cffi's ABI mode understands.

The header is the single source of truth for the C ABI: nothing here restates
a prototype, an enum value or the version.  cffi's parser knows no
preprocessor, so this module applies the small, documented subset the header
is written for (see the comment at the top of ``miopen_bn.h``):

* comments are removed and backslash-continued lines joined;
* ``#define NAME <integer>`` lines are kept (cffi exposes them as constants),
  every other directive line is dropped;
* conditionals are decided without evaluating anything: ``#ifndef X`` is
  true (include guards, "not C++"), ``#ifdef X`` is false (nothing is defined
  in plain C, ``__cplusplus`` included), ``#if`` / ``#elif`` are false and
  ``#else`` is true, so every chain yields its plain-C branch;
* ``extern "C"`` braces and the ``MIOPEN_BN_EXPORT`` and ``MIOPEN_BN_ENUM_BASE``
  tokens (empty in plain C) are removed.
"""

from __future__ import annotations

import functools
import re
from pathlib import Path

import cffi

HEADER_NAME = "miopen_bn.h"

_BLOCK_COMMENT = re.compile(r"/\*.*?\*/", re.DOTALL)
_LINE_COMMENT = re.compile(r"//[^\n]*")
_INTEGER_DEFINE = re.compile(r"#\s*define\s+(\w+)\s+(-?(?:0x[0-9a-fA-F]+|\d+))[uUlL]*\s*$")
_DIRECTIVE = re.compile(r"#\s*(\w+)")
_EXTERN_C = re.compile(r'extern\s+"C"\s*\{?')
_EMPTY_IN_C_TOKEN = re.compile(r"\bMIOPEN_BN_(?:EXPORT|ENUM_BASE)\b")
_FUNCTION_NAME = re.compile(r"\b(\w+)\s*\(")
_VERSION_PARTS = ("MAJOR", "MINOR", "PATCH")


def installed_header_path() -> Path:
    """Where the build installs the header: inside the package."""
    return Path(__file__).resolve().parent / "include" / HEADER_NAME


def source_tree_header_path() -> Path:
    """The repository's header, for running from a source checkout."""
    return Path(__file__).resolve().parents[2] / "include" / HEADER_NAME


def header_path() -> Path:
    """The header to read: the installed copy, else the source tree's."""
    candidates = [installed_header_path(), source_tree_header_path()]
    for candidate in candidates:
        if candidate.is_file():
            return candidate
    tried = ", ".join(str(c) for c in candidates)
    raise FileNotFoundError(f"{HEADER_NAME} not found (looked at {tried})")


def _strip_comments(text: str) -> str:
    # Keep the newlines inside block comments so line structure survives.
    text = _BLOCK_COMMENT.sub(lambda m: "\n" * m.group(0).count("\n"), text)
    return _LINE_COMMENT.sub("", text)


def _join_continuations(text: str) -> str:
    return re.sub(r"\\\n", " ", text)


class _Conditionals:
    """The #if stack: whether the current line is in a taken branch."""

    def __init__(self) -> None:
        # Per open conditional: (this branch is active, some branch was taken).
        self._stack: list[tuple[bool, bool]] = []

    def active(self) -> bool:
        return all(active for active, _ in self._stack)

    def apply(self, directive: str, line: str) -> None:
        if directive == "ifndef":
            self._stack.append((True, True))
        elif directive in ("ifdef", "if"):
            self._stack.append((False, False))
        elif directive == "elif":
            self._require_open(line)
            _, taken = self._stack[-1]
            self._stack[-1] = (False, taken)
        elif directive == "else":
            self._require_open(line)
            _, taken = self._stack[-1]
            self._stack[-1] = (not taken, True)
        elif directive == "endif":
            self._require_open(line)
            self._stack.pop()

    def _require_open(self, line: str) -> None:
        if not self._stack:
            raise ValueError(f"unbalanced preprocessor conditional: {line!r}")

    def finish(self) -> None:
        if self._stack:
            raise ValueError(f"{len(self._stack)} preprocessor conditional(s) left open")


def generate_cdef(header_text: str) -> str:
    """The cffi cdef for the given header text."""
    conditionals = _Conditionals()
    kept: list[str] = []
    for line in _join_continuations(_strip_comments(header_text)).splitlines():
        stripped = line.strip()
        if stripped.startswith("#"):
            match = _DIRECTIVE.match(stripped)
            directive = match.group(1) if match else ""
            conditionals.apply(directive, stripped)
            if directive == "define" and conditionals.active():
                define = _INTEGER_DEFINE.match(stripped)
                if define:
                    kept.append(f"#define {define.group(1)} {define.group(2)}")
            continue
        if not conditionals.active():
            continue
        line = _EMPTY_IN_C_TOKEN.sub("", _EXTERN_C.sub("", line))
        if line.strip():
            kept.append(line.rstrip())
    conditionals.finish()
    return "\n".join(kept) + "\n"


def declared_parameters(cdef: str) -> dict:
    """Function name -> its parameter names in order (the header's spelling)."""
    code = "\n".join(line for line in cdef.splitlines() if not line.lstrip().startswith("#"))
    result = {}
    # A function declaration is the only construct in the header with
    # "name(" outside a typedef; parameter lists never contain one.
    for statement in code.split(";"):
        match = _FUNCTION_NAME.search(statement)
        if not match or "typedef" in statement:
            continue
        inside = statement[match.end() : statement.rindex(")")]
        pieces = [piece.strip() for piece in inside.split(",")]
        result[match.group(1)] = [
            re.findall(r"\w+", piece)[-1] for piece in pieces if piece and piece != "void"
        ]
    return result


def declared_functions(cdef: str) -> list:
    """Names of the functions a generated cdef declares, in order."""
    return list(declared_parameters(cdef))


def void_pointer(ctype) -> bool:
    """A ``void*`` parameter: one address_declarations takes as an int."""
    return ctype.kind == "pointer" and ctype.item.kind == "void"


def address_declarations(functions: dict) -> str:
    """A cdef declaring ``functions`` ({name: its cffi function type, as the
    header's FFI gives it}) with every ``void*`` parameter (the data, alpha
    and beta) as ``uintptr_t``, every other pointer (handles, descriptors)
    as ``void*`` and every enum as ``int``: callers pass a data address as a
    plain int (torch's ``data_ptr()``), so no cffi object is made per array,
    and a handle or descriptor as the cffi pointer it already is, which cffi
    passes faster than it converts an int.  A pointer and a uintptr_t, an
    enum and an int, are passed alike in every C calling convention this
    package runs on (x86-64 and AArch64, System V and Windows)."""

    def spelled(ctype) -> str:
        if ctype.kind == "pointer":
            return "uintptr_t" if void_pointer(ctype) else "void*"
        return "int" if ctype.kind == "enum" else ctype.cname

    return "".join(f"{spelled(function.result)} {name}({', '.join(spelled(a) for a in function.args)});\n"
                   for name, function in functions.items())


def header_version(header_text: str) -> str:
    """MIOPEN_BN_VERSION_MAJOR.MINOR.PATCH as written in the header."""
    parts = []
    for part in _VERSION_PARTS:
        match = re.search(rf"#\s*define\s+MIOPEN_BN_VERSION_{part}\s+(\d+)", header_text)
        if match is None:
            raise ValueError(f"the header defines no MIOPEN_BN_VERSION_{part}")
        parts.append(match.group(1))
    return ".".join(parts)


@functools.lru_cache(maxsize=None)
def header_ffi() -> cffi.FFI:
    """The header's declarations parsed once: the FFI the library is opened
    with, and what enum values are read from (no library needed)."""
    ffi = cffi.FFI()
    ffi.cdef(generate_cdef(header_path().read_text(encoding="utf-8")))
    return ffi


@functools.lru_cache(maxsize=None)
def _enumerators() -> dict:
    ffi = header_ffi()
    values = {}
    for type_name in ffi.list_types()[0]:
        ctype = ffi.typeof(type_name)
        if ctype.kind == "enum":
            values.update(ctype.relements)
    return values


def enum_value(name: str) -> int:
    """An enumerator's value as the header defines it, e.g. ``enum_value("miopenBNSpatial")``."""
    return _enumerators()[name]


def enum_names(type_name: str) -> dict:
    """{value: enumerator name} of one enum type of the header, e.g. ``"miopenStatus_t"``."""
    return dict(header_ffi().typeof(type_name).elements)
