"""A figure below physics is a harness error, not a result.

A broadcast through a channel cannot complete, on its slowest reader, faster than one message
crosses that channel: its ``completion`` at small sizes must not be below the same backend's
one-way ping-pong ``latency`` measured in the same run. Two things blur that bound, so the check
leaves room for them:

* the cases run seconds or minutes apart, and load on a shared machine only adds time: the bound
  is the ping-pong's fast end (its 5th percentile, :data:`FAST_END_PERCENTILE`), which load moves
  least (under load average 10 here a ping-pong's median moved to 1.7 ms while its fast end held);
* a ping-pong's half round trip is one crossing plus half the echo side's turn-around (a read and
  a write in Python): quiet here, a 1-reader broadcast delivered in 0.71-0.99x of that fast end
  (mp-queue 0.71x, zmq 0.75x, mpi-bcast 0.98x), so only a completion below
  :data:`PHYSICS_SHARE` of it is flagged.

The fault this catches reads far lower: a reader that starts its clock after the message arrived
times a local receive, 3.7-8 µs against 35-67 µs for one zmq crossing (0.1-0.25x).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable

import numpy as np

from ..core.procs import BUSY_SHARE
from ..core.units import format_time
from ..history.results import Result

SMALL_BYTES = 1024  # broadcasts up to this size are checked (1 B - 1 KB)
FAST_END_PERCENTILE = 5  # the ping-pong's fast end: load adds time, it does not take it away
PHYSICS_SHARE = 0.5  # of that fast end: what a one-way delivery can never undercut (see above)


@dataclass(frozen=True)
class PhysicsViolation:
    broadcast: Result
    pingpong: Result
    completion: float  # the broadcast's median completion, seconds
    bound: float  # PHYSICS_SHARE x the ping-pong's one-way latency at its 5th percentile, seconds

    def __str__(self) -> str:
        return (
            f"harness error: {self.broadcast.key} completes in {format_time(self.completion)} (median), "
            f"below {PHYSICS_SHARE:g}x the fast end of one-way crossings of {self.broadcast.backend} in the same "
            f"run ({format_time(self.bound)}: {PHYSICS_SHARE:g}x the 5th percentile of {self.pingpong.key})"
        )


def below_physics(results: Iterable[Result], max_bytes: int = SMALL_BYTES) -> list[PhysicsViolation]:
    """Channel broadcasts of at most ``max_bytes`` whose median completion is below PHYSICS_SHARE of
    the fast end of the backend's one-way latency (its smallest ping-pong of the same mode, else of any mode)."""
    results = list(results)
    latency: dict[tuple[str, str], Result] = {}
    for r in results:
        if r.scenario == "pingpong" and r.samples.get("latency"):
            for key in ((r.backend, r.mode), (r.backend, "")):
                if key not in latency or r.size < latency[key].size:
                    latency[key] = r
    found = []
    for r in results:
        if r.scenario != "broadcast" or r.kind != "channel" or r.size > max_bytes or not r.samples.get("completion"):
            continue
        pong = latency.get((r.backend, r.mode)) or latency.get((r.backend, ""))
        if pong is None:
            continue
        completion = float(np.median(r.samples["completion"]))
        bound = PHYSICS_SHARE * float(np.percentile(pong.samples["latency"], FAST_END_PERCENTILE))
        if completion < bound:
            found.append(PhysicsViolation(r, pong, completion, bound))
    return found


def busy_note(others_share: float | None) -> str | None:
    """Why a figure below physics is not a harness error on this run, or None: other processes
    took more than ``BUSY_SHARE`` of the CPUs while it ran, and the cases ran seconds or minutes
    apart, so the ping-pong's fast end is no bound then (4 ms for a 1 KB crossing under load
    average 15 here, while a broadcast read 0.7 ms)."""
    if others_share is None or others_share <= BUSY_SHARE:
        return None
    return f"not counted as a harness error: other processes used {others_share:.0%} of the CPUs during this run"


def judge(violations: Iterable[PhysicsViolation], others_share: float | None) -> list[tuple[str, str, bool]]:
    """Per violation: (broadcast key, what to say, whether it is a harness error; not when
    :func:`busy_note` says why)."""
    note = busy_note(others_share)
    return [(v.broadcast.key, f"{v} -- {note}" if note else str(v), note is None) for v in violations]
