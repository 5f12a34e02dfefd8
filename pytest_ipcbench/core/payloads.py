"""Payload factories, their exact equality checks and sizes (MB = 10**6 bytes).

Kinds, each from a seed document:

* ``dict``: N entries of nested dicts of about 100 bytes each (seed 001);
* ``ndarray``: float32 rows x 602 columns, the GNN batch of seed 002;
* ``array1d``: int32, ``base * 55`` elements (seed 004's contiguous vector);
* ``ragged2d``: five int32 rows of ``base * (i + 1) ** 2`` elements (seed 004's ragged data);
* ``tiny``: at most 64 bytes (seed 003's small tasks); its size is fixed.

A payload is built from a picklable :class:`PayloadSpec`, so every rank can build the same one
(or the expected value to verify against) without moving it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

from .units import SizeTooLarge, check_size, machine_memory, parse_size, size_label

NDARRAY_COLS = 602
DICT_ENTRY_BYTES = 100
SEED004_ROWS = 5
SEED004_ELEMENTS_PER_BASE = sum((i + 1) ** 2 for i in range(SEED004_ROWS))  # 55
TINY_BYTES = 64



@dataclass(frozen=True)
class PayloadSpec:
    """What to send: a kind and a target size in bytes (``tiny`` ignores the size)."""

    kind: str
    size: int

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"unknown payload kind {self.kind!r}; choose one of {', '.join(KINDS)}")
        if self.size < 0:
            raise ValueError(f"payload size must not be negative: {self.size}")
        check_size(self.size)

    @property
    def id(self) -> str:
        return f"{self.kind}-{size_label(self.nbytes if self.kind == 'tiny' else self.size)}"

    def build(self, seed: int = 0) -> Any:
        """The payload itself; the same spec and seed give equal payloads on every rank."""
        return KINDS[self.kind].build(self.size, seed)

    def equal(self, a: Any, b: Any) -> bool:
        return KINDS[self.kind].equal(a, b)

    @property
    def nbytes(self) -> int:
        """Bytes of data the payload really holds (its elements, not pickle overhead)."""
        return payload_nbytes(self.kind, self.build())

    def base(self) -> int:
        """Seed 004's ``base`` for the array kinds."""
        return max(1, self.size // (SEED004_ELEMENTS_PER_BASE * 4))


@dataclass(frozen=True)
class Kind:
    build: Callable[[int, int], Any]
    equal: Callable[[Any, Any], bool]
    nbytes: Callable[[Any], int]


def _dict_build(size: int, seed: int) -> dict[str, Any]:
    # Each entry: a nested dict of about 100 bytes of data (ints, a float, a short string).
    n = max(1, size // DICT_ENTRY_BYTES)
    return {
        f"k{i:07d}": {"id": i, "seed": seed, "score": i * 0.5, "tags": {"a": i % 7, "b": "x" * 40}}
        for i in range(n)
    }


def _dict_nbytes(obj: dict[str, Any]) -> int:
    return len(obj) * DICT_ENTRY_BYTES


def _ndarray_build(size: int, seed: int) -> np.ndarray:
    rows = max(1, size // (NDARRAY_COLS * 4))
    a = np.empty((rows, NDARRAY_COLS), dtype=np.float32)
    a[...] = np.arange(NDARRAY_COLS, dtype=np.float32)
    a += np.arange(rows, dtype=np.float32)[:, None] * 0.25 + seed
    return a


def _array1d_build(size: int, seed: int) -> np.ndarray:
    base = max(1, size // (SEED004_ELEMENTS_PER_BASE * 4))
    return np.arange(seed, seed + base * SEED004_ELEMENTS_PER_BASE, dtype=np.int32)


def _ragged2d_build(size: int, seed: int) -> list[np.ndarray]:
    base = max(1, size // (SEED004_ELEMENTS_PER_BASE * 4))
    return [
        np.arange(seed + i, seed + i + base * (i + 1) ** 2, dtype=np.int32) for i in range(SEED004_ROWS)
    ]


def _tiny_build(size: int, seed: int) -> bytes:
    return (b"ipcbench-tiny-%d-" % seed).ljust(TINY_BYTES, b".")[:TINY_BYTES]


def _array_equal(a: Any, b: Any) -> bool:
    return (
        isinstance(a, np.ndarray)
        and isinstance(b, np.ndarray)
        and a.dtype == b.dtype
        and a.shape == b.shape
        and bool(np.array_equal(a, b))
    )


def _ragged_equal(a: Any, b: Any) -> bool:
    return (
        isinstance(a, (list, tuple))
        and isinstance(b, (list, tuple))
        and len(a) == len(b)
        and all(_array_equal(x, y) for x, y in zip(a, b))
    )


def _plain_equal(a: Any, b: Any) -> bool:
    return type(a) is type(b) and a == b


KINDS: dict[str, Kind] = {
    "dict": Kind(_dict_build, _plain_equal, _dict_nbytes),
    "ndarray": Kind(_ndarray_build, _array_equal, lambda a: int(a.nbytes)),
    "array1d": Kind(_array1d_build, _array_equal, lambda a: int(a.nbytes)),
    "ragged2d": Kind(_ragged2d_build, _ragged_equal, lambda rows: int(sum(r.nbytes for r in rows))),
    "tiny": Kind(_tiny_build, _plain_equal, len),
}


def payload_nbytes(kind: str, obj: Any) -> int:
    return KINDS[kind].nbytes(obj)


def make_payload(kind: str, size: int | str, seed: int = 0) -> Any:
    """Plain factory: ``make_payload("ndarray", "1MB")``."""
    return PayloadSpec(kind, parse_size(size)).build(seed)
