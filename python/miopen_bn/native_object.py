"""The lifetime of a library object Python owns (a handle, a descriptor):
closed by ``close()`` (idempotent), by leaving a ``with`` block, or at the
latest by a finalizer when the Python object is collected."""

from __future__ import annotations

import weakref


class NativeObject:
    """Base of the classes that own one C object through its pointer."""

    _what = "object"  # named in the error for a closed object

    def _own(self, ptr, destroy) -> None:
        """Takes ``ptr``; ``destroy(ptr)`` runs exactly once, whichever way it closes."""
        self._ptr = ptr
        self._finalizer = weakref.finalize(self, destroy, ptr)

    @property
    def ptr(self):
        """The C object (a cffi pointer)."""
        if not self._finalizer.alive:
            raise ValueError(f"the {self._what} is closed")
        return self._ptr

    @property
    def closed(self) -> bool:
        return not self._finalizer.alive

    def lifetime(self):
        """An object whose ``alive`` is True until this one is closed or
        collected, and which does not keep it alive (for caches of its pointer)."""
        return self._finalizer

    def close(self) -> None:
        self._finalizer()

    def __enter__(self):
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()
