"""Where the driver's arrays live: host arrays pass through, device copies
keep the memory layout, and --backend gpu without PyTorch or CuPy says why."""

from __future__ import annotations

import numpy as np
import pytest

from miopen_bn.driver import memory
from miopen_bn.driver.tensors import TensorFactory


@pytest.mark.parametrize("shape, channels_last, packed_shape", [
    ((2, 3, 4, 5), False, (2, 3, 4, 5)),
    ((2, 3, 4, 5), True, (2, 4, 5, 3)),
    ((2, 3, 6, 4, 5), True, (2, 6, 4, 5, 3)),
    ((2, 3, 7), True, (2, 7, 3)),
])
def test_device_copies_keep_the_layout(shape, channels_last, packed_shape):
    x = TensorFactory(shape, channels_last, seed=5).activations("float32")
    packed, back = memory._packed(x)
    assert packed.flags.c_contiguous and packed.shape == packed_shape
    np.testing.assert_array_equal(packed.transpose(back), x)


def test_host_memory_passes_arrays_and_copies_results():
    host = memory.HostMemory()
    x = np.arange(6.0).reshape(2, 3)
    assert host.to_device(x) is x
    copy = host.to_host(x)
    x[0, 0] = -1.0
    assert copy[0, 0] == 0.0


def test_gpu_memory_needs_torch_or_cupy():
    try:
        memory.memory_for("gpu")
    except memory.DriverError as error:
        assert str(error).startswith("--backend gpu needs PyTorch or CuPy device arrays: ")
        assert "PyTorch" in str(error) and "CuPy" in str(error)
    else:
        pytest.skip("PyTorch or CuPy reaches a GPU here")
