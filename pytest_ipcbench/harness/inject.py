"""Injected slowdowns: make named backends slower on purpose, to measure what a gate can see.

``IPCBENCH_INJECT="shm=1.5,zmq=2"`` (or ``ipcbench gate --inject shm=1.5``, which sets it for the
head's runs only) makes every case of those backends about that many times slower, in the
measured path: before each of its writes, the writing rank spins for ``factor - 1`` times the
time one write cycle took without the spin (the trimmed mean of the last cycles). A spin, not a
sleep: a real regression takes the CPU too, and on an oversubscribed machine that matters.

Only rank 0 spins, and only in a backend it is the root of (the broadcast's and the stream's
writer, the ping-pong's and granularity's first leg), so that a ping-pong's two legs do not both
slow it down.
The environment record of a run says which slowdowns were injected (``injected``): such results
are never a measurement of the code.
"""

from __future__ import annotations

import math
import os
import time
from collections import deque
from typing import Any

from ..core.envinfo import INJECT_ENV

MAX_FACTOR = 100.0
_HISTORY = 128  # write cycles the spin is computed from
_OUTLIER = 20.0  # cycles longer than this many medians (a plan broadcast, a verification) are left out


def parse_injection(text: str, what: str = INJECT_ENV) -> dict[str, float]:
    """``"shm=1.5,zmq=2"`` -> ``{"shm": 1.5, "zmq": 2.0}``; ValueError naming the bad part."""
    factors: dict[str, float] = {}
    for part in (p.strip() for p in text.split(",")):
        if not part:
            continue
        name, sep, value = part.partition("=")
        name = name.strip()
        try:
            factor = float(value) if sep else math.nan
        except ValueError:
            factor = math.nan
        if not name or not math.isfinite(factor) or not 1.0 <= factor <= MAX_FACTOR:
            raise ValueError(f"bad slowdown {part!r} in {what}: expected BACKEND=FACTOR with 1 <= FACTOR <= "
                             f"{MAX_FACTOR:g}, e.g. shm=1.5")
        factors[name] = factor
    return factors


def injected() -> dict[str, float]:
    """The slowdowns asked for in this process's environment ({} when none)."""
    text = os.environ.get(INJECT_ENV, "")
    return parse_injection(text) if text.strip() else {}


def spin(seconds: float) -> None:
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


class _Slowed:
    """Wraps one backend instance's ``write``: spin (factor - 1) x a cycle, then write."""

    def __init__(self, write: Any, factor: float) -> None:
        self.write = write
        self.extra = factor - 1.0
        self.cycles: deque[float] = deque(maxlen=_HISTORY)
        self.last: float | None = None  # when the previous write started
        self.spun = 0.0  # how long the previous spin took

    def __call__(self, obj: Any) -> Any:
        now = time.perf_counter()
        if self.last is not None:
            self.cycles.append(now - self.last - self.spun)
        self.last, self.spun = now, 0.0
        if self.cycles:
            ordered = sorted(self.cycles)
            median = ordered[len(ordered) // 2]
            kept = [c for c in ordered if c <= _OUTLIER * median] or ordered
            self.spun = self.extra * (sum(kept) / len(kept))
            spin(self.spun)
        return self.write(obj)


def slow_down(backend: Any, name: str, factors: dict[str, float] | None = None) -> Any:
    """``backend`` (registered as ``name``) with its writes slowed if ``name`` is in ``factors``
    (default: the environment's) and this is rank 0, its root; else ``backend`` untouched."""
    factors = injected() if factors is None else factors
    factor = factors.get(name)
    if factor is None or factor == 1.0 or backend.group.rank != 0 or backend.root != 0:
        return backend
    backend.write = _Slowed(backend.write, factor)
    return backend
