"""A figure below physics is a harness error, not a result.

A broadcast through a channel cannot complete, on its slowest reader, faster than one message
crosses that channel: its ``completion`` at small sizes must not be below the same backend's
one-way ping-pong ``latency`` measured in the same run. The two cases run minutes apart, and load
on a shared machine only adds time, so the bound is the ping-pong's fast end: a broadcast is
flagged when its median completion is below the 5th percentile of the one-way latency (below 95%
of the crossings that run measured). Under load the ping-pong's median moved 1.7 ms while its
fast end held; a broken clock (a reader timing a message that had long arrived) reads below it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable

import numpy as np

from ..core.units import format_time
from ..history.results import Result

SMALL_BYTES = 1024  # broadcasts up to this size are checked (1 B - 1 KB)
FAST_END_PERCENTILE = 5  # the ping-pong's fast end: load adds time, it does not take it away


@dataclass(frozen=True)
class PhysicsViolation:
    broadcast: Result
    pingpong: Result
    completion: float  # the broadcast's median completion, seconds
    bound: float  # the ping-pong's one-way latency at its 5th percentile, seconds

    def __str__(self) -> str:
        return (
            f"harness error: {self.broadcast.key} completes in {format_time(self.completion)} (median), "
            f"faster than 95% of one-way crossings of {self.broadcast.backend} in the same run "
            f"({format_time(self.bound)} at the 5th percentile of {self.pingpong.key})"
        )


def below_physics(results: Iterable[Result], max_bytes: int = SMALL_BYTES) -> list[PhysicsViolation]:
    """Channel broadcasts of at most ``max_bytes`` whose median completion is below the fast end of
    the backend's one-way latency (its smallest ping-pong of the same mode, else of any mode)."""
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
        bound = float(np.percentile(pong.samples["latency"], FAST_END_PERCENTILE))
        if completion < bound:
            found.append(PhysicsViolation(r, pong, completion, bound))
    return found
