"""One exception class per status, each also the natural builtin."""

from __future__ import annotations

import pickle
import threading

import numpy as np
import pytest

import miopen_bn
from miopen_bn import errors

BUILTIN_FOR_STATUS = {
    2: ValueError,
    3: ValueError,
    4: MemoryError,
    5: RuntimeError,
    6: NotImplementedError,
    7: RuntimeError,
    8: NotImplementedError,
}


@pytest.mark.parametrize("status", range(1, 11))
def test_every_failing_status_has_its_class(status, lib, ffi):
    error = errors.error_for_status(status, "why")
    assert isinstance(error, miopen_bn.MIOpenError)
    assert type(error) is miopen_bn.ERROR_FOR_STATUS[status]
    assert error.status == status and error.message == "why"
    name = ffi.string(lib.miopenGetErrorString(status)).decode()
    assert error.status_name == name and name in str(error)
    if status in BUILTIN_FOR_STATUS:
        assert isinstance(error, BUILTIN_FOR_STATUS[status])


def test_the_three_named_mappings():
    assert issubclass(miopen_bn.MIOpenBadParmError, ValueError)
    assert issubclass(miopen_bn.MIOpenAllocFailedError, MemoryError)
    assert issubclass(miopen_bn.MIOpenNotImplementedError, NotImplementedError)


def test_error_strings_match_the_spec(lib, ffi):
    assert ffi.string(lib.miopenGetErrorString(3)) == b"miopenStatusBadParm"
    assert ffi.string(lib.miopenGetErrorString(0)) == b"miopenStatusSuccess"
    assert ffi.string(lib.miopenGetErrorString(1234)) == b"Unknown error status"


def test_check_passes_success_and_raises_with_the_library_message(lib, ffi):
    miopen_bn.check(0)
    assert lib.miopenSet4dTensorDescriptor(ffi.NULL, lib.miopenFloat, 1, 1, 1, 1) == 3
    with pytest.raises(miopen_bn.MIOpenBadParmError) as info:
        miopen_bn.check(3)
    assert info.value.status == 3
    assert "tensorDesc" in info.value.message and "NULL" in info.value.message
    assert "miopenStatusBadParm" in str(info.value)


def test_unknown_status_raises_the_base_class():
    with pytest.raises(miopen_bn.MIOpenError) as info:
        miopen_bn.check(77)
    assert type(info.value) is miopen_bn.MIOpenError and info.value.status == 77


def test_errors_pickle():
    error = errors.error_for_status(6, "no kernel")
    copy = pickle.loads(pickle.dumps(error))
    assert type(copy) is type(error) and copy.status == 6 and copy.message == "no kernel"


def test_library_errors_reach_python_through_the_api():
    x = np.ones((2, 3), np.float32)
    with pytest.raises(miopen_bn.MIOpenBadParmError, match="epsilon"):
        miopen_bn.batchnorm_forward_training(
            x + np.arange(6).reshape(2, 3), np.ones(3, np.float32), np.zeros(3, np.float32), epsilon=-1.0
        )


def test_last_error_message_is_per_thread_and_cleared_by_success(lib, ffi):
    assert lib.miopenSet4dTensorDescriptor(ffi.NULL, lib.miopenFloat, 1, 1, 1, 1) == 3
    assert b"NULL" in ffi.string(lib.miopenBNGetLastErrorMessage())
    seen = []
    thread = threading.Thread(target=lambda: seen.append(ffi.string(lib.miopenBNGetLastErrorMessage())))
    thread.start()
    thread.join()
    assert seen == [b""]
    assert b"NULL" in ffi.string(lib.miopenBNGetLastErrorMessage())
    with miopen_bn.TensorDescriptor("float32", (1, 2, 3, 4)):
        pass
    assert ffi.string(lib.miopenBNGetLastErrorMessage()) == b""
