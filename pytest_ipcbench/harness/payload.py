"""What a scenario sends and how a received object is read: the raw-bytes payload of ping-pong
and stream (:class:`BufferPayload`), the bytes a payload of any kind holds, and :func:`touch`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from ..core.aliasing import MIN_BYTES, placed
from ..core.payloads import DICT_ENTRY_BYTES, ELEMENTS_PER_BASE, TINY_BYTES, PayloadSpec, ndarray_shape
from ..core.units import size_label


@dataclass(frozen=True)
class BufferPayload:
    """Exactly ``size`` bytes (a uint8 array): latency from 1 byte, bandwidth at exact sizes."""

    size: int
    kind: str = "buffer"

    def __post_init__(self) -> None:
        if self.size < 1:
            raise ValueError(f"a buffer payload needs at least 1 byte, got {self.size}")

    @property
    def id(self) -> str:
        return f"{self.kind}-{size_label(self.size)}"

    @property
    def nbytes(self) -> int:
        return self.size

    def build(self, seed: int = 0) -> np.ndarray:
        pattern = (np.arange(256, dtype=np.uint16) * 7 + seed * 13) % 251
        return np.resize(pattern.astype(np.uint8), self.size)

    def equal(self, a: Any, b: Any) -> bool:
        try:
            x = np.asarray(a if isinstance(a, np.ndarray) else memoryview(a)).reshape(-1).view(np.uint8)
            y = np.asarray(b if isinstance(b, np.ndarray) else memoryview(b)).reshape(-1).view(np.uint8)
        except (TypeError, ValueError):
            return False
        return x.shape == y.shape and bool(np.array_equal(x, y))


Payload = Any  # PayloadSpec or BufferPayload: kind, size, id, nbytes, build(seed), equal(a, b)


def payload_bytes(payload: Payload) -> int:
    """Bytes of data a payload holds (``PayloadSpec.nbytes``), without building a large one."""
    if isinstance(payload, PayloadSpec):
        kind, size = payload.kind, payload.size
        if kind == "ndarray":
            rows, cols = ndarray_shape(size)
            return rows * cols * 4
        if kind in ("array1d", "ragged2d"):
            return max(1, size // (ELEMENTS_PER_BASE * 4)) * ELEMENTS_PER_BASE * 4
        if kind == "dict":
            return max(1, size // DICT_ENTRY_BYTES) * DICT_ENTRY_BYTES
        if kind == "tiny":
            return TINY_BYTES
    return int(payload.nbytes)


def steady_place(obj: Any) -> Any:
    """``obj`` with each large array (itself, or in a list or tuple) moved to a fixed place in
    its page (``core/aliasing.placed``): where a heap put it followed the process's history, and a
    store's copy ran 3-4x slower from some places (docs/method.md rule 23)."""
    def fixed(x: Any) -> Any:
        if type(x) is np.ndarray and x.nbytes >= MIN_BYTES and x.flags.c_contiguous and not x.dtype.hasobject:
            return placed(x)
        return x

    if isinstance(obj, (list, tuple)) and obj and any(type(x) is np.ndarray for x in obj):
        return type(obj)(fixed(x) for x in obj)
    return fixed(obj)


def touch(obj: Any) -> int:
    """Read one byte of every cache line of every buffer in ``obj`` (a fully read object).

    Arrays, bytes-likes and lists/tuples of them are scanned; other objects (a dict, already
    built by unpickling) count as read.
    """
    if isinstance(obj, np.ndarray):
        if obj.size == 0:
            return 0
        if obj.flags.c_contiguous:
            flat = obj.reshape(-1).view(np.uint8)
            return int(flat[::64].sum(dtype=np.uint64))
        return int(np.asarray(obj).sum() != 0)
    if isinstance(obj, (bytes, bytearray, memoryview)):
        return touch(np.frombuffer(obj, dtype=np.uint8)) if len(obj) else 0
    if isinstance(obj, (list, tuple)) and obj and isinstance(obj[0], (np.ndarray, bytes, bytearray, memoryview)):
        return sum(touch(x) for x in obj)
    try:
        return len(obj)
    except TypeError:
        return 0
