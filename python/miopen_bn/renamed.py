"""Names this package has replaced, still accepted with a DeprecationWarning.

``saved_inv_var`` (MIOpen's "inverse variance") holds 1 / sqrt(var + epsilon),
an inverse standard deviation: the Python API calls it ``saved_inv_std``; the
C API keeps MIOpen's names (docs/conventions.md#names).  Functions that took
the old keyword take ``**old_names`` and pass them here; the layer's old attribute
and the reference's old result key go through the same warning.
"""

from __future__ import annotations

import warnings

# old name -> new name
RENAMED = {"saved_inv_var": "saved_inv_std"}


def warn_renamed(old: str, where: str, stacklevel: int = 3) -> None:
    """The DeprecationWarning for ``old``, attributed as warnings.warn's
    ``stacklevel`` would be in the function that calls this one."""
    warnings.warn(f"{where}: {old!r} is deprecated, use {RENAMED[old]!r} (the same values)", DeprecationWarning,
                  stacklevel=stacklevel + 1)


def keyword(function: str, old_names: dict, new: str, value, *, wrappers: int = 0):
    """The value of keyword ``new`` of ``function``, given ``value`` under its
    own name and ``old_names``, the keywords the function does not declare: its
    old name there is taken (with a warning pointing at the caller, past
    ``wrappers`` decorator frames); anything else there, or both names at
    once, is the TypeError Python gives for a bad keyword."""
    unknown = [name for name in old_names if RENAMED.get(name) != new]
    if unknown:
        raise TypeError(f"{function}() got an unexpected keyword argument {unknown[0]!r}")
    (old, old_value), = old_names.items()
    if value is not None:
        raise TypeError(f"{function}() got {new!r} and its old name {old!r}: pass {new!r} alone")
    warn_renamed(old, f"{function}()", stacklevel=3 + wrappers)
    return old_value


class Results(dict):
    """A dict of results whose keys under an old name still read (with a warning)."""

    def __missing__(self, key):
        if key in RENAMED and RENAMED[key] in self:
            warn_renamed(key, "the result's key", stacklevel=2)
            return self[RENAMED[key]]
        raise KeyError(key)
