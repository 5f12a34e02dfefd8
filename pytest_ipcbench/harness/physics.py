"""A figure below physics is a harness error, not a result.

A channel broadcast cannot complete faster than one message crosses the channel: at small sizes
its ``completion`` must not be below the same backend's one-way ping-pong ``latency`` of the same
run. The bound leaves room for what blurs it (load only adds time, so the ping-pong's fast end,
:data:`FAST_END_PERCENTILE`, rule 8; half a round trip includes half the echo's turn-around; a
ping-pong may have two speeds): it is the backend's fastest crossing of any mode
(:func:`crossing_floor`), and only a completion below :data:`PHYSICS_SHARE` of it is flagged. The
fault it catches, a reader starting its clock after the message arrived, reads far lower.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import TypeVar

import numpy as np

from ..core.procs import BUSY_SHARE
from ..core.units import format_time
from ..results.results import Result

T = TypeVar("T")

SMALL_BYTES = 1024  # broadcasts up to this size are checked (1 B - 1 KB)
FAST_END_PERCENTILE = 5  # the ping-pong's fast end: load adds time, it does not take it away
PHYSICS_SHARE = 0.3  # of that fast end: what a one-way delivery can never undercut (see above)


@dataclass(frozen=True)
class PhysicsViolation:
    broadcast: Result
    pingpong: Result
    completion: float  # the broadcast's median completion, seconds
    bound: float  # PHYSICS_SHARE x the backend's fastest crossing (crossing_floor), seconds

    def __str__(self) -> str:
        return (
            f"harness error: {self.broadcast.key} completes in {format_time(self.completion)} (median), "
            f"below {PHYSICS_SHARE:g}x the fast end of one-way crossings of {self.broadcast.backend} in the same "
            f"run ({format_time(self.bound)}: {PHYSICS_SHARE:g}x the 5th percentile of {self.pingpong.key}, "
            f"its fastest)"
        )


def crossing_floor(
    pingpongs: Iterable[tuple[str, int, float, T]], max_bytes: int = SMALL_BYTES
) -> dict[str, tuple[float, T]]:
    """Per backend, its fastest one-way crossing and what measured it: the smallest fast end
    among its ping-pongs ``(backend, size, fast end, what)`` of at most ``max_bytes`` (of any
    mode: a crossing of the mechanism is a crossing), else of its smallest size."""
    floor: dict[str, tuple[int, float, T]] = {}
    for backend, size, fast_end, what in pingpongs:
        rank = (min(size, max_bytes), fast_end)  # any size up to max_bytes counts alike
        if backend not in floor or rank < floor[backend][:2]:
            floor[backend] = (*rank, what)
    return {b: (fast_end, what) for b, (_, fast_end, what) in floor.items()}


def below_physics(results: Iterable[Result], max_bytes: int = SMALL_BYTES) -> list[PhysicsViolation]:
    """Channel broadcasts of at most ``max_bytes`` whose median completion is below PHYSICS_SHARE of
    the backend's fastest one-way crossing in the same results (:func:`crossing_floor`)."""
    results = list(results)
    floor = crossing_floor((r.backend, r.size, float(np.percentile(r.samples["latency"], FAST_END_PERCENTILE)), r)
                           for r in results if r.scenario == "pingpong" and r.samples.get("latency"))
    found = []
    for r in results:
        if (
            r.scenario != "broadcast"
            or r.delivery != "channel"
            or r.size > max_bytes
            or not r.samples.get("completion")
            or r.backend not in floor
        ):
            continue
        fast_end, pong = floor[r.backend]
        completion = float(np.median(r.samples["completion"]))
        bound = PHYSICS_SHARE * fast_end
        if completion < bound:
            found.append(PhysicsViolation(r, pong, completion, bound))
    return found


def busy_note(others_share: float | None) -> str | None:
    """Why a figure below physics is not a harness error on this run, or None: other processes
    took more than ``BUSY_SHARE`` of the CPUs while it ran, and the ping-pong's fast end, measured
    minutes apart, is then no bound."""
    if others_share is None or others_share <= BUSY_SHARE:
        return None
    return f"not counted as a harness error: other processes used {others_share:.0%} of the CPUs during this run"


def judge(violations: Iterable[PhysicsViolation], others_share: float | None) -> list[tuple[str, str, bool]]:
    """Per violation: (broadcast key, what to say, whether it is a harness error; not when
    :func:`busy_note` says why)."""
    note = busy_note(others_share)
    return [(v.broadcast.key, f"{v} -- {note}" if note else str(v), note is None) for v in violations]
