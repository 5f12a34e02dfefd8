"""Injected slowdowns: make named backends slower on purpose, to measure what a gate can see.

``IPCBENCH_INJECT="shm=1.5,zmq=2"`` (or ``ipcbench gate --inject shm=1.5``, which sets it for the
head's runs only) makes every case of those backends that many times slower, in the measured
path: where a rank ends a timed operation (a broadcast's reader once it holds the object, the
ping-pong's rank 0 once the echo is back, the stream's writer once the window is acknowledged),
it first spins for ``factor - 1`` times the time the operation took, so the time it then
records is about ``factor`` times the mechanism's (or more: a reader that spins reaches the next
barrier late, and the writer's wake-up from its wait there lands in the next measured time). A spin, not a sleep: a real regression takes the CPU
too, and on an oversubscribed machine that matters. (A spin of a share of the write alone would
slow a case by an unknown fraction: the write is one part of what a case times.) Granularity cases
whose echo side works are not slowed: rank 0 cannot tell the mechanism's share of their round
trip from the work.

The environment record of a run says which slowdowns were injected (``injected``): such results
are never a measurement of the code.
"""

from __future__ import annotations

import math
import os
import time
from typing import Callable

from ..core.envinfo import INJECT_ENV
from ..core.errors import UsageError

MAX_FACTOR = 100.0


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
            raise UsageError(f"bad slowdown {part!r} in {what}: expected BACKEND=FACTOR with 1 <= FACTOR <= "
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


def stretcher(name: str, factors: dict[str, float] | None = None) -> Callable[[float], None] | None:
    """For a backend registered as ``name``: a function that, given the seconds an operation
    took so far, spins ``factor - 1`` times that; None when ``name`` is not slowed (the
    default: the environment's slowdowns)."""
    factors = injected() if factors is None else factors
    factor = factors.get(name)
    if factor is None or factor == 1.0:
        return None
    extra = factor - 1.0
    return lambda elapsed: spin(extra * elapsed) if elapsed > 0 else None
