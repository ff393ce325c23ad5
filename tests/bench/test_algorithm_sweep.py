"""bench/algorithm_sweep.py's sweep on the host: each algorithm is set for
its own measurement, a refusal is recorded (any other error is not), and
the variable is left as it was."""

from __future__ import annotations

import os
import sys

import pytest

from support import REPO  # noqa: E402

sys.path.insert(0, str(REPO / "bench"))

import algorithm_sweep  # noqa: E402

VARIABLE = algorithm_sweep.VARIABLE


class Refused(Exception):
    pass


def test_each_algorithm_measured_under_its_own_setting(monkeypatch):
    monkeypatch.setenv(VARIABLE, "multi_pass")
    seen = []

    def measure(call):
        seen.append(os.environ.get(VARIABLE))
        if os.environ.get(VARIABLE) == "wave_tiles":
            raise Refused("wave_tiles cannot serve this call")
        return (5.0, 2.0)

    results = algorithm_sweep.sweep(lambda: None, ["default", "nhwc_columns", "wave_tiles"], measure,
                                    lambda error: isinstance(error, Refused))
    assert seen == [None, "nhwc_columns", "wave_tiles"]
    assert results == {"default": (5.0, 2.0), "nhwc_columns": (5.0, 2.0), "wave_tiles": None}
    assert os.environ[VARIABLE] == "multi_pass"
    assert algorithm_sweep.line("bn_train:2x8x4x4:fp16:nchw", results).endswith(
        "default=5.00/2.00  nhwc_columns=5.00/2.00  wave_tiles=refused")


def test_other_errors_propagate_and_the_variable_is_restored(monkeypatch):
    monkeypatch.delenv(VARIABLE, raising=False)

    def measure(call):
        raise RuntimeError("out of memory")

    with pytest.raises(RuntimeError):
        algorithm_sweep.sweep(lambda: None, ["resident"], measure, lambda error: isinstance(error, Refused))
    assert VARIABLE not in os.environ
