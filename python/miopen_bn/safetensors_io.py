"""The safetensors file format, read and written with NumPy alone.

A file is an 8-byte little-endian header length, a JSON header mapping each
tensor's name to ``{"dtype", "shape", "data_offsets": [begin, end]}`` (offsets
into the data that follows) plus an optional ``"__metadata__"`` object of
string values, then the tensors' raw little-endian bytes, back to back.
Every way a file can be malformed or truncated raises ``SafetensorsError``
(a ValueError) naming the file and what is wrong.
"""

from __future__ import annotations

import json
import os
from typing import Mapping

import numpy as np

from . import dtypes

_FORMAT_DTYPES = {
    "F64": np.dtype("<f8"),
    "F32": np.dtype("<f4"),
    "F16": np.dtype("<f2"),
    "BF16": dtypes.bfloat16,
    "I64": np.dtype("<i8"),
    "I32": np.dtype("<i4"),
}
_CODE_FOR_DTYPE = {dtype: code for code, dtype in _FORMAT_DTYPES.items()}
_HEADER_LIMIT = 100 << 20  # the format's own reader refuses larger headers too
_METADATA = "__metadata__"


class SafetensorsError(ValueError):
    """A file that is not a well-formed safetensors file."""


def save(path, tensors: Mapping[str, np.ndarray], metadata: Mapping[str, str] = None) -> None:
    """Writes ``tensors`` (NumPy arrays of the dtypes above) and string metadata."""
    header, blobs, offset = {}, [], 0
    for name, array in tensors.items():
        array = np.asarray(array)
        if not array.flags.c_contiguous:  # (np.ascontiguousarray would make a scalar 1-D)
            array = array.copy(order="C")
        code = _CODE_FOR_DTYPE.get(array.dtype.newbyteorder("<") if array.dtype.byteorder == ">" else array.dtype)
        if code is None:
            raise TypeError(f"{name}: safetensors_io writes {', '.join(_FORMAT_DTYPES)}, not {array.dtype}")
        data = array.astype(_FORMAT_DTYPES[code], copy=False).tobytes()
        header[name] = {"dtype": code, "shape": list(array.shape), "data_offsets": [offset, offset + len(data)]}
        blobs.append(data)
        offset += len(data)
    if metadata:
        header[_METADATA] = {str(k): str(v) for k, v in metadata.items()}
    text = json.dumps(header, separators=(",", ":")).encode("utf-8")
    text += b" " * (-len(text) % 8)  # the data starts 8-byte aligned
    temporary = f"{os.fspath(path)}.tmp{os.getpid()}"
    with open(temporary, "wb") as out:
        out.write(len(text).to_bytes(8, "little"))
        out.write(text)
        for blob in blobs:
            out.write(blob)
    os.replace(temporary, path)  # a crash mid-write never leaves half a file under the name


def load(path) -> tuple:
    """``(tensors, metadata)``: a dict of NumPy arrays and a dict of strings."""
    with open(path, "rb") as source:
        raw = source.read()

    def bad(why: str) -> SafetensorsError:
        return SafetensorsError(f"{os.fspath(path)} is not a valid safetensors file: {why}")

    if len(raw) < 8:
        raise bad(f"it has {len(raw)} bytes, fewer than the 8 of the header length")
    length = int.from_bytes(raw[:8], "little")
    if length > _HEADER_LIMIT or 8 + length > len(raw):
        raise bad(f"the header claims {length} bytes but the file has {len(raw) - 8} after the length "
                  f"(truncated?)")
    try:
        header = json.loads(raw[8:8 + length].decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise bad(f"the header is not JSON ({exc})") from None
    if not isinstance(header, dict):
        raise bad("the header is not a JSON object")
    metadata = header.pop(_METADATA, None) or {}
    if not isinstance(metadata, dict) or not all(isinstance(v, str) for v in metadata.values()):
        raise bad("__metadata__ must map names to strings")
    data = memoryview(raw)[8 + length:]
    tensors, spans = {}, []
    for name, entry in header.items():
        try:
            dtype = _FORMAT_DTYPES[entry["dtype"]]
            shape = tuple(int(n) for n in entry["shape"])
            begin, end = (int(v) for v in entry["data_offsets"])
        except (KeyError, TypeError, ValueError):
            raise bad(f"tensor {name!r} has a malformed entry {entry!r}") from None
        if any(n < 0 for n in shape):
            raise bad(f"tensor {name!r} has a negative length in {shape}")
        expected = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
        if not 0 <= begin <= end <= len(data):
            raise bad(f"tensor {name!r} spans bytes {begin}..{end} of {len(data)} (truncated?)")
        if end - begin != expected:
            raise bad(f"tensor {name!r} of shape {shape} needs {expected} bytes, its span has {end - begin}")
        spans.append((begin, end, name))
        tensors[name] = np.frombuffer(data[begin:end], dtype=dtype).reshape(shape).copy()
    position = 0
    for begin, end, name in sorted(spans):
        if begin != position:
            raise bad(f"tensor {name!r} starts at byte {begin}, expected {position} (overlap or gap)")
        position = end
    if position != len(data):
        raise bad(f"{len(data) - position} bytes follow the last tensor")
    return tensors, metadata
