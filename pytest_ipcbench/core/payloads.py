"""Payload factories, their exact equality checks and sizes (MB = 10**6 bytes).

Payload kinds are extensions like backends: entry points of ``pytest_ipcbench.payloads`` (name ->
factory returning a :class:`Kind`: ``build(size, seed)``, ``equal(a, b)``, ``nbytes(obj)``) or
:func:`register_payload`. Built-ins: ``dict`` (nested dicts of about 100 bytes an entry),
``ndarray`` (float32 rows x 602 columns, a GNN batch), ``array1d`` and ``ragged2d`` (the MPI
methods' data) and ``tiny`` (at most 64 bytes, fixed). A payload is built from a picklable
:class:`PayloadSpec`, so every rank builds the same one without moving it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from .errors import IpcbenchError
from .registry import ExtensionError, Registry
from .units import check_size, parse_size, size_label

NDARRAY_COLS = 602
DICT_ENTRY_BYTES = 100
RAGGED_ROWS = 5
ELEMENTS_PER_BASE = sum((i + 1) ** 2 for i in range(RAGGED_ROWS))  # 55
TINY_BYTES = 64



@dataclass(frozen=True)
class PayloadSpec:
    """What to send: a kind and a target size in bytes (``tiny`` ignores the size)."""

    kind: str
    size: int

    def __post_init__(self) -> None:
        PAYLOADS.check_name(self.kind)
        if self.size < 0:
            raise ValueError(f"payload size must not be negative: {self.size}")
        check_size(self.size)

    @property
    def id(self) -> str:
        fixed = get_kind(self.kind).fixed_size
        return f"{self.kind}-{size_label(self.size if fixed is None else fixed)}"

    def build(self, seed: int = 0) -> Any:
        """The payload itself; the same spec and seed give equal payloads on every rank."""
        return get_kind(self.kind).build(self.size, seed)

    def equal(self, a: Any, b: Any) -> bool:
        return get_kind(self.kind).equal(a, b)

    @property
    def nbytes(self) -> int:
        """Bytes of data the payload really holds (its elements, not pickle overhead)."""
        return get_kind(self.kind).nbytes(self.build())

    def base(self) -> int:
        """The MPI methods' ``base`` for the array kinds."""
        return max(1, self.size // (ELEMENTS_PER_BASE * 4))


@dataclass(frozen=True)
class Kind:
    """A payload kind: how to build one of about ``size`` bytes, compare two, count their bytes.

    ``build(size, seed)`` must give equal objects for equal arguments in every process (ranks
    build the expected value themselves); a different seed must give a different object (so a
    stale read fails verification). ``fixed_size`` is set for kinds whose size is not a
    parameter (``tiny``): they appear once in a matrix, at that size.
    """

    build: Callable[[int, int], Any]
    equal: Callable[[Any, Any], bool]
    nbytes: Callable[[Any], int]
    fixed_size: int | None = None


def _dict_build(size: int, seed: int) -> dict[str, Any]:
    # Each entry: a nested dict of about 100 bytes of data (ints, a float, a short string).
    n = max(1, size // DICT_ENTRY_BYTES)
    return {
        f"k{i:07d}": {"id": i, "seed": seed, "score": i * 0.5, "tags": {"a": i % 7, "b": "x" * 40}}
        for i in range(n)
    }


def _dict_nbytes(obj: dict[str, Any]) -> int:
    return len(obj) * DICT_ENTRY_BYTES


def ndarray_shape(size: int) -> tuple[int, int]:
    """(rows, columns) of the ``ndarray`` payload of ``size`` bytes: float32 rows of 602 columns;
    below one row (2,408 B), one row of size/4 columns ("1KB" holds 1,000 B, not 2,408)."""
    rows = size // (NDARRAY_COLS * 4)
    return (rows, NDARRAY_COLS) if rows else (1, max(1, size // 4))


def _ndarray_build(size: int, seed: int) -> np.ndarray:
    rows, cols = ndarray_shape(size)
    a = np.empty((rows, cols), dtype=np.float32)
    a[...] = np.arange(cols, dtype=np.float32)
    a += np.arange(rows, dtype=np.float32)[:, None] * 0.25 + seed
    return a


def _array1d_build(size: int, seed: int) -> np.ndarray:
    base = max(1, size // (ELEMENTS_PER_BASE * 4))
    return np.arange(seed, seed + base * ELEMENTS_PER_BASE, dtype=np.int32)


def _ragged2d_build(size: int, seed: int) -> list[np.ndarray]:
    base = max(1, size // (ELEMENTS_PER_BASE * 4))
    return [
        np.arange(seed + i, seed + i + base * (i + 1) ** 2, dtype=np.int32) for i in range(RAGGED_ROWS)
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


def _array_nbytes(a: np.ndarray) -> int:
    return int(a.nbytes)


def _ragged_nbytes(rows: list[np.ndarray]) -> int:
    return int(sum(r.nbytes for r in rows))


# the built-in kinds' factories: the targets of our entry points (pyproject.toml)
def dict_kind() -> Kind:
    return Kind(_dict_build, _plain_equal, _dict_nbytes)


def ndarray_kind() -> Kind:
    return Kind(_ndarray_build, _array_equal, _array_nbytes)


def array1d_kind() -> Kind:
    return Kind(_array1d_build, _array_equal, _array_nbytes)


def ragged2d_kind() -> Kind:
    return Kind(_ragged2d_build, _ragged_equal, _ragged_nbytes)


def tiny_kind() -> Kind:
    return Kind(_tiny_build, _plain_equal, len, fixed_size=TINY_BYTES)


class PayloadKindUnavailable(IpcbenchError, RuntimeError):
    """A payload kind's entry point needs a package that is not installed."""


def _check_kind(name: str, obj: Any, where: str) -> Kind:
    kind = obj
    if not isinstance(obj, Kind) and callable(obj):
        try:
            kind = obj()
        except Exception as exc:
            raise ExtensionError(
                f"payload kind {name!r}: the factory of {where} raised {type(exc).__name__}: {exc}"
            ) from exc
    if isinstance(kind, Kind):
        return kind
    if all(callable(getattr(kind, attr, None)) for attr in ("build", "equal", "nbytes")):
        return Kind(kind.build, kind.equal, kind.nbytes, getattr(kind, "fixed_size", None))
    raise ExtensionError(
        f"payload kind {name!r} from {where}: expected a Kind, or a factory returning an object with "
        f"build(size, seed), equal(a, b) and nbytes(obj); got {type(kind).__name__}"
    )


PAYLOADS: Registry[Kind] = Registry(
    "payload kind", "pytest_ipcbench.payloads", _check_kind, PayloadKindUnavailable, owner=__name__
)


def payload_kinds() -> tuple[str, ...]:
    """The names of every payload kind known now: entry points (built-ins first) and registrations."""
    return PAYLOADS.names()


def get_kind(name: str) -> Kind:
    """The :class:`Kind` called ``name`` (ValueError naming the known kinds if there is none)."""
    return PAYLOADS.get(name)


def register_payload(name: str, kind: Any) -> Kind:
    """Add a payload kind from a conftest.py (spawned workers get it too).

    ``kind`` is a :class:`Kind` built from module-level functions, or a module-level factory
    (a function or class) returning an object with ``build(size, seed)``, ``equal(a, b)`` and
    ``nbytes(obj)`` — the same thing an entry point of ``pytest_ipcbench.payloads`` names.
    """
    return PAYLOADS.register(name, kind, origin=kind.build if isinstance(kind, Kind) else None)


def make_payload(kind: str, size: int | str, seed: int = 0) -> Any:
    """Plain factory: ``make_payload("ndarray", "1MB")``."""
    return PayloadSpec(kind, parse_size(size)).build(seed)
