"""What other threads may do to a call's objects while it runs.

* miopenDestroy (and Handle.close()) on the handle of a call in flight
  waits for the call, and a call that starts afterwards gets BadParm.
* A descriptor re-set while a call runs: the call works on the copy it took
  at its start, so its result is that of the old or of the new descriptor,
  never a mix (a mix of one setting's lengths and the other's strides would
  read past the buffer; .ci/sanitize runs this file under ASan).
"""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest
from support.entry_points import last_error

import miopen_bn

BAD_PARM = 3


def new_handle(lib, ffi):
    created = ffi.new("miopenHandle_t*")
    assert lib.miopenBNCreateWithBackend(created, lib.miopenBNBackendCPU) == 0
    return created[0]


def new_descriptor(lib, ffi, shape):
    created = ffi.new("miopenTensorDescriptor_t*")
    assert lib.miopenCreateTensorDescriptor(created) == 0
    set_shape(lib, created[0], shape)
    return created[0]


def set_shape(lib, desc, shape):
    assert lib.miopenSet4dTensorDescriptor(desc, lib.miopenFloat, *shape) == 0


class Inference:
    """Inference with the batch's statistics: x -> y on `shape` (packed)."""

    def __init__(self, lib, ffi, shape, seed=0):
        self.lib, self.ffi = lib, ffi
        self.x = np.random.default_rng(seed).standard_normal(int(np.prod(shape)), dtype=np.float32)
        self.y = np.full_like(self.x, np.nan)
        self.ones, self.zeros = np.ones(shape[1], np.float32), np.zeros(shape[1], np.float32)
        self.x_desc = new_descriptor(lib, ffi, shape)
        self.param_desc = new_descriptor(lib, ffi, (1, shape[1], 1, 1))
        self.alpha, self.beta = ffi.new("float*", 1.0), ffi.new("float*", 0.0)

    def __call__(self, handle) -> int:
        ffi, lib = self.ffi, self.lib
        return lib.miopenBatchNormalizationForwardInference(
            handle, lib.miopenBNSpatial, self.alpha, self.beta, self.x_desc, ffi.from_buffer(self.x),
            self.x_desc, ffi.from_buffer(self.y), self.param_desc, ffi.from_buffer(self.ones),
            ffi.from_buffer(self.zeros), ffi.NULL, ffi.NULL, 1e-5)

    def close(self):
        for desc in (self.x_desc, self.param_desc):
            assert self.lib.miopenDestroyTensorDescriptor(desc) == 0


def destroy_during_call(destroy, run_call, output) -> bool:
    """Runs run_call() in a thread and destroy() about a millisecond later.
    If the call succeeds, destroy must not have returned before it ended:
    its NaN-poisoned output must be complete when destroy returns.  True when
    the destroy came during the call (it waited), False when it came before
    (the call was refused) or after (the call was quick)."""
    output.fill(np.nan)
    status = []
    thread = threading.Thread(target=lambda: status.append(run_call()))
    thread.start()
    time.sleep(0.001)
    began = time.monotonic()
    destroy()
    waited = time.monotonic() - began
    complete = not np.isnan(output).any()
    thread.join()
    if status == [BAD_PARM]:
        return False  # it came first: refused, not a crash
    assert status == [0]
    assert complete, "destroy returned while the call was still writing its output"
    return waited > 0.0005


# About 5 ms of inference on 2 cores: long enough to be destroyed during.
SHAPE = (16, 32, 128, 128)


def test_destroy_waits_for_the_call_in_flight(lib, ffi):
    call = Inference(lib, ffi, SHAPE)
    try:
        for _ in range(30):
            handle = new_handle(lib, ffi)
            destroyed = []
            during = destroy_during_call(lambda: destroyed.append(lib.miopenDestroy(handle)), lambda: call(handle),
                                         call.y)
            assert destroyed == [0]
            assert call(handle) == BAD_PARM
            assert "not a live handle" in last_error(lib, ffi)
            if during:
                return
        pytest.fail("no destroy came during a call")
    finally:
        call.close()


def test_handle_close_from_another_thread_waits_for_the_call():
    x = np.random.default_rng(0).standard_normal(SHAPE, dtype=np.float32)
    ones, zeros = np.ones(SHAPE[1], np.float32), np.zeros(SHAPE[1], np.float32)
    y = np.empty_like(x)
    for _ in range(30):
        handle = miopen_bn.Handle("cpu")

        def run_call():
            try:
                miopen_bn.batchnorm_forward_inference(x, ones, zeros, y=y, handle=handle)
                return 0
            except ValueError:  # closed before the call began
                return BAD_PARM

        if destroy_during_call(handle.close, run_call, y):
            with pytest.raises(ValueError, match="closed"):
                miopen_bn.batchnorm_forward_inference(x, ones, zeros, handle=handle)
            return
    pytest.fail("no close came during a call")


def test_a_descriptor_re_set_during_calls_gives_the_old_or_the_new_result(lib, ffi):
    """Two settings with the same element count: (2, 16, 16, 64) and
    (2, 16, 64, 16), both packed.  One's lengths with the other's strides
    would reach element 1*16384 + 15*1024 + 63*64 + 15 > 32767."""
    first, second = (2, 16, 16, 64), (2, 16, 64, 16)
    call = Inference(lib, ffi, first)
    handle = new_handle(lib, ffi)
    try:
        expected = []
        for shape in (first, second):
            set_shape(lib, call.x_desc, shape)
            assert call(handle) == 0
            expected.append(call.y.copy())
        stop = threading.Event()

        def flip():
            while not stop.is_set():
                for shape in (first, second):
                    set_shape(lib, call.x_desc, shape)

        flipper = threading.Thread(target=flip)
        flipper.start()
        try:
            for _ in range(2000):
                call.y.fill(np.nan)
                assert call(handle) == 0
                assert any(np.array_equal(call.y, e) for e in expected), "a result of neither setting"
        finally:
            stop.set()
            flipper.join()
    finally:
        assert lib.miopenDestroy(handle) == 0
        call.close()
