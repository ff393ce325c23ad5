"""Handle and TensorDescriptor: lifetimes, context managers, accessors."""

from __future__ import annotations

import gc
import threading

import numpy as np
import pytest

import miopen_bn


def test_handle_context_manager_and_idempotent_close():
    with miopen_bn.Handle("cpu") as handle:
        assert handle.backend == "cpu" and not handle.closed
        assert "backend=cpu" in repr(handle)
    assert handle.closed
    handle.close()
    handle.close()
    assert "closed" in repr(handle)
    with pytest.raises(ValueError, match="closed"):
        _ = handle.ptr


def test_handle_finalizer_destroys_forgotten_handles():
    handle = miopen_bn.Handle("cpu")
    finalizer = handle._finalizer
    del handle
    gc.collect()
    assert not finalizer.alive


def test_auto_handle_has_a_concrete_backend():
    with miopen_bn.Handle() as handle:
        assert handle.backend in ("cpu", "gpu")


def test_unknown_backend_is_a_value_error():
    with pytest.raises(ValueError, match="backend"):
        miopen_bn.Handle("tpu")


def test_gpu_handle_without_gpu_is_bad_parm(lib):
    if miopen_bn.gpu_available():
        pytest.skip("a GPU is available")
    with pytest.raises(miopen_bn.MIOpenBadParmError, match="GPU"):
        miopen_bn.Handle("gpu")


def test_cpu_handle_keeps_its_stream():
    with miopen_bn.Handle("cpu", stream=0x1234) as handle:
        assert handle.stream == 0x1234
        handle.stream = None
        assert handle.stream == 0

        class FakeStream:
            ptr = 0x40

        handle.stream = FakeStream()
        assert handle.stream == 0x40
        with pytest.raises(TypeError, match="stream"):
            handle.stream = "default"


def test_profiling_reports_a_time(cpu_handle):
    cpu_handle.enable_profiling(True)
    x = np.random.default_rng(1).standard_normal((8, 4, 16, 16)).astype(np.float32)
    miopen_bn.batchnorm_forward_training(
        x, np.ones(4, np.float32), np.zeros(4, np.float32), handle=cpu_handle
    )
    assert cpu_handle.kernel_time_ms() >= 0.0
    cpu_handle.enable_profiling(False)


def test_default_handles_are_per_thread():
    mine = miopen_bn.default_handle("cpu")
    assert miopen_bn.default_handle("cpu") is mine
    theirs = []
    thread = threading.Thread(target=lambda: theirs.append(miopen_bn.default_handle("cpu")))
    thread.start()
    thread.join()
    assert theirs[0] is not mine


def test_a_closed_default_handle_is_replaced():
    first = miopen_bn.default_handle("cpu")
    first.close()
    second = miopen_bn.default_handle("cpu")
    assert second is not first and not second.closed


def test_descriptor_packed_and_strided():
    with miopen_bn.TensorDescriptor("float16", (2, 3, 4, 5)) as desc:
        assert desc.dtype == "float16" and desc.shape == (2, 3, 4, 5)
        assert desc.strides == (60, 20, 5, 1) and desc.rank == 4
        assert desc.num_bytes == 2 * 120
    with miopen_bn.TensorDescriptor("float32", (2, 3), (10, 2)) as desc:
        assert desc.strides == (10, 2) and desc.num_bytes == 4 * (1 + 10 + 4)


@pytest.mark.parametrize(
    "layout, lens, strides",
    [
        ("NCHW", (2, 3, 4, 5), (60, 20, 5, 1)),
        ("NHWC", (2, 3, 4, 5), (60, 1, 15, 3)),
        ("NCDHW", (2, 3, 4, 5, 6), (360, 120, 30, 6, 1)),
        ("NDHWC", (2, 3, 4, 5, 6), (360, 1, 90, 18, 3)),
    ],
)
def test_descriptor_layouts(layout, lens, strides):
    with miopen_bn.TensorDescriptor("bfloat16", lens, layout=layout) as desc:
        assert desc.shape == lens and desc.strides == strides and desc.dtype == "bfloat16"


def test_descriptor_close_is_idempotent_and_finalized():
    desc = miopen_bn.TensorDescriptor()
    desc.close()
    desc.close()
    assert desc.closed and "closed" in repr(desc)
    with pytest.raises(ValueError, match="closed"):
        _ = desc.ptr
    other = miopen_bn.TensorDescriptor("float32", (1, 2))
    finalizer = other._finalizer
    del other
    gc.collect()
    assert not finalizer.alive


def test_descriptor_errors():
    with pytest.raises(miopen_bn.MIOpenBadParmError, match="length"):
        miopen_bn.TensorDescriptor("float32", (2, 0, 3))
    with pytest.raises(TypeError):
        miopen_bn.TensorDescriptor("int8", (2, 3))
    with pytest.raises(TypeError, match="both"):
        miopen_bn.TensorDescriptor("float32")
    with pytest.raises(ValueError, match="layout"):
        miopen_bn.TensorDescriptor("float32", (1, 2, 3, 4), layout="CHWN")
    with pytest.raises(ValueError, match="C int"):
        miopen_bn.TensorDescriptor("float32", (2**40, 1))


@pytest.mark.parametrize("mode, expected", [("spatial", (1, 5, 1, 1)), ("per_activation", (1, 5, 6, 7))])
def test_derive_bn_descriptor(mode, expected):
    with miopen_bn.TensorDescriptor("float16", (4, 5, 6, 7)) as x_desc:
        with miopen_bn.TensorDescriptor.derive_bn(x_desc, mode) as derived:
            assert derived.shape == expected and derived.dtype == "float32"
    with pytest.raises(ValueError, match="mode"):
        with miopen_bn.TensorDescriptor("float32", (4, 5, 6, 7)) as x_desc:
            miopen_bn.TensorDescriptor.derive_bn(x_desc, "channel")


def test_raw_tensor_from_descriptor(cpu_handle):
    rng = np.random.default_rng(3)
    x = rng.standard_normal((4, 3, 2, 2)).astype(np.float32)
    y = np.full_like(x, np.nan)
    with miopen_bn.TensorDescriptor("float32", x.shape) as desc:
        raw_x = miopen_bn.RawTensor(x.ctypes.data, desc)
        raw_y = miopen_bn.RawTensor(y.ctypes.data, shape=y.shape, dtype=np.float32)
    assert raw_x.shape == x.shape and raw_x.strides == (12, 4, 2, 1)
    out = miopen_bn.batchnorm_forward_inference(
        raw_x, np.ones(3, np.float32), np.zeros(3, np.float32), y=raw_y, handle=cpu_handle
    )
    assert out is raw_y
    expected = miopen_bn.reference.batchnorm_forward_inference(x, np.ones(3), np.zeros(3))
    miopen_bn.tolerances.check(y, expected, "float32", "elementwise", "y")


def test_raw_tensor_rejects_bad_arguments():
    with pytest.raises(TypeError, match="integer pointer"):
        miopen_bn.RawTensor(1.5, shape=(1, 2), dtype="float32")
    with pytest.raises(TypeError, match="shape and a dtype"):
        miopen_bn.RawTensor(16, shape=(1, 2))
    with pytest.raises(ValueError, match="strides"):
        miopen_bn.RawTensor(16, shape=(1, 2), dtype="float32", strides=(1,))
