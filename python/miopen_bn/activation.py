"""``ActivationDescriptor``: an activation mode (``miopenActivationMode_t``)
with its alpha, beta and gamma, as batch norm's fused-activation entry
points take it.  Modes by name as in ``reference.ACTIVATION_MODES``
("pasthru", "logistic", "tanh", "relu", "softrelu", "abs", "power",
"clippedrelu", "leakyrelu", "elu", "clamp") or by their C value."""

from __future__ import annotations

from typing import Sequence, Union

from .library import load
from .native_object import NativeObject
from .reference import ACTIVATION_MODES


def activation_code(mode: Union[str, int]) -> int:
    """The miopenActivationMode_t of a mode name; a number is passed on
    as it is (the library refuses one that names no mode)."""
    if isinstance(mode, str):
        if mode not in ACTIVATION_MODES:
            raise ValueError(f"activation must be one of {', '.join(ACTIVATION_MODES)}, got {mode!r}")
        return ACTIVATION_MODES.index(mode)
    return int(mode)


class ActivationDescriptor(NativeObject):
    """A ``miopenActivationDescriptor_t`` set to ``mode`` and ``params``
    (alpha, beta, gamma).  Context manager; a finalizer is the backstop."""

    _what = "activation descriptor"

    def __init__(self, mode: Union[str, int], params: Sequence[float] = (0.0, 0.0, 0.0)):
        library = load()
        created = library.ffi.new("miopenActivationDescriptor_t*")
        library.check(library.lib.miopenCreateActivationDescriptor(created))
        self._library = library
        self._own(created[0], library.lib.miopenDestroyActivationDescriptor)
        alpha, beta, gamma = (float(p) for p in params)
        try:
            library.check(library.lib.miopenSetActivationDescriptor(self.ptr, activation_code(mode), alpha, beta, gamma))
        except BaseException:
            self.close()
            raise

    def get(self) -> tuple:
        """(mode name, alpha, beta, gamma) as the library holds them."""
        ffi = self._library.ffi
        mode, values = ffi.new("miopenActivationMode_t*"), [ffi.new("double*") for _ in range(3)]
        self._library.check(self._library.lib.miopenGetActivationDescriptor(self.ptr, mode, *values))
        return (ACTIVATION_MODES[mode[0]],) + tuple(v[0] for v in values)
