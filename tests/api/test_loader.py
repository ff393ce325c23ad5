"""The loader's search order, its failure report and its version check."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from miopen_bn import library as loader


def test_loaded_library_is_a_real_file(library):
    assert Path(library.path).is_file()


def test_candidates_in_documented_order(monkeypatch):
    monkeypatch.setenv(loader.ENV_VARIABLE, "/somewhere/libmiopen_bn.so")
    candidates = list(loader.candidate_paths())
    sources = [source for source, _ in candidates]
    assert sources[0].startswith("package directory")
    assert sources[1] == f"${loader.ENV_VARIABLE}"
    assert sources[2].startswith("ctypes.util.find_library")
    assert candidates[1][1] == "/somewhere/libmiopen_bn.so"


def test_failure_lists_every_place_tried(monkeypatch, tmp_path):
    bogus = tmp_path / "libmiopen_bn.so"
    bogus.write_bytes(b"not an ELF file")
    missing = tmp_path / "missing.so"
    monkeypatch.setattr(
        loader,
        "candidate_paths",
        lambda: [
            ("package directory", None),
            (f"${loader.ENV_VARIABLE}", str(bogus)),
            ("ctypes.util.find_library", str(missing)),
        ],
    )
    with pytest.raises(OSError) as info:
        loader.load.__wrapped__()  # bypass the per-process cache
    text = str(info.value)
    assert "package directory: nothing there" in text
    assert str(bogus) in text and str(missing) in text
    assert loader.ENV_VARIABLE in text


def test_version_mismatch_is_refused(monkeypatch, library):
    monkeypatch.setattr(loader, "header_version", lambda: "99.0.0")
    monkeypatch.setattr(loader, "candidate_paths", lambda: [("test", library.path)])
    with pytest.raises(OSError, match=r"it is version \d+\.\d+\.\d+, the package needs 99\.0\.0"):
        loader.load.__wrapped__()


def test_import_does_not_open_the_library():
    """reference and tolerances work where the library cannot be loaded."""
    code = (
        "import miopen_bn, miopen_bn.reference, miopen_bn.tolerances\n"
        "from miopen_bn import library\n"
        "assert library.load.cache_info().currsize == 0, 'opened at import'\n"
        "miopen_bn.lib\n"
        "assert library.load.cache_info().currsize == 1\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads the ELF dynamic symbol table with nm")
def test_library_exports_exactly_the_header_functions(library):
    """Nothing but the C API is exported: a leaked libstdc++ (a toolchain that
    links it statically) or CPU-kernel dispatcher would bind to the host
    process's copies; a PyTorch process crashed on the GPU that way."""
    from miopen_bn import cdef

    listing = subprocess.run(["nm", "-D", "--defined-only", library.path],
                             check=True, capture_output=True, text=True).stdout
    exported = {line.split()[-1].split("@")[0] for line in listing.splitlines() if line.strip()}
    declared = set(cdef.declared_functions(cdef.generate_cdef(loader.header_text())))
    assert exported == declared
