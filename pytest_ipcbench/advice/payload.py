"""The user's own object as a harness payload: sent as it is, compared exactly, read fully.

The harness (harness/measure.py) takes any payload with ``kind``, ``size``, ``id``, ``nbytes``,
``build(seed)`` and ``equal(a, b)``; :class:`ObjectPayload` gives back the same object for every
seed, so advise runs with ``BenchSettings(alternate=False)`` (one object, every time, as the user
sends it). Its :meth:`touch` reads every cache line of every buffer anywhere in the object (a
dict of arrays too), so a backend that hands out lazy views pays for their pages inside the
measured time (docs/method.md rule 10).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..core.units import size_label


def _read(arr: np.ndarray) -> int:
    if arr.size == 0:
        return 0
    if arr.dtype.hasobject:
        return sum(touch_deep(x) for x in arr.reshape(-1).tolist())
    return int(np.ascontiguousarray(arr).reshape(-1).view(np.uint8)[::64].sum(dtype=np.uint64))  # no copy if it is


def touch_deep(obj: Any) -> int:
    """Read one byte of every cache line of every buffer in ``obj``, through any nesting."""
    total = 0
    stack = [obj]
    while stack:
        x = stack.pop()
        if isinstance(x, np.ndarray):
            total += _read(x)
        elif isinstance(x, (bytes, bytearray, memoryview)):
            if len(x):
                total += int(np.frombuffer(x, dtype=np.uint8)[::64].sum(dtype=np.uint64))
        elif isinstance(x, dict):
            stack.extend(x.values())
        elif isinstance(x, (list, tuple, set, frozenset)):
            stack.extend(x)
        elif isinstance(x, str):
            total += len(x)
    return total


def equal_deep(a: Any, b: Any) -> bool:
    """Exact equality through any nesting: arrays by dtype, shape and values (NaN equal to NaN)."""
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        if not (isinstance(a, np.ndarray) and isinstance(b, np.ndarray)):
            return False
        if a.dtype != b.dtype or a.shape != b.shape:
            return False
        if a.dtype.hasobject:
            return all(equal_deep(x, y) for x, y in zip(a.reshape(-1).tolist(), b.reshape(-1).tolist()))
        if a.dtype.names is None and a.dtype.kind in "fc":
            return bool(np.array_equal(a, b, equal_nan=True))
        return bool(np.array_equal(a, b))
    if type(a) is not type(b):
        return False
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(equal_deep(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(equal_deep(x, y) for x, y in zip(a, b))
    if isinstance(a, float) and a != a:
        return b != b
    try:
        return bool(a == b)
    except Exception:
        return False


@dataclass(frozen=True)
class ObjectPayload:
    """One object, sent every time (``alternate=False``); ``size`` is its pickle-5 total."""

    obj: Any = field(compare=False, repr=False)
    size: int
    nbytes: int
    label: str = "object"
    kind: str = "object"

    @property
    def id(self) -> str:
        return f"{self.label}-{size_label(self.size)}"

    def build(self, seed: int = 0) -> Any:
        return self.obj

    def equal(self, a: Any, b: Any) -> bool:
        return equal_deep(a, b)

    def touch(self, obj: Any) -> int:
        return touch_deep(obj)
