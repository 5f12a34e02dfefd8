"""A figure below physics is a harness error, not a result.

A broadcast through a channel cannot complete, on its slowest reader, faster than one message
crosses that channel: its ``completion`` at small sizes must not be below the same backend's
one-way ping-pong ``latency`` measured in the same run. :func:`below_physics` finds the cases
where it is, beyond the noise both sides measured (a bootstrap interval of the ratio of medians
that lies wholly under 1).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Sequence

import numpy as np

from ..core.units import format_time
from ..history.results import Result
from ..history.stats import RatioInterval, ratio_interval

SMALL_BYTES = 1024  # broadcasts up to this size are checked (1 B - 1 KB)
_MAX_SAMPLES = 2000  # each side's samples are thinned to at most this many for the interval


@dataclass(frozen=True)
class PhysicsViolation:
    broadcast: Result
    pingpong: Result
    interval: RatioInterval  # broadcast completion / one-way latency

    def __str__(self) -> str:
        return (
            f"harness error: {self.broadcast.key} completes in {format_time(self.interval.median_a)}, "
            f"below one message's one-way latency through {self.broadcast.backend} in the same run "
            f"({format_time(self.interval.median_b)}, {self.pingpong.key}): completion/latency {self.interval}"
        )


def _thin(samples: Sequence[float]) -> np.ndarray:
    x = np.asarray(samples, dtype=float)
    return x if x.size <= _MAX_SAMPLES else x[np.linspace(0, x.size - 1, _MAX_SAMPLES).astype(int)]


def below_physics(results: Iterable[Result], max_bytes: int = SMALL_BYTES) -> list[PhysicsViolation]:
    """Channel broadcasts of at most ``max_bytes`` whose completion is below the backend's one-way
    latency (its smallest ping-pong of the same mode, else of any mode) beyond measured noise."""
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
        interval = ratio_interval(_thin(r.samples["completion"]), _thin(pong.samples["latency"]), resamples=1000)
        if interval.high < 1.0:
            found.append(PhysicsViolation(r, pong, interval))
    return found
