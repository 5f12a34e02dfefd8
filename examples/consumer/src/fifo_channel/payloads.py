"""``records``: a payload kind of our own — a numpy structured array of 32-byte records, the kind
of batch this project moves between processes. Declared as an entry point, so every option,
marker and fixture of pytest-ipcbench knows it (``--ipc-payloads records``)."""

from __future__ import annotations

from typing import Any

import numpy as np
from pytest_ipcbench import Kind

RECORD = np.dtype([("id", np.int64), ("position", np.float32, 3), ("label", "S12")])  # 32 bytes


def build(size: int, seed: int) -> np.ndarray:
    """About ``size`` bytes of records; the same (size, seed) gives the same records everywhere."""
    n = max(1, size // RECORD.itemsize)
    out = np.zeros(n, dtype=RECORD)
    out["id"] = np.arange(seed, seed + n)
    out["position"] = np.arange(3 * n, dtype=np.float32).reshape(n, 3) * 0.25 + seed
    out["label"] = [b"rec-%d" % (i % 1000) for i in range(n)]
    return out


def equal(a: Any, b: Any) -> bool:
    return (
        isinstance(a, np.ndarray) and isinstance(b, np.ndarray) and a.dtype == b.dtype and a.shape == b.shape
        and a.tobytes() == b.tobytes()
    )


def nbytes(obj: np.ndarray) -> int:
    return int(obj.nbytes)


def records_kind() -> Kind:
    """The entry point's target: the kind's three functions."""
    return Kind(build, equal, nbytes)
