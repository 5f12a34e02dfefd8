"""In-run references: what this machine does without any backend, measured in the same run.

A numpy copy of the payload's size (the reference of a result's efficiency) and a raw pipe
ping-pong (what ``ipcbench compare`` divides by when two files come from different runs).
"""

from __future__ import annotations

import os
import time
from dataclasses import replace
from typing import Any

import numpy as np

from ..results.results import Result

perf_counter = time.perf_counter

def copy_samples(nbytes: int, time_budget: float = 0.3, max_reps: int = 200, min_reps: int = 5) -> list[float]:
    """Seconds per ``np.copyto`` of ``nbytes`` into an already touched destination (efficiency's reference)."""
    nbytes = max(1, int(nbytes))
    src = np.ones(nbytes, dtype=np.uint8)
    dst = np.zeros(nbytes, dtype=np.uint8)  # zeros + the warm-up copy: every page touched
    np.copyto(dst, src)
    t0 = perf_counter()
    np.copyto(dst, src)
    one = max(perf_counter() - t0, 1e-9)
    reps = int(min(max_reps, max(min_reps, time_budget / one)))
    out = []
    for _ in range(reps):
        t0 = perf_counter()
        np.copyto(dst, src)
        out.append(perf_counter() - t0)
    return out


def copy_result(nbytes: int, time_budget: float = 0.3) -> Result:
    """A :class:`Result` (scenario ``copy``, backend ``numpy``) of :func:`copy_samples`."""
    return Result("copy", "numpy", "native", "buffer", int(nbytes), 1, {"copy": copy_samples(nbytes, time_budget)},
                  nbytes=int(nbytes), primary="copy", extra={"what": "np.copyto into a touched destination"})


# A child that echoes every message it reads from stdin back on stdout (exactly ``n`` bytes each).
_ECHO = (
    "import os, sys\n"
    "n = int(sys.argv[1])\n"
    "while True:\n"
    "    buf = b''\n"
    "    while len(buf) < n:\n"
    "        chunk = os.read(0, n - len(buf))\n"
    "        if not chunk:\n"
    "            sys.exit(0)\n"
    "        buf += chunk\n"
    "    view = memoryview(buf)\n"
    "    while view:\n"
    "        view = view[os.write(1, view):]\n"
)


def pipe_pingpong_samples(nbytes: int, time_budget: float = 0.1, max_reps: int = 5000,
                          min_reps: int = 20, warmup: int = 20) -> list[float]:
    """Seconds of one way (round trip / 2) of ``nbytes`` between this process and an echoing
    child over two plain OS pipes: with :func:`copy_samples`, the in-run reference for the
    machine's state (docs/method.md rule 19), this one following the scheduler.
    """
    import subprocess
    import sys

    nbytes = max(1, int(nbytes))
    msg = b"x" * nbytes
    child = subprocess.Popen([sys.executable, "-c", _ECHO, str(nbytes)], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, bufsize=0)
    assert child.stdin is not None and child.stdout is not None
    w, r = child.stdin.fileno(), child.stdout.fileno()

    def trip() -> None:
        view = memoryview(msg)
        while view:
            view = view[os.write(w, view):]
        got = 0
        while got < nbytes:
            chunk = os.read(r, nbytes - got)
            if not chunk:
                raise RuntimeError("the echo child of the pipe ping-pong exited")
            got += len(chunk)

    out: list[float] = []
    try:
        for _ in range(warmup):
            trip()
        deadline = perf_counter() + time_budget
        while len(out) < max_reps and (len(out) < min_reps or perf_counter() < deadline):
            t0 = perf_counter()
            trip()
            out.append((perf_counter() - t0) / 2)
    finally:
        child.stdin.close()
        child.stdout.close()
        try:
            child.wait(timeout=10)
        except subprocess.TimeoutExpired:
            child.kill()
            child.wait()
    return out


#: Sizes of the pipe ping-pong reference: latency-bound and bandwidth-bound.
PIPE_REFERENCE_SIZES = (1, 64 * 1024)


def pipe_pingpong_result(nbytes: int, time_budget: float = 0.1) -> Result:
    """A :class:`Result` (scenario ``reference``, backend ``pipe``) of :func:`pipe_pingpong_samples`."""
    return Result("reference", "pipe", "bytes", "buffer", int(nbytes), 2,
                  {"latency": pipe_pingpong_samples(nbytes, time_budget)}, nbytes=int(nbytes), primary="latency",
                  extra={"what": "os.write/os.read ping-pong with an echoing child over two pipes (round trip / 2)"})


#: Scenarios of in-run references: they measure the machine, not the code under test.
REFERENCE_SCENARIOS = ("copy", "reference")


class CopyReference:
    """Copy bandwidth by size, measured once per size per process (cheap, cached)."""

    def __init__(self, time_budget: float = 0.2) -> None:
        self.time_budget = time_budget
        self.results: dict[int, Result] = {}

    def bandwidth(self, nbytes: int) -> float:
        """Bytes per second of a plain copy of ``nbytes`` (median)."""
        nbytes = max(1, int(nbytes))
        if nbytes not in self.results:
            self.results[nbytes] = copy_result(nbytes, self.time_budget)
        return self.results[nbytes].throughput()


def with_copy_reference(result: Result, copy_bw: float | None, **extra: Any) -> Result:
    """A copy of ``result`` with the copy bandwidth (B/s) measured in the same run (its efficiency
    is derived from it: :meth:`Result.efficiency`) and ``extra`` added: the one place a harness
    Result is completed; the Result it was built as is left as it was."""
    return replace(result, copy_bandwidth=copy_bw if copy_bw and copy_bw > 0 else None,
                   extra={**result.extra, **extra})
