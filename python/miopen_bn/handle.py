"""``Handle``: a library context on one backend, plus per-thread defaults."""

from __future__ import annotations

import threading

from .cdef import enum_value
from .library import load
from .native_object import NativeObject

BACKEND_CODES = {  # miopenBNBackend_t
    "auto": enum_value("miopenBNBackendAuto"),
    "cpu": enum_value("miopenBNBackendCPU"),
    "gpu": enum_value("miopenBNBackendGPU"),
}
BACKEND_NAMES = {code: name for name, code in BACKEND_CODES.items() if name != "auto"}


def stream_address(stream) -> int:
    """The address of a stream given as None, an int, or a stream object
    (CuPy ``.ptr``, PyTorch ``.cuda_stream``, or anything ``int()`` accepts)."""
    if stream is None:
        return 0
    for attribute in ("ptr", "cuda_stream"):
        value = getattr(stream, attribute, None)
        if isinstance(value, int):
            return value
    try:
        if isinstance(stream, (str, bytes, float)):
            raise TypeError
        return int(stream)
    except (TypeError, ValueError):
        raise TypeError(
            f"stream must be None, an int or a stream object, got {type(stream).__name__}"
        ) from None


class Handle(NativeObject):
    """A library handle on ``backend`` ("auto", "cpu" or "gpu").

    ``stream`` (GPU only; a CPU handle keeps and ignores it) is the queue work
    goes to.  Use as a context manager, or call ``close()`` (idempotent); a
    finalizer destroys forgotten handles.
    """

    _what = "handle"
    _backend = None
    _stream = None

    def __init__(self, backend: str = "auto", stream=None):
        if backend not in BACKEND_CODES:
            raise ValueError(f"backend must be one of {', '.join(BACKEND_CODES)}, got {backend!r}")
        library = load()
        ffi, lib = library.ffi, library.lib
        created = ffi.new("miopenHandle_t*")
        library.check(lib.miopenBNCreateWithBackend(created, BACKEND_CODES[backend]))
        self._library = library
        self._own(created[0], lib.miopenDestroy)
        if stream is not None:
            try:
                self.stream = stream
            except BaseException:
                self.close()
                raise

    @property
    def backend(self) -> str:
        """ "cpu" or "gpu": where this handle's work runs (fixed at creation,
        asked of the library once: every call reads it)."""
        ptr = self.ptr  # a closed handle raises here, whether or not the answer is known
        if self._backend is None:
            ffi, lib = self._library.ffi, self._library.lib
            value = ffi.new("miopenBNBackend_t*")
            self._library.check(lib.miopenBNGetBackend(ptr, value))
            self._backend = BACKEND_NAMES[int(value[0])]
        return self._backend

    @property
    def stream(self) -> int:
        """The stream's address, asked of the library once and then kept
        (the setter forgets it): planned calls on CUDA tensors compare it
        with torch's current stream on every call."""
        ptr = self.ptr  # a closed handle raises here, whether or not the answer is known
        if self._stream is None:
            ffi, lib = self._library.ffi, self._library.lib
            value = ffi.new("miopenAcceleratorQueue_t*")
            self._library.check(lib.miopenGetStream(ptr, value))
            self._stream = int(ffi.cast("uintptr_t", value[0]))
        return self._stream

    @stream.setter
    def stream(self, stream) -> None:
        ffi, lib = self._library.ffi, self._library.lib
        queue = ffi.cast("miopenAcceleratorQueue_t", stream_address(stream))
        self._stream = None
        self._library.check(lib.miopenSetStream(self.ptr, queue))

    @property
    def tuning_policy(self) -> int:
        """miopenTuningPolicy_t (1 none ... 5 db clean): kept, changes nothing here."""
        value = self._library.ffi.new("miopenTuningPolicy_t*")
        self._library.check(self._library.lib.miopenGetTuningPolicy(self.ptr, value))
        return int(value[0])

    @tuning_policy.setter
    def tuning_policy(self, policy: int) -> None:
        self._library.check(self._library.lib.miopenSetTuningPolicy(self.ptr, int(policy)))

    def enable_profiling(self, enable: bool = True) -> None:
        self._library.check(self._library.lib.miopenEnableProfiling(self.ptr, bool(enable)))

    def kernel_time_ms(self) -> float:
        """Time of the last call made with profiling on, in milliseconds."""
        value = self._library.ffi.new("float*")
        self._library.check(self._library.lib.miopenGetKernelTime(self.ptr, value))
        return float(value[0])

    def __repr__(self) -> str:
        if self.closed:
            return "<miopen_bn.Handle closed>"
        return f"<miopen_bn.Handle backend={self.backend} stream=0x{self.stream:x}>"


_per_thread = threading.local()


def default_handle(backend: str) -> Handle:
    """This thread's handle for ``backend``, created on first use."""
    handles = getattr(_per_thread, "handles", None)
    if handles is None:
        handles = _per_thread.handles = {}
    handle = handles.get(backend)
    if handle is None or handle.closed:
        handle = handles[backend] = Handle(backend)
    return handle
