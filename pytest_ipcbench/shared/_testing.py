"""Helper processes for the shared-array tests: hold, forward, check and drop arrays on command.

A :class:`Worker` is a long-lived child (spawn by default) driven over a Pipe, so one child
serves many scenarios -- spawning a Python with numpy costs ~0.2 s, a command round trip ~0.1 ms.
Arrays sent as command arguments travel by handle (the Pipe pickles them).
"""

from __future__ import annotations

import multiprocessing
import os
import pickle
import time
from typing import Any

import numpy as np

from .array import SharedNDArray
from .queue import Queue


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
