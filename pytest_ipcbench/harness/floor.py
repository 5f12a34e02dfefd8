"""The harness's own floor: what a case costs when nothing moves.

:func:`measure_floor` times the ``null`` backend (backends/null.py) with the same scenario loop
(1 B, ping-pong and broadcast); its median per message is the smallest change a case can show.
``ipcbench selfcheck`` prints it and ``ipcbench run`` records it as ``env["harness_floor"]``
(``{"seconds": {"pingpong": ..., "broadcast": ...}, "ranks", "group", "backend", "size"}``).
Stream has no floor: a null channel cannot hand a reader the window of values it verifies.
"""

from __future__ import annotations

import statistics
from typing import Any

from ..backends.base import BackendSpec
from ..core.group import Group
from ..core.units import format_time
from .measure import bench_interleaved
from .payload import BufferPayload
from .plan import BenchSettings

FLOOR_SCENARIOS = ("pingpong", "broadcast")
FLOOR_BACKEND = "null"
#: per scenario: a short budget (the null channel's iterations cost well under a microsecond)
FLOOR_BUDGET = 0.05


def measure_floor(group: Group, rounds: int = 3, scenarios: tuple[str, ...] = FLOOR_SCENARIOS) -> dict[str, Any] | None:
    """Collective: the null channel's median per message in each scenario, at 1 B; rank 0 gets the
    record (see the module docstring), the other ranks None."""
    settings = BenchSettings(time_budget=FLOOR_BUDGET, count=False)
    seconds: dict[str, float] = {}
    for scenario in scenarios if group.size >= 2 else ():
        result = bench_interleaved(group, [BackendSpec(FLOOR_BACKEND, "native")], BufferPayload(1), scenario,
                                   settings, rounds)[0]
        if result is not None:
            seconds[scenario] = float(statistics.median(result.samples[result.primary]))
    if group.rank != 0:
        return None
    return {"seconds": seconds, "ranks": group.size, "group": "mpi" if group.is_mpi else "local",
            "backend": FLOOR_BACKEND, "size": 1}


def floor_line(floor: dict[str, Any] | None) -> str:
    """One line for a terminal or a report (``ipcbench selfcheck``): the floor per scenario."""
    if not floor or not floor.get("seconds"):
        return "harness floor: not measured"
    parts = ", ".join(f"{s} {format_time(v)}" for s, v in floor["seconds"].items())
    where = "MPI ranks" if floor.get("group") == "mpi" else "local workers"
    return (f"harness floor ({where}, the null channel: nothing moved, 1 B): {parts} per message; no case can "
            "show a change smaller than this")


__all__ = ["FLOOR_BACKEND", "FLOOR_SCENARIOS", "floor_line", "measure_floor"]
