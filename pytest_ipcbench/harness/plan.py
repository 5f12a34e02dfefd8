"""What the harness measures a case with: its settings and its plan (warm-up and iterations).

Rank 0 decides the plan and broadcasts it (docs/method.md rules 1-2): :func:`static_plan` scales
iterations down as size grows, :func:`timed_plan` caps them by the time budget after warm-up.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from ..core.affinity import PIN_MODES

VERIFY_MODES = ("auto", "every", "ends")
#: how broadcast readers' timestamps are put on the writer's clock: ``auto`` (one clock when every
#: rank runs on one host, else offset-corrected) or ``offset`` (always estimate the offsets)
CLOCK_MODES = ("auto", "offset")

# Static plan: (payload bytes up to, iterations, warm-up) -- mpi4py.bench (10000 / 1000 above
# 16 KiB / 10 above 1 MiB; skip 100 / 10 / 1) and OSU (10000 / 1000, skip 100 / 10), with more
# iterations above 1 MiB than mpi4py.bench so that the ratio intervals have samples to work on.
STATIC_PLAN = (
    (16 * 1024, 10_000, 100),
    (1024 * 1024, 1_000, 10),
    (64 * 10**6, 100, 2),
    (math.inf, 20, 1),
)

WARMUP_SHARE = 0.5  # at most this share of the time budget goes to warm-up beyond its first iteration

@dataclass(frozen=True)
class BenchSettings:
    """How hard the harness works on one case. Picklable; rank 0's copy is the one that counts."""

    time_budget: float = 1.0  # seconds of timed iterations per case (the time cap)
    max_iterations: int = 10_000  # cap on the static plan
    min_iterations: int = 5  # floor, beats the caps: a median needs samples
    volume_cap: int = 4 * 10**9  # payload bytes written per case (the volume cap)
    warmup: int | None = None  # warm-up iterations; None: by size (100 / 10 / 2 / 1)
    verify: str = "auto"  # every | ends | auto (rank 0 decides from the warm-up)
    touch: bool = True  # readers also time touching every cache line of what they got
    window: int = 64  # stream: messages per acknowledgement (OSU's window)
    window_bytes: int = 64 * 10**6  # stream: at most this many bytes in flight per window
    work: float = 0.0  # granularity: seconds of work per task on the echo side
    gap: float = 0.01  # idle: seconds both sides stay idle before each timed round trip
    quiet_waits: bool = True  # the harness's own MPI waits sleep instead of spinning
    alternate: bool = True  # two payloads alternate (a stale read fails); False: one, every time
    clock: str = "auto"  # broadcast: one host's clock, or offset-corrected clocks (CLOCK_MODES)
    pin: str = "auto"  # each rank pinned to one CPU while a case runs: auto (when ranks outnumber cores), core, none
    # the counting pass after the timed rounds (harness/count.py, docs/method.md rule 20): repeats of a
    # block of untimed messages between counter snapshots; off, or above count_max_bytes per
    # message, a result has no counters
    count: bool = True
    count_repeats: int = 3
    count_max_bytes: int = 64 * 2**20

    def __post_init__(self) -> None:
        for ok, problem in (
            (self.verify in VERIFY_MODES, f"verify must be one of {', '.join(VERIFY_MODES)}, not {self.verify!r}"),
            (self.time_budget > 0, f"time_budget must be positive, got {self.time_budget}"),
            (1 <= self.min_iterations <= self.max_iterations,
             f"need 1 <= min_iterations ({self.min_iterations}) <= max_iterations ({self.max_iterations})"),
            (self.warmup is None or self.warmup >= 0, f"warmup must not be negative, got {self.warmup}"),
            (self.clock in CLOCK_MODES, f"clock must be one of {', '.join(CLOCK_MODES)}, not {self.clock!r}"),
            (self.pin in PIN_MODES, f"pin must be one of {', '.join(PIN_MODES)}, not {self.pin!r}"),
            (self.window >= 1, f"window must be at least 1, got {self.window}"),
            (self.count_repeats >= 1, f"count_repeats must be at least 1, got {self.count_repeats}"),
            (self.work >= 0, f"work must not be negative, got {self.work}"),
            (0 <= self.gap <= 3600, f"gap must be between 0 and 3600 seconds, got {self.gap}"),
        ):
            if not ok:
                raise ValueError(problem)


@dataclass(frozen=True)
class Plan:
    """What every rank does for one case; made and broadcast by rank 0."""

    warmup: int
    iterations: int
    verify: str = "every"  # every | ends
    limited_by: str = "count"  # count | volume | time | min
    estimate: float = 0.0  # seconds per iteration measured in the warm-up (rank 0's wall time)

    def verify_at(self, i: int) -> bool:
        return self.verify == "every" or i == 0 or i == self.iterations - 1


def static_plan(nbytes: int, settings: BenchSettings = BenchSettings(), per_iteration_bytes: int | None = None) -> Plan:
    """The plan from the size alone: count by size, capped by ``max_iterations`` and volume."""
    moved = max(1, per_iteration_bytes if per_iteration_bytes is not None else nbytes)
    # the first row whose limit holds the size (the last row beyond them all)
    _, count, warm = next((row for row in STATIC_PLAN if nbytes <= row[0]), STATIC_PLAN[-1])
    n, limited_by = min(count, settings.max_iterations), "count"
    by_volume = settings.volume_cap // moved
    if by_volume < n:
        n, limited_by = int(by_volume), "volume"
    if n < settings.min_iterations:
        n, limited_by = settings.min_iterations, "min"
    warm = settings.warmup if settings.warmup is not None else warm
    return Plan(warmup=max(1, warm), iterations=n, limited_by=limited_by)


def verify_per_iteration(verify_times: list[float], iterations: int) -> float:
    """Seconds of verification per iteration: the sum over ``iterations`` warm-up iterations.

    Not the longest single check (a first touch, or a preempted check, as long as a whole
    iteration): set against the mean iteration it made the plan depend on chance (rule 23).
    """
    return sum(verify_times) / max(1, iterations)


def timed_plan(static: Plan, per_iteration: float, verify_cost: float, settings: BenchSettings) -> Plan:
    """Rank 0's decision after the warm-up: cap by time, choose the verification mode.

    ``per_iteration`` is the wall time of one warm-up iteration (verification included),
    ``verify_cost`` the verification time per iteration over the same iterations
    (:func:`verify_per_iteration`; both the largest over ranks).
    """
    verify = settings.verify
    if verify == "auto":
        verify = "ends" if verify_cost > 0.5 * max(per_iteration - verify_cost, 1e-9) else "every"
    cost = per_iteration if verify == "every" else max(per_iteration - verify_cost, 1e-9)
    n, limited_by = static.iterations, static.limited_by
    by_time = int(settings.time_budget / max(cost, 1e-9))
    if by_time < n:
        n, limited_by = by_time, "time"
    if n < settings.min_iterations:
        n, limited_by = settings.min_iterations, "min"
    return Plan(static.warmup, n, verify, limited_by, per_iteration)
