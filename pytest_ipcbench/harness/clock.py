"""One clock for a broadcast: readers' timestamps on the writer's clock.

A broadcast's completion compares timestamps of different ranks. Ranks on one host share
``CLOCK_MONOTONIC`` (``time.perf_counter`` on Linux): ``shared``. Ranks on other hosts get an
offset to the writer's clock estimated as NTP and IMB do (``offset-corrected``): from the minimum
of ``t_reader - t_writer`` and of ``t_writer - t_reader`` exchanged both ways, the offset is half
their difference and its error at most half their sum, which the result records.
"""

from __future__ import annotations

import socket
import time
from dataclasses import dataclass

from ..core.group import Group

SHARED = "shared"
OFFSET = "offset-corrected"
OFFSET_ROUNDS = 100

perf_counter = time.perf_counter


def host_identity() -> str:
    """This host and this boot of its kernel: equal on two ranks iff they share CLOCK_MONOTONIC."""
    try:
        with open("/proc/sys/kernel/random/boot_id") as f:
            boot = f.read().strip()
    except OSError:
        boot = ""
    return f"{socket.gethostname()}/{boot}"


@dataclass(frozen=True)
class RankClocks:
    """How each rank's timestamps map onto the writer's: ``t_writer = t_rank - offsets[rank]``."""

    method: str  # SHARED or OFFSET
    offsets: tuple[float, ...]  # seconds, per rank of the group (0 for the writer, and when shared)
    error: float  # seconds: the largest bound on an offset's error (0 when shared)

    def describe(self) -> str:
        if self.method == SHARED:
            return "one clock (CLOCK_MONOTONIC, every rank on one host)"
        return f"offset-corrected clocks (each offset within ±{self.error * 1e6:.1f} µs)"


def rank_clocks(group: Group, root: int, force_offsets: bool = False, rounds: int = OFFSET_ROUNDS) -> RankClocks:
    """Collective: the clock of a broadcast whose writer is ``root``, the same on every rank."""
    hosts = group.allgather(host_identity()) if group.size > 1 else [host_identity()]
    if len(set(hosts)) == 1 and not force_offsets:
        return RankClocks(SHARED, (0.0,) * group.size, 0.0)
    return _estimate_offsets(group, root, rounds)


def _estimate_offsets(group: Group, root: int, rounds: int) -> RankClocks:
    writer = group.rank == root
    forward, backward = float("inf"), [float("inf")] * group.size
    for _ in range(rounds):
        group.barrier()
        # writer -> readers: t_reader - t_writer = forward delay + offset
        sent = group.bcast(perf_counter() if writer else None, root=root)
        forward = min(forward, perf_counter() - sent) if not writer else forward
        # readers -> writer: t_writer - t_reader = backward delay - offset
        stamps = group.gather(perf_counter(), root=root)
        if writer:
            assert stamps is not None  # gathered at the writer (the root)
            arrived = perf_counter()
            backward = [min(b, arrived - t) for b, t in zip(backward, stamps)]
    backward = group.bcast(backward if writer else None, root=root)
    mine = (0.0, 0.0) if writer else ((forward - backward[group.rank]) / 2, (forward + backward[group.rank]) / 2)
    both = group.allgather(mine)
    return RankClocks(OFFSET, tuple(o for o, _ in both), max(e for _, e in both))
