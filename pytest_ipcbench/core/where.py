"""Where a rank is stuck: the backend and its step (setup, prepare, write, read, close).

:func:`describe` reads the main thread's stack (``sys._current_frames``) from a thread of the
rank's own and finds the innermost backend step (a method named like a step whose ``self`` has
``name``, ``group`` and ``root``); nothing runs in the timed region. A local worker answers over
a pipe (:func:`serve`) when the rank that waited in vain asks (:func:`ask`), so a hang reads
"rank 1 hung in inshm's setup (at _hang, inshm.py:30)"; under MPI the watchdog asks its own process.
"""

from __future__ import annotations

import os
import sys
import threading
from collections.abc import Callable
from multiprocessing.connection import Connection
from types import FrameType
from typing import Any

STEPS = {"setup": "setup", "__enter__": "setup", "_create": "setup", "_attach": "setup",
         "open_collectively": "setup", "prepare": "prepare", "write": "write", "read": "read",
         "close": "close", "__exit__": "close"}
ASK_WAIT = 2.0  # seconds a rank that asks waits for the answer (a stack held by C code never comes)


_STDLIB = os.path.dirname(os.__file__) + os.sep


def own_library(path: str) -> bool:
    """A file of Python's own library (not a package installed beside it)."""
    return path.startswith(_STDLIB) and "site-packages" not in path


def locate(frame: FrameType | None) -> tuple[str, str]:
    """(``inshm's read`` or "" outside a backend's step, ``_wait, inshm.py:95``: the innermost call)."""
    if frame is None:
        return "", ""
    innermost = frame
    while innermost.f_back is not None and own_library(innermost.f_code.co_filename):
        innermost = innermost.f_back  # the caller that matters, not select's or a pipe's insides
    step = ""
    while frame is not None:
        name = frame.f_code.co_name
        if name in STEPS:
            owner: Any = frame.f_locals.get("self")
            if (owner is not None and isinstance(getattr(type(owner), "name", None), str)
                    and hasattr(owner, "group") and hasattr(owner, "root")):
                step = f"{type(owner).name}'s {STEPS[name]}"
                break
        frame = frame.f_back
    return step, f"{innermost.f_code.co_name}, {os.path.basename(innermost.f_code.co_filename)}:{innermost.f_lineno}"


def describe(frame: FrameType | None) -> str:
    """``inshm's read (at _wait, inshm.py:95)`` for a stack in a backend's step, else where the
    stack is (``in poll, connection.py:440``); empty without a frame."""
    step, at = locate(frame)
    if not at:
        return ""
    return f"{step} (at {at})" if step else f"in {at}"


def _main_frame() -> FrameType | None:
    return sys._current_frames().get(threading.main_thread().ident or 0)


def main_thread_step() -> str:
    """:func:`describe` of this process's main thread."""
    return describe(_main_frame())


def main_thread_backend_step() -> str:
    """:func:`describe` of this process's main thread if it is in a backend's step, else ""."""
    step, at = locate(_main_frame())
    return f"{step} (at {at})" if step else ""


def serve(conn: Connection, progress: Callable[[], int] | None = None) -> None:
    """In a rank's process: a daemon thread that answers every request on ``conn`` with
    :func:`main_thread_step` (and ``progress()``, as a pair, when given), until the other end closes."""

    def loop() -> None:
        while True:
            try:
                conn.recv()
                conn.send(main_thread_step() if progress is None else (main_thread_step(), progress()))
            except (EOFError, OSError):
                return

    threading.Thread(target=loop, name="ipcbench-where", daemon=True).start()


def ask(conn: Connection | None, wait: float = ASK_WAIT) -> Any:
    """What the rank at the other end of ``conn`` answers (:func:`serve`; "" when it does not
    answer within ``wait`` s)."""
    if conn is None:
        return ""
    try:
        while conn.poll(0):  # an answer that came too late, last time
            conn.recv()
        conn.send(None)
        return conn.recv() if conn.poll(wait) else ""
    except (EOFError, OSError):
        return ""


__all__ = ["STEPS", "ask", "describe", "locate", "main_thread_backend_step", "main_thread_step", "serve"]
