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

import os
import re
from dataclasses import dataclass
from decimal import Decimal
from fractions import Fraction
from typing import Any, Callable

import numpy as np

NDARRAY_COLS = 602
DICT_ENTRY_BYTES = 100
SEED004_ROWS = 5
SEED004_ELEMENTS_PER_BASE = sum((i + 1) ** 2 for i in range(SEED004_ROWS))  # 55
TINY_BYTES = 64

_UNITS = {
    "B": 1,
    "KB": 10**3,
    "MB": 10**6,
    "GB": 10**9,
    "KIB": 2**10,
    "MIB": 2**20,
    "GIB": 2**30,
}
_SIZE_RE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([a-zA-Z]*)\s*$")


class SizeTooLarge(ValueError):
    """A payload size beyond what this machine can hold."""


def machine_memory() -> int:
    """Bytes of memory this process can have: physical memory, or a smaller cgroup limit."""
    try:
        total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        total = 0
    for limit_file in ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"):
        try:
            with open(limit_file) as f:
                limit = int(f.read().strip())
        except (OSError, ValueError):  # absent, or "max"
            continue
        if 0 < limit < (total or limit + 1):
            total = limit
    return total


def check_size(nbytes: int, text: Any = None) -> int:
    """``nbytes`` if this machine can hold a payload that big, else :class:`SizeTooLarge` naming both.

    A payload lives several times over during a transfer (the object, its serialized bytes, each
    reader's copy), so one larger than the whole memory can only end in the OOM killer.
    """
    memory = machine_memory()
    if memory and nbytes > memory:
        shown = f"{text!r} ({Decimal(nbytes):.3g} bytes)" if text is not None and str(text) != str(nbytes) else f"{nbytes}"
        raise SizeTooLarge(
            f"size {shown} is more than this machine's memory ({memory / 1e9:.3g} GB): a payload must fit in it"
        )
    return nbytes


def parse_size(text: str | int) -> int:
    """``"1MB"`` -> 1000000, ``"64KiB"`` -> 65536, ``"100"`` -> 100 bytes.

    Raises ValueError on bad text, :class:`SizeTooLarge` for a size beyond this machine's memory.
    """
    if isinstance(text, int):
        if text < 0:
            raise ValueError(f"size must not be negative: {text}")
        return check_size(text)
    m = _SIZE_RE.match(str(text))
    unit = m.group(2).upper() if m else ""
    if not m or unit not in {"", *_UNITS}:
        raise ValueError(
            f"bad size {text!r}: expected a number with an optional unit "
            f"(B, KB, MB, GB, KiB, MiB, GiB), e.g. 1MB"
        )
    # exact arithmetic: float() of a long digit string is inf (and int(inf) an OverflowError)
    number = Fraction(m.group(1)) * _UNITS[unit or "B"]
    return check_size(int(number), text)


def format_size(nbytes: int) -> str:
    """Shortest exact label: 1000000 -> ``1MB``, 65536 -> ``64KiB``, 1500 -> ``1500B``."""
    for unit in ("GB", "MB", "KB", "GiB", "MiB", "KiB"):
        if nbytes and nbytes % _UNITS[unit.upper()] == 0:
            return f"{nbytes // _UNITS[unit.upper()]}{unit}"
    return f"{nbytes}B"


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
        return f"{self.kind}-{format_size(self.nbytes if self.kind == 'tiny' else self.size)}"

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
