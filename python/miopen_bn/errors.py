"""Exceptions for failing library calls, one class per ``miopenStatus_t``.

Each class also derives from the builtin exception a Python caller would
expect for that status, so ``except ValueError`` catches a bad argument
whether Python or the library noticed it first.
"""

from __future__ import annotations

from typing import Callable

from .cdef import enum_names, enum_value

# {value: name} of every miopenStatus_t, as the header defines them.
STATUS_NAMES = enum_names("miopenStatus_t")
SUCCESS = enum_value("miopenStatusSuccess")


class MIOpenError(Exception):
    """A library call returned a status other than success.

    ``status`` is the ``miopenStatus_t`` value and ``message`` the library's
    thread-local explanation (``miopenBNGetLastErrorMessage``).
    """

    def __init__(self, status: int, message: str = "", status_name: str | None = None):
        self.status = int(status)
        self.message = message
        self.status_name = status_name or STATUS_NAMES.get(self.status, "Unknown error status")
        text = f"{self.status_name} ({self.status})"
        super().__init__(f"{text}: {message}" if message else text)

    def __reduce__(self):
        return (type(self), (self.status, self.message, self.status_name))


class MIOpenNotInitializedError(MIOpenError):
    pass


class MIOpenInvalidValueError(MIOpenError, ValueError):
    pass


class MIOpenBadParmError(MIOpenError, ValueError):
    pass


class MIOpenAllocFailedError(MIOpenError, MemoryError):
    pass


class MIOpenInternalError(MIOpenError, RuntimeError):
    pass


class MIOpenNotImplementedError(MIOpenError, NotImplementedError):
    pass


class MIOpenUnknownError(MIOpenError, RuntimeError):
    pass


class MIOpenUnsupportedOpError(MIOpenError, NotImplementedError):
    pass


class MIOpenGpuOperationsSkippedError(MIOpenError):
    pass


class MIOpenVersionMismatchError(MIOpenError):
    pass


_CLASS_FOR_STATUS_NAME = {
    "miopenStatusNotInitialized": MIOpenNotInitializedError,
    "miopenStatusInvalidValue": MIOpenInvalidValueError,
    "miopenStatusBadParm": MIOpenBadParmError,
    "miopenStatusAllocFailed": MIOpenAllocFailedError,
    "miopenStatusInternalError": MIOpenInternalError,
    "miopenStatusNotImplemented": MIOpenNotImplementedError,
    "miopenStatusUnknownError": MIOpenUnknownError,
    "miopenStatusUnsupportedOp": MIOpenUnsupportedOpError,
    "miopenStatusGpuOperationsSkipped": MIOpenGpuOperationsSkippedError,
    "miopenStatusVersionMismatch": MIOpenVersionMismatchError,
}
ERROR_FOR_STATUS: dict[int, type[MIOpenError]] = {
    enum_value(name): cls for name, cls in _CLASS_FOR_STATUS_NAME.items()
}


def error_for_status(status: int, message: str = "", status_name: str | None = None) -> MIOpenError:
    """The exception object for a failing status (MIOpenError for unknown values)."""
    cls = ERROR_FOR_STATUS.get(int(status), MIOpenError)
    return cls(status, message, status_name)


def make_checker(ffi, lib) -> Callable[[int], None]:
    """A ``check(status)`` bound to one loaded library: raises on failure."""

    def check(status: int) -> None:
        if status == SUCCESS:
            return
        name = ffi.string(lib.miopenGetErrorString(status)).decode("utf-8", "replace")
        message = ffi.string(lib.miopenBNGetLastErrorMessage()).decode("utf-8", "replace")
        raise error_for_status(status, message, name)

    return check
