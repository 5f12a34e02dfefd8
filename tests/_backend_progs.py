"""Programs that run on every rank of a group (``group.run(fn, ...)``) for the backend tests.

Module level, so that :class:`~pytest_ipcbench.group.LocalWorld` can ship them to its workers.
Each returns plain data (strings, bools) that the test asserts on; errors a program expects are
caught and returned rather than raised, so a world is not restarted for an expected failure.
"""

from __future__ import annotations

import time
from typing import Any, Sequence

import numpy as np

from pytest_ipcbench.backends.base import BackendSpec, PayloadError
from pytest_ipcbench.group import Group


def same(a: Any, b: Any) -> bool:
    """Exact equality that knows numpy: same types, dtypes, shapes and values, recursively."""
    if type(a) is not type(b):
        return False
    if isinstance(a, np.ndarray):
        if a.dtype != b.dtype or a.shape != b.shape:
            return False
        if a.dtype.hasobject:
            return all(same(x, y) for x, y in zip(a.ravel().tolist(), b.ravel().tolist()))
        return a.tobytes() == b.tobytes()
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    return bool(a == b)


def _describe(obj: Any) -> str:
    shape = getattr(obj, "shape", None)
    if shape is not None:
        return f"{type(obj).__name__}{shape} {getattr(obj, 'dtype', '')}"
    return type(obj).__name__


def roundtrip(group: Group, spec: BackendSpec, objects: Sequence[Any]) -> list[str]:
    """Send each object in turn; a reader reports "ok" or what was wrong, the writer "sent"."""
    out = []
    with spec.open(group) as live:
        store = live.kind == "store"
        for obj in objects:
            group.barrier()
            if group.rank == live.root:
                live.write(obj)
                if store:
                    group.barrier()
                out.append("sent")
            else:
                if store:
                    group.barrier()
                got = live.read()
                out.append("ok" if same(got, obj) else f"got {_describe(got)}, sent {_describe(obj)}")
                del got
        group.barrier()
    return out


def newest_wins(group: Group, spec: BackendSpec, objects: Sequence[Any]) -> str:
    """A store: the writer writes several values in a row; a reader then reads the last one."""
    with spec.open(group) as live:
        group.barrier()
        if group.rank == live.root:
            for obj in objects:
                live.write(obj)
        group.barrier()
        result = "writer"
        if group.rank != live.root:
            got = live.read()
            result = "ok" if same(got, objects[-1]) else f"got {_describe(got)}"
            del got
        group.barrier()
    return result


def unpicklable(group: Group, spec: BackendSpec) -> tuple[str, str]:
    """The writer sends an object that cannot be pickled, then a good one.

    Returns (what the first transfer raised on this rank, result of the second transfer).
    """
    bad = {"fine": np.arange(10), "bad": lambda: None}
    good = [np.arange(5, dtype=np.int32), {"x": 1}]
    with spec.open(group) as live:
        store = live.kind == "store"
        group.barrier()
        first = "no error"
        if group.rank == live.root:
            try:
                live.write(bad)
            except PayloadError as exc:
                first = f"PayloadError: {exc}"
            if store:
                group.barrier()
        else:
            if store:
                group.barrier()
            try:
                live.read()
            except PayloadError as exc:
                first = f"PayloadError: {exc}"
        group.barrier()
        second = "sent"
        if group.rank == live.root:
            live.write(good)
            if store:
                group.barrier()
        else:
            if store:
                group.barrier()
            second = "ok" if same(live.read(), good) else "wrong value"
        group.barrier()
    return first, second


def read_before_write(group: Group, spec: BackendSpec, delay: float) -> tuple[str, float]:
    """Readers call read() at once; the writer writes ``delay`` seconds later."""
    value = {"late": np.arange(1000, dtype=np.float64)}
    with spec.open(group) as live:
        group.barrier()
        start = time.monotonic()
        if group.rank == live.root:
            time.sleep(delay)
            live.write(value)
            result = "sent"
        else:
            result = "ok" if same(live.read(), value) else "wrong value"
        waited = time.monotonic() - start
        group.barrier()
    return result, waited


def read_timeout(group: Group, spec: BackendSpec) -> str:
    """Nobody writes: every reader's read() must give up with a TimeoutError."""
    with spec.open(group) as live:
        group.barrier()
        result = "writer"
        if group.rank != live.root:
            try:
                live.read()
                result = "read returned"
            except TimeoutError as exc:
                result = f"TimeoutError: {exc}"
        group.barrier()
    return result


def raise_inside(group: Group, spec: BackendSpec) -> str:
    """An exception in the body of ``with``: __exit__ must release everything anyway."""
    try:
        with spec.open(group) as live:
            group.barrier()
            if group.rank == live.root and not live.needs_mpi:  # an MPI write needs the readers
                live.write(np.arange(1000))  # and nobody reads it
            group.barrier()
            raise RuntimeError("boom")
    except RuntimeError as exc:
        return str(exc)
    return "no exception"


def abandon(group: Group, spec: BackendSpec) -> str:
    """The writer writes and nobody reads (a channel then holds an unread message)."""
    with spec.open(group) as live:
        group.barrier()
        if group.rank == live.root:
            live.write({"abandoned": np.arange(100)})
        group.barrier()
    return "done"


def float_arrays(sizes: Sequence[int]) -> list[np.ndarray]:
    """Arrays of about ``sizes`` bytes each (built on every rank instead of shipped to it)."""
    return [np.arange(n // 8, dtype=np.float64) * (i + 1) for i, n in enumerate(sizes)]


def roundtrip_sizes(group: Group, spec: BackendSpec, sizes: Sequence[int]) -> list[str]:
    return roundtrip(group, spec, float_arrays(sizes))


def newest_wins_sizes(group: Group, spec: BackendSpec, sizes: Sequence[int]) -> str:
    return newest_wins(group, spec, float_arrays(sizes))
