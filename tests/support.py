"""Shared test helpers: programs that run on every rank of a group for the backend tests, and the
helper processes of the shared-array tests.

Backend programs (``group.run(fn, ...)``) are module level, so that :class:`~pytest_ipcbench.core.group.LocalWorld` can ship them to its workers.
Each returns plain data (strings, bools) that the test asserts on; errors a program expects are
caught and returned rather than raised, so a world is not restarted for an expected failure.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

import numpy as np

from pytest_ipcbench.backends.base import BackendSpec, PayloadError
from pytest_ipcbench.core.group import Group


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
        store = live.delivery == "store"
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
        store = live.delivery == "store"
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


def at_page_offset(nbytes: int, offset: int, seed: int = 0) -> np.ndarray:
    """A uint8 array of ``nbytes`` whose first byte sits ``offset`` bytes into a page."""
    from pytest_ipcbench.core.aliasing import placed

    return placed(((np.arange(nbytes) * 7 + seed) % 251).astype(np.uint8), offset)


def shm_distances(group: Group, spec: BackendSpec, nbytes: int, offsets: Sequence[int]) -> list[Any]:
    """shm native mode: the writer sends arrays at each source page offset and returns, for each,
    where the copy landed past its source modulo a page; a reader returns "ok" or what it got."""
    import struct

    from pytest_ipcbench.backends import shm
    from pytest_ipcbench.core.aliasing import PAGE, buffer_address

    objects = [at_page_offset(nbytes, off, seed=i) for i, off in enumerate(offsets)]
    out: list[Any] = []
    with spec.open(group) as live:
        for obj in objects:
            group.barrier()
            if group.rank == live.root:
                live.write(obj)
                data = live._data
                (dst,) = struct.unpack_from("<Q", data, shm._TABLE.size)  # the first buffer's offset
                out.append((buffer_address(data) + dst - buffer_address(obj)) % PAGE)
                group.barrier()
            else:
                group.barrier()
                got = live.read()
                out.append("ok" if same(got, obj) else f"got {_describe(got)}")
                del got
        group.barrier()
    return out


def shm_bytes_moved(group: Group, spec: BackendSpec, objects: Sequence[Any]) -> list[str]:
    """shm bytes mode with every pickle moved 64 bytes into the segment: readers still get it."""
    from pytest_ipcbench.backends import shm

    if group.rank == 0:
        shm.clear_of_aliasing = lambda pos, buf, nbytes: pos + 64  # this process only
    return roundtrip(group, spec, objects)


# --- shared arrays: helper processes that hold, forward, check and drop arrays on command ---



import multiprocessing
import os
import pickle

from pytest_ipcbench.shared.array import SharedNDArray
from pytest_ipcbench.shared.queue import Queue


def _worker_main(conn: Any, inboxes: list[Queue], index: int) -> None:
    held: dict[Any, Any] = {}
    while True:
        try:
            cmd, args = conn.recv()
        except EOFError:
            return
        try:
            if cmd == "exit":
                held.clear()
                conn.send(("ok", None))
                return
            conn.send(("ok", _handle(cmd, args, held, inboxes, index)))
        except Exception as exc:  # report, keep serving
            conn.send(("error", f"{type(exc).__name__}: {exc}"))


def _handle(cmd: str, args: tuple, held: dict, inboxes: list[Queue], index: int) -> Any:
    if cmd == "pid":
        return os.getpid()
    if cmd == "hold":
        key, obj = args
        held[key] = obj
        return getattr(obj, "segment_name", None)
    if cmd == "make":
        key, n = args
        held[key] = SharedNDArray.from_numpy_array(np.zeros(n))
        return held[key].segment_name
    if cmd == "make_named":  # a new segment under a given name (one that was unlinked)
        key, n, name, value = args
        from pytest_ipcbench.core import names as names_
        orig = names_.resource_name
        names_.resource_name = lambda kind: name
        try:
            held[key] = SharedNDArray.from_numpy_array(np.full(n, value))
        finally:
            names_.resource_name = orig
        return held[key].segment_name
    if cmd == "get":  # the array itself: it travels back to the caller as a handle
        (key,) = args
        return held[key]
    if cmd == "hold_blob":  # unpickle bytes the caller pickled (a handle it may replay)
        key, blob = args
        held[key] = pickle.loads(blob)
        return getattr(held[key], "segment_name", None)
    if cmd == "cache_info":
        from pytest_ipcbench.shared import segment as segment_
        return segment_.cache_info()
    if cmd == "leak_handle":
        (key,) = args
        pickle.dumps(held[key])  # an in-transit reference nobody will adopt
        return None
    if cmd == "drop":
        (key,) = args
        held.pop(key, None)  # refcounting releases it now
        return None
    if cmd == "read":
        key, index_ = args
        return held[key][index_].tolist()
    if cmd == "write":
        key, index_, value = args
        held[key][index_] = value
        return None
    if cmd == "equal":
        key, expected = args
        return bool(np.array_equal(held[key], expected)) and held[key].dtype == expected.dtype
    if cmd == "forward":
        key, dest = args
        inboxes[dest].put(held[key])
        return None
    if cmd == "take":
        key, timeout = args
        held[key] = inboxes[index].get(timeout=timeout)
        return getattr(held[key], "segment_name", None)
    if cmd == "consume":
        return _consume(inboxes[index], *args)
    raise ValueError(f"unknown command {cmd!r}")


def _consume(inbox: Queue, count: int, timeout: float, pause: float) -> list[str]:
    """Check ``count`` items ``(seq, array filled with seq)``, twice each, around a pause."""
    errors = []
    for _ in range(count):
        seq, arr = inbox.get(timeout=timeout)
        for when in ("on receipt", "after holding it"):
            lo, hi = int(arr.min()), int(arr.max())
            if lo != seq or hi != seq:
                errors.append(f"item {seq} {when}: values {lo}..{hi}")
            if pause and when == "on receipt":
                time.sleep(pause)
        del arr
    return errors


class Worker:
    """A child process obeying commands; ``call`` raises RuntimeError with the child's error."""

    def __init__(self, ctx: str = "spawn", inboxes: list[Queue] | None = None, index: int = 0) -> None:
        mp: Any = multiprocessing.get_context(ctx)
        self._conn, child = mp.Pipe()
        self.process = mp.Process(target=_worker_main, args=(child, inboxes or [], index), daemon=True)
        self.process.start()
        child.close()
        self.pid = self.process.pid

    def call(self, cmd: str, *args: Any, timeout: float = 30.0) -> Any:
        self._conn.send((cmd, args))
        if not self._conn.poll(timeout):
            raise TimeoutError(f"worker {self.pid} did not answer {cmd!r} within {timeout} s")
        status, value = self._conn.recv()
        if status != "ok":
            raise RuntimeError(f"worker {self.pid}: {value}")
        return value

    def kill(self) -> None:
        self.process.kill()
        self.process.join(10)

    def close(self) -> None:
        if self.process.is_alive():
            try:
                self.call("exit", timeout=10)
            except (OSError, EOFError, TimeoutError, RuntimeError):
                self.process.kill()
        self.process.join(10)
        if self.process.is_alive():  # pragma: no cover
            self.process.kill()
            self.process.join(5)
        self._conn.close()
