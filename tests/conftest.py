"""Shared test configuration: the hypothesis profile, GPU skipping, fixtures."""

from __future__ import annotations

import os

import numpy as np
import pytest
import support
from hypothesis import HealthCheck, settings
from support import backends, fuzz_record

import miopen_bn

# "ci" keeps the whole suite to a few minutes on 2 cores; "thorough" is for
# hunting (MIOPEN_BN_HYPOTHESIS_PROFILE=thorough).
settings.register_profile("ci", deadline=None, max_examples=100, suppress_health_check=[HealthCheck.too_slow])
settings.register_profile(
    "thorough", deadline=None, max_examples=400, suppress_health_check=[HealthCheck.too_slow]
)
settings.load_profile(os.environ.get("MIOPEN_BN_HYPOTHESIS_PROFILE", "ci"))


def pytest_collection_modifyitems(config, items):
    if os.environ.get("MIOPEN_BN_STRESS") != "1":
        for item in items:
            if item.get_closest_marker("stress"):
                item.add_marker(pytest.mark.skip(reason="stress case: set MIOPEN_BN_STRESS=1 to run it"))
    gpu_items = [item for item in items if item.get_closest_marker("gpu")]
    if gpu_items and not miopen_bn.gpu_available():
        reason = (
            "no GPU: the library has no GPU backend"
            if not miopen_bn.lib.miopenBNHasGpuSupport()
            else "no GPU: no usable device"
        )
        for item in gpu_items:
            item.add_marker(pytest.mark.skip(reason=reason))


@pytest.fixture(scope="session")
def library():
    return miopen_bn.load()


@pytest.fixture(scope="session")
def ffi(library):
    return library.ffi


@pytest.fixture(scope="session")
def lib(library):
    return library.lib


@pytest.fixture
def desc(lib, ffi):
    """A raw descriptor already set to float32 (2, 3, 4, 5), destroyed afterwards."""
    created = ffi.new("miopenTensorDescriptor_t*")
    assert lib.miopenCreateTensorDescriptor(created) == 0
    assert lib.miopenSet4dTensorDescriptor(created[0], lib.miopenFloat, 2, 3, 4, 5) == 0
    yield created[0]
    assert lib.miopenDestroyTensorDescriptor(created[0]) == 0


@pytest.fixture
def cpu_handle():
    with miopen_bn.Handle("cpu") as handle:
        yield handle


@pytest.fixture(params=["cpu", pytest.param("gpu", marks=pytest.mark.gpu)])
def backend(request):
    """A backends.Side: the same test on a CPU handle and (device runs) a GPU one."""
    if request.param == "gpu":
        torch = pytest.importorskip("torch")
        if not torch.cuda.is_available():
            pytest.skip("torch sees no CUDA device")
    side = backends.Side(request.param)
    yield side
    side.close()


@pytest.fixture
def rng(request):
    """A generator seeded from the test's name: fresh data per test, reproducible."""
    return np.random.default_rng(support.seed(request.node.nodeid))


def pytest_terminal_summary(terminalreporter):
    """The fuzzer's case counts (tests/fuzz/test_fuzz_abi.py), for the record."""
    for line in fuzz_record.summary_lines():
        terminalreporter.write_line(line)
    fuzz_record.write_report()
