"""Helpers shared by the tests of every area (abi, api, bench, driver, fuzz,
gpu): hypothesis strategies, the entry points as the header names them, the
fuzzer's pieces, the backends fixture's calls, scripts the tests run in
subprocesses.  Imported as ``support`` (pyproject's pytest ``pythonpath``
puts tests/ on the path)."""

from __future__ import annotations

import zlib
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]
REPO = TESTS.parent


def seed(nodeid: str) -> int:
    """The data seed of the test with this pytest node id: from its file's
    name and test name, not its folder, so that a test keeps its data when its
    file moves between areas (the key is the node id of the flat tests/)."""
    path, _, test = nodeid.partition("::")
    return zlib.crc32(f"tests/{Path(path).name}::{test}".encode())
