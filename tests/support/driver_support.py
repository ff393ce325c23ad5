"""Shared by the driver's tests: running the driver in-process, and skipping
group-norm runs while miopen_bn has no group-norm Python API."""

from __future__ import annotations

import pytest

import miopen_bn
from miopen_bn.driver import main

needs_groupnorm = pytest.mark.skipif(
    not hasattr(miopen_bn, "groupnorm_forward"),
    reason="miopen_bn has no groupnorm_forward yet (group norm's Python API)",
)


def drive(capsys, *arguments: str) -> tuple:
    """(exit status, stdout, stderr) of ``miopen-bn-driver ARGUMENTS``."""
    status = main(list(arguments))
    out, err = capsys.readouterr()
    return status, out, err
