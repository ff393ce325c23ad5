"""Destroyed, twice-destroyed and never-created handles and descriptors.

MIOpen dereferences whatever pointer it is given; here every entry point
looks its object arguments up among the live ones first, so a stale pointer
is BadParm with a message, never a use after free (the sanitizer run of
these tests would report one), and the call writes nothing."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from support.entry_points import last_error as message

BAD_PARM = 3


@pytest.fixture
def dead_descriptor(lib, ffi):
    """Destroyed before the test creates anything else (request it after any
    live one): a descriptor created later could reuse the address, which no
    registry can tell apart."""
    created = ffi.new("miopenTensorDescriptor_t*")
    assert lib.miopenCreateTensorDescriptor(created) == 0
    assert lib.miopenSet4dTensorDescriptor(created[0], lib.miopenFloat, 2, 3, 4, 5) == 0
    assert lib.miopenDestroyTensorDescriptor(created[0]) == 0
    return created[0]


@pytest.fixture
def dead_handle(lib, ffi):
    created = ffi.new("miopenHandle_t*")
    assert lib.miopenBNCreateWithBackend(created, lib.miopenBNBackendCPU) == 0
    assert lib.miopenDestroy(created[0]) == 0
    return created[0]


def test_destroying_twice_is_bad_parm(lib, ffi, dead_descriptor, dead_handle):
    assert lib.miopenDestroyTensorDescriptor(dead_descriptor) == BAD_PARM
    assert "not a live tensor descriptor" in message(lib, ffi)
    assert lib.miopenDestroy(dead_handle) == BAD_PARM
    assert "not a live handle" in message(lib, ffi)


def test_foreign_pointers_are_not_objects(lib, ffi):
    """An address the library never handed out (here: a plain allocation)."""
    foreign = ffi.new("char[4096]")
    desc = ffi.cast("miopenTensorDescriptor_t", foreign)
    handle = ffi.cast("miopenHandle_t", foreign)
    assert lib.miopenSet4dTensorDescriptor(desc, lib.miopenFloat, 1, 2, 3, 4) == BAD_PARM
    assert lib.miopenDestroyTensorDescriptor(desc) == BAD_PARM
    assert lib.miopenSetStream(handle, ffi.NULL) == BAD_PARM
    assert lib.miopenDestroy(handle) == BAD_PARM
    assert bytes(ffi.buffer(foreign)) == bytes(4096)  # nothing was written into it


def test_every_descriptor_entry_point_refuses_a_destroyed_one(lib, ffi, desc, dead_descriptor):
    d, live = dead_descriptor, desc
    dims, ints = ffi.new("int[]", [2, 3, 4, 5]), [ffi.new("int*", -1) for _ in range(8)]
    dtype, size, nbytes = ffi.new("miopenDataType_t*"), ffi.new("int*", -1), ffi.new("size_t*", 7)
    calls = {
        "Set4d": lambda: lib.miopenSet4dTensorDescriptor(d, lib.miopenFloat, 2, 3, 4, 5),
        "Set4dEx": lambda: lib.miopenSet4dTensorDescriptorEx(d, lib.miopenFloat, 2, 3, 4, 5, 60, 20, 5, 1),
        "Set": lambda: lib.miopenSetTensorDescriptor(d, lib.miopenFloat, 4, dims, ffi.NULL),
        "SetWithLayout": lambda: lib.miopenSetNdTensorDescriptorWithLayout(d, lib.miopenFloat, 0, dims, 4),
        "Get4d": lambda: lib.miopenGet4dTensorDescriptor(d, dtype, *ints),
        "Get": lambda: lib.miopenGetTensorDescriptor(d, dtype, dims, dims),
        "GetSize": lambda: lib.miopenGetTensorDescriptorSize(d, size),
        "GetNumBytes": lambda: lib.miopenGetTensorNumBytes(d, nbytes),
        "Derive into": lambda: lib.miopenDeriveBNTensorDescriptor(d, live, lib.miopenBNSpatial),
        "Derive from": lambda: lib.miopenDeriveBNTensorDescriptor(live, d, lib.miopenBNSpatial),
    }
    for name, call in calls.items():
        assert call() == BAD_PARM, name
        assert "not a live tensor descriptor" in message(lib, ffi), name
    assert [i[0] for i in ints] == [-1] * 8 and size[0] == -1 and nbytes[0] == 7
    assert list(dims) == [2, 3, 4, 5]


def test_every_handle_entry_point_refuses_a_destroyed_one(lib, ffi, dead_handle):
    h = dead_handle
    stream, backend, time = ffi.new("miopenAcceleratorQueue_t*"), ffi.new("miopenBNBackend_t*", 7), ffi.new(
        "float*", -1.0
    )
    calls = {
        "SetStream": lambda: lib.miopenSetStream(h, ffi.NULL),
        "GetStream": lambda: lib.miopenGetStream(h, stream),
        "EnableProfiling": lambda: lib.miopenEnableProfiling(h, True),
        "GetKernelTime": lambda: lib.miopenGetKernelTime(h, time),
        "GetBackend": lambda: lib.miopenBNGetBackend(h, backend),
    }
    for name, call in calls.items():
        assert call() == BAD_PARM, name
        assert "not a live handle" in message(lib, ffi), name
    assert backend[0] == 7 and time[0] == -1.0


LOGGED_CALL = """
import miopen_bn
ffi, lib = miopen_bn.ffi, miopen_bn.lib
created = ffi.new("miopenTensorDescriptor_t*")
assert lib.miopenCreateTensorDescriptor(created) == 0
assert lib.miopenSet4dTensorDescriptor(created[0], lib.miopenFloat, 2, 3, 4, 5) == 0
assert lib.miopenDestroyTensorDescriptor(created[0]) == 0
assert lib.miopenGetTensorNumBytes(created[0], ffi.new("size_t*")) == 3
"""


def test_api_logging_does_not_read_a_destroyed_descriptor(tmp_path):
    """Arguments are logged before they are checked: the logger must look the
    descriptor up too, not print what is left in freed memory."""
    log = tmp_path / "calls.log"
    env = {**os.environ, "MIOPEN_ENABLE_LOGGING": "1", "MIOPEN_LOG_LEVEL": "3", "MIOPEN_BN_LOG_FILE": str(log)}
    subprocess.run([sys.executable, "-c", LOGGED_CALL], check=True, env=env, timeout=60)
    lines = [line for line in log.read_text().splitlines() if "[miopenGetTensorNumBytes]" in line]
    assert len(lines) == 2, lines  # the call with its arguments, then its error
    assert "(not a live descriptor)" in lines[0] and "strides" not in lines[0]
    assert "not a live tensor descriptor" in lines[1]
