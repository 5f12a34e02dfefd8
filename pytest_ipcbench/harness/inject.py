"""Injected slowdowns: make named backends slower on purpose, to measure what a gate can see.

``IPCBENCH_INJECT="shm=1.5,zmq=2"`` (or ``ipcbench gate --inject shm=1.5``, which sets it for the
head's runs only) makes every case of those backends that many times slower (``shm=1.5@1MiB``:
only its cases of at least 1 MiB, a regression of the large-message path), in the measured
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

import time
from typing import Callable

from ..core.injection import Slowdown, injected


def spin(seconds: float) -> None:
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


def stretcher(name: str, nbytes: int = 0,
              factors: dict[str, Slowdown] | None = None) -> Callable[[float], None] | None:
    """For a backend registered as ``name``, in a case of ``nbytes`` (the size its key names): a
    function that, given the seconds an operation took so far, spins ``factor - 1`` times that;
    None when that case is not slowed (the default: the environment's slowdowns)."""
    factors = injected() if factors is None else factors
    slowdown = factors.get(name)
    if slowdown is None or slowdown.factor == 1.0 or nbytes < slowdown.min_bytes:
        return None
    extra = slowdown.factor - 1.0
    return lambda elapsed: spin(extra * elapsed) if elapsed > 0 else None
