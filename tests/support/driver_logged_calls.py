"""Library calls whose logged driver commands test_driver_logging.py replays.

Run as a script with MIOPEN_ENABLE_LOGGING_CMD=1 and MIOPEN_BN_LOG_FILE set
(the library reads its logging environment once per process).  Batch-norm
calls go through the public Python API; group-norm calls through the raw C
entry points, so their commands are logged whether or not a backend
implements group norm yet (the command is logged before dispatch).

``BN_CALLS`` and ``GN_CALLS`` list each call with the command it must log.
"""

from __future__ import annotations

import numpy as np

import miopen_bn
from miopen_bn.driver.tensors import TensorFactory

CPU = "cpu"


def _data(shape, dtype, channels_last, seed=0):
    return TensorFactory(shape, channels_last, seed).activations(dtype)


def _params(channels_shape, dtype, low=0.5, high=1.5, seed=1):
    return np.random.default_rng(seed).uniform(low, high, channels_shape).astype(miopen_bn.dtypes.NUMPY_DTYPE[dtype])


def _activation(activation) -> dict:
    """activation=(mode, (alpha, beta, gamma)) as the public functions take it."""
    return {} if activation is None else {"activation": activation[0], "activation_params": activation[1]}


def training(shape, dtype, pdtype, channels_last, mode, save, running, alpha=1.0, beta=0.0, activation=None,
             ping_pong=False):  # fmt: skip
    x = _data(shape, dtype, channels_last)
    pshape = miopen_bn.reference.param_shape(shape, mode)
    stats = (_params(pshape, pdtype), _params(pshape, pdtype)) if running else (None, None)
    following = (_params(pshape, pdtype), _params(pshape, pdtype)) if ping_pong else (None, None)
    y = _data(shape, dtype, channels_last, seed=2)
    miopen_bn.batchnorm_forward_training(
        x, _params(pshape, pdtype), _params(pshape, pdtype), mode=mode, running_mean=stats[0],
        running_var=stats[1], save_stats=save, alpha=alpha, beta=beta, y=y, handle=miopen_bn.default_handle(CPU),
        next_running_mean=following[0], next_running_var=following[1], **_activation(activation),
    )


def inference(shape, dtype, pdtype, channels_last, mode, estimates, activation=None, inverse=False):
    x = _data(shape, dtype, channels_last)
    pshape = miopen_bn.reference.param_shape(shape, mode)
    stats = (_params(pshape, pdtype), _params(pshape, pdtype)) if estimates else (None, None)
    miopen_bn.batchnorm_forward_inference(
        x, _params(pshape, pdtype), _params(pshape, pdtype), *stats, mode=mode,
        handle=miopen_bn.default_handle(CPU), inverse_variance=inverse, **_activation(activation),
    )


def backward(shape, dtype, pdtype, grad_dtype, channels_last, mode, saved, blend=(1.0, 0.0, 1.0, 0.0),
             activation=None):  # fmt: skip
    x = _data(shape, dtype, channels_last)
    dy = _data(shape, grad_dtype, channels_last, seed=3)
    pshape = miopen_bn.reference.param_shape(shape, mode)
    stats = (_params(pshape, pdtype), _params(pshape, pdtype)) if saved else (None, None)
    alpha_data, beta_data, alpha_param, beta_param = blend
    miopen_bn.batchnorm_backward(
        x, dy, _params(pshape, pdtype), saved_mean=stats[0], saved_inv_std=stats[1], mode=mode,
        alpha_data=alpha_data, beta_data=beta_data, alpha_param=alpha_param, beta_param=beta_param,
        dx=_data(shape, grad_dtype, channels_last, seed=4), dscale=_params(pshape, pdtype),
        dbias=_params(pshape, pdtype), handle=miopen_bn.default_handle(CPU),
        bias=None if activation is None else _params(pshape, pdtype, seed=5), **_activation(activation),
    )


S, P = "spatial", "per_activation"
F32, F16, BF16, F64 = "float32", "float16", "bfloat16", "float64"
COMMAND = "miopen-bn-driver "

