"""A CI-sized selection of docs/numerics.md#shapes, each through all three entry
points in both memory layouts (NCHW-style and channels-last)."""

from __future__ import annotations

import numpy as np
import pytest
from support.strategies import CHANNELS_LAST, PACKED, activations, filled

import miopen_bn
from miopen_bn import reference
from miopen_bn.tolerances import check

SHAPES = {
    "N=1, large HxW": (1, 8, 256, 256),
    "HxW=1, N>768": (1000, 16, 1, 1),
    "C=1, huge HxW (64x1x1024x1024 cut to N=2)": (2, 1, 1024, 1024),
    "C=1, huge N, 22x22 (69328 cut to 4096)": (4096, 1, 22, 22),
    "odd primes 16x80x73x73 (N cut to 2)": (2, 80, 73, 73),
    "odd primes 16x96x35x35": (16, 96, 35, 35),
    "odd primes 13x79": (13, 79),
    "ResNet-50 64x112x112": (2, 64, 112, 112),
    "ResNet-50 256x56x56": (2, 256, 56, 56),
    "ResNet-50 1024x14x14": (4, 1024, 14, 14),
    "ResNet-50 2048x7x7": (8, 2048, 7, 7),
    "5-D 2x2x3x224x224": (2, 2, 3, 224, 224),
    "5-D 16x8x16x128x128 (cut to 1x8x16x64x64)": (1, 8, 16, 64, 64),
}


@pytest.mark.parametrize("layout", [PACKED, CHANNELS_LAST], ids=["packed", "channels_last"])
@pytest.mark.parametrize("shape", list(SHAPES.values()), ids=list(SHAPES))
def test_spec_shape(shape, layout, rng):
    modes = ["spatial"] + (["per_activation"] if int(np.prod(shape[1:])) <= 200_000 else [])
    x = filled(activations(rng, shape), "float32", layout)
    dy = filled(rng.standard_normal(shape), "float32", layout)
    for mode in modes:
        pshape = (shape[1],) if mode == "spatial" else shape[1:]
        scale = rng.uniform(0.5, 2, pshape).astype(np.float32)
        bias = rng.uniform(-1, 1, pshape).astype(np.float32)
        running_mean, running_var = np.zeros(pshape, np.float32), np.ones(pshape, np.float32)
        y, mean, inv_std = miopen_bn.batchnorm_forward_training(
            x, scale, bias, mode=mode, running_mean=running_mean, running_var=running_var
        )
        expected = reference.batchnorm_forward_training(
            x, scale, bias, mode=mode, running_mean=np.zeros(pshape), running_var=np.ones(pshape)
        )
        check(y, expected["y"], "float32", "elementwise", f"{mode} y")
        check(inv_std, expected["saved_inv_std"], "float32", "reduction", f"{mode} saved_inv_std")
        check(running_var, expected["running_var"], "float32", "reduction", f"{mode} running_var")

        y = miopen_bn.batchnorm_forward_inference(x, scale, bias, running_mean, running_var, mode=mode)
        check(
            y,
            reference.batchnorm_forward_inference(x, scale, bias, running_mean, running_var, mode=mode),
            "float32",
            "elementwise",
            f"{mode} inference y",
        )

        dx, dscale, dbias = miopen_bn.batchnorm_backward(
            x, dy, scale, saved_mean=mean, saved_inv_std=inv_std, mode=mode
        )
        grads = reference.batchnorm_backward(x, dy, scale, saved_mean=mean, saved_inv_std=inv_std, mode=mode)
        check(dx, grads["dx"], "float32", "elementwise", f"{mode} dx")
        check(dscale, grads["dscale"], "float32", "reduction", f"{mode} dscale")
        check(dbias, grads["dbias"], "float32", "reduction", f"{mode} dbias")