BN_CALLS = [
    (lambda: training((3, 4, 5, 7), F32, F32, False, S, True, True),
     "bnorm -n 3 -c 4 -H 5 -W 7 -m 1 --forw 1 -b 0 -s 1 -r 1 --layout NCHW"),
    (lambda: training((4, 3, 2, 5, 3), BF16, F32, True, S, False, True, alpha=0.5, beta=1.0 / 3.0),
     "bnormbfp16fp32 -n 4 -c 3 -D 2 -H 5 -W 3 -m 1 --forw 1 -b 0 -s 0 -r 1 -A 0.5 -B 0.33333334 --layout NDHWC"),
    (lambda: training((5, 6), F32, F32, False, P, True, False),
     "bnorm -n 5 -c 6 -H 1 -W 1 -m 0 --forw 1 -b 0 -s 1 -r 0 --layout NCHW --rank 2"),
    (lambda: training((3, 2, 2, 3, 4), F64, F32, False, P, False, False),
     "bnormfp64fp32 -n 3 -c 2 -D 2 -H 3 -W 4 -m 0 --forw 1 -b 0 -s 0 -r 0 --layout NCDHW"),
    (lambda: inference((2, 5, 3, 4), F16, F32, True, P, True),
     "bnormfp16fp32 -n 2 -c 5 -H 3 -W 4 -m 0 --forw 2 -b 0 -s 0 -r 1 --layout NHWC"),
    (lambda: inference((3, 4, 6, 2), BF16, BF16, True, S, False),
     "bnormbfp16 -n 3 -c 4 -H 6 -W 2 -m 1 --forw 2 -b 0 -s 0 -r 0 --layout NHWC"),
    (lambda: backward((4, 3, 5, 2), F16, F16, F32, False, S, True, blend=(1.0 / 3.0, 0.25, 2.0, 0.5)),
     "bnormfp16 -n 4 -c 3 -H 5 -W 2 -m 1 --forw 0 -b 1 -s 1 -r 0 -A 0.33333334 -B 0.25 "
     "--alpha-param 2 --beta-param 0.5 --grad-type fp32 --layout NCHW"),
    (lambda: backward((3, 4, 9), F64, F64, F64, True, S, False),
     "bnormfp64 -n 3 -c 4 -H 1 -W 9 -m 1 --forw 0 -b 1 -s 0 -r 0 --layout NHWC --rank 3"),
    # Issue 25: fused activations (-f -x -y --activ_gamma), V3 (-Q), inverse variance (-I).
    (lambda: training((3, 4, 5, 6), F16, F32, True, S, True, True, activation=(9, (0.5, 1.0, 1.0)), ping_pong=True),
     "bnormfp16fp32 -n 3 -c 4 -H 5 -W 6 -m 1 --forw 1 -b 0 -s 1 -r 1 -f 9 -x 0.5 -y 1 --activ_gamma 1 -Q 1 "
     "--layout NHWC"),
    (lambda: inference((2, 5, 3, 4), F32, F32, False, S, True, activation=(2, (0.75, 1.5, 1.0)), inverse=True),
     "bnorm -n 2 -c 5 -H 3 -W 4 -m 1 --forw 2 -b 0 -s 0 -r 1 -f 2 -x 0.75 -y 1.5 --activ_gamma 1 -I 1 "
     "--layout NCHW"),
    (lambda: backward((4, 3, 5, 2), F32, F32, F32, False, P, True, activation=(8, (0.1, 1.0, 1.0))),
     "bnorm -n 4 -c 3 -H 5 -W 2 -m 0 --forw 0 -b 1 -s 1 -r 0 -f 8 -x 0.1 -y 1 --activ_gamma 1 "
     "--layout NCHW"),
    (lambda: backward((6, 2, 3, 3), BF16, F32, BF16, True, P, True),
     "bnormbfp16fp32 -n 6 -c 2 -H 3 -W 3 -m 0 --forw 0 -b 1 -s 1 -r 0 --layout NHWC"),
]


def _descriptor(array):
    return miopen_bn.TensorDescriptor(array.dtype, array.shape, [s // array.itemsize for s in array.strides])


def _gn_call(backward_call, shape, dtype, pdtype, groups, mode, channels_last, activation=0, beta=1.0):
    """One raw group-norm call on host buffers; its status does not matter here."""
    ffi, lib = miopen_bn.ffi, miopen_bn.lib
    x = _data(shape, dtype, channels_last)
    stats_dtype = F64 if dtype == F64 else F32
    weight, bias = _params((shape[1],), pdtype), _params((shape[1],), pdtype)
    mean, rstd = _params((shape[0], groups), stats_dtype), _params((shape[0], groups), stats_dtype)
    out = np.empty_like(x)
    x_desc, w_desc, s_desc = _descriptor(x), _descriptor(weight), _descriptor(mean)

    def ptr(array):
        return ffi.cast("void*", array.__array_interface__["data"][0])

    handle = miopen_bn.default_handle(CPU).ptr
    if backward_call:
        dweight, dbias = np.empty_like(weight), np.empty_like(bias)
        lib.miopenBNGroupNormBackward(
            handle, mode, x_desc.ptr, ptr(x), x_desc.ptr, ptr(x), w_desc.ptr, ptr(weight), w_desc.ptr, ptr(bias),
            s_desc.ptr, ptr(mean), s_desc.ptr, ptr(rstd), groups, activation, beta, x_desc.ptr, ptr(out),
            w_desc.ptr, ptr(dweight), w_desc.ptr, ptr(dbias))
    else:
        lib.miopenBNGroupNormForwardActivation(
            handle, mode, x_desc.ptr, ptr(x), w_desc.ptr, ptr(weight), w_desc.ptr, ptr(bias), groups, 1e-5,
            activation, beta, x_desc.ptr, ptr(out), s_desc.ptr, ptr(mean), s_desc.ptr, ptr(rstd))


GN_CALLS = [
    (dict(backward_call=False, shape=(2, 8, 4, 4), dtype=F32, pdtype=F32, groups=4, mode=1, channels_last=False),
     "groupnorm -n 2 -c 8 -H 4 -W 4 -g 4 -m 1 -F 1 -b 0 --layout NCHW"),
    (dict(backward_call=False, shape=(2, 6, 3, 5), dtype=F16, pdtype=F32, groups=3, mode=1, channels_last=True,
          activation=1, beta=0.75),
     "groupnormfp16fp32 -n 2 -c 6 -H 3 -W 5 -g 3 -m 1 -F 1 -b 0 --activation swish --activation-beta 0.75 "
     "--layout NHWC"),
    (dict(backward_call=False, shape=(3, 4, 2, 3, 3), dtype=BF16, pdtype=BF16, groups=2, mode=0, channels_last=False),
     "groupnormbfp16 -n 3 -c 4 -D 2 -H 3 -W 3 -g 2 -m 0 -F 1 -b 0 --layout NCDHW"),
    (dict(backward_call=True, shape=(2, 6, 5), dtype=F64, pdtype=F32, groups=2, mode=1, channels_last=True,
          activation=1, beta=1.5),
     "groupnormfp64fp32 -n 2 -c 6 -H 1 -W 5 -g 2 -m 1 -F 0 -b 1 --activation swish --activation-beta 1.5 "
     "--layout NHWC --rank 3"),
]


if __name__ == "__main__":
    for call, _ in BN_CALLS:
        call()
    for arguments, _ in GN_CALLS:
        _gn_call(**arguments)
