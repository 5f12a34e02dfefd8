"""The harness: time a backend on every rank of a group, by the rules of docs/method.md.

Usable without pytest. Collective: :func:`bench` runs on every rank of a group (a local group
through ``group.run``, as :func:`run_bench` does)::

    result = run_bench(group, BackendSpec("shm", "native"), PayloadSpec("ndarray", 10**6))

One case: rank 0 broadcasts the static plan (:func:`static_plan`); every rank warms up (verified,
untimed); rank 0 sizes the timed plan from the warm-up's cost (rule 23) and broadcasts it, so
every rank makes the same collective calls; the timed iterations keep samples on every rank,
gathered on rank 0 into one :class:`~.results.Result`.

Scenarios (:data:`SCENARIOS`, classes in :mod:`.scenarios`) and their metrics:

* ``broadcast``: ``root`` writes, the others read. ``write``; ``read_avg|min|max`` (to a usable
  object); ``touched_avg|min|max`` (every cache line read, rule 10); ``completion`` (primary: a
  channel's delivery, writer's start to the last reader's arrival on the writer's clock,
  :mod:`.clock`; a store's write plus the slowest read); ``completion_touched``;
  ``completion_synced`` (each reader's own clock from the barrier: may read below latency);
* ``pingpong``: two ranks; ``latency`` = round trip / 2 (rule 5);
* ``stream``: channels only, windows acknowledged by a barrier (OSU bw): ``send``, ``delivered``;
* ``granularity``: the echo side works ``work`` seconds; ``overhead`` = round trip - work.

Times are ``time.perf_counter`` seconds; only a broadcast's delivery compares clocks across
ranks. Two payloads (seeds 1 and 2) alternate so a stale read fails verification; a failure on
any rank fails every rank (:class:`VerificationError`) after the case ended cleanly.
"""

from __future__ import annotations

import gc
from collections.abc import Sequence
from dataclasses import replace

from ..backends.base import BackendSpec
from ..core.affinity import pinned
from ..core.counters import Counters
from ..core.group import Group, MPIGroup
from ..core.heap import steady_heap
from ..results.results import Result
from .count import count_case, not_counted
from .inrun import PIPE_REFERENCE_SIZES, CopyReference, copy_result, pipe_pingpong_result, with_copy_reference
from .payload import BufferPayload, Payload, payload_bytes
from .plan import WARMUP_SHARE, BenchSettings, Plan, timed_plan, verify_per_iteration
from .scenarios import (
    _SCENARIO_CLASSES,
    PAIR_SCENARIOS,
    SCENARIOS,
    VerificationError,
    _Case,
    perf_counter,
    quiet_barrier,
)

# ------------------------------------------------------------------------------- the driver


def _wait(group: Group, settings: BenchSettings) -> None:
    """The harness's own barrier: quiet (no spinning) unless ``settings.quiet_waits`` is off."""
    if settings.quiet_waits:
        quiet_barrier(group)
    else:
        group.barrier()


def _plan_case(case: _Case, group: Group, settings: BenchSettings) -> Plan:
    """Collective: static plan from rank 0; warm-up on every rank; timed plan from rank 0.

    The warm-up starts with one iteration; rank 0 then caps the rest of the static warm-up count
    by time (half the time budget; unless ``settings.warmup`` fixes the count) and broadcasts it.
    """
    static = group.bcast(case.static_plan() if group.rank == 0 else None)
    _wait(group, settings)
    t0 = perf_counter()
    case.block(0, 1, False, lambda i: True)
    first = perf_counter() - t0
    firsts = group.gather(first)
    if firsts is not None:  # rank 0
        more = static.warmup - 1
        if settings.warmup is None:
            more = min(more, int(WARMUP_SHARE * settings.time_budget / max(max(firsts), 1e-9)))
        static = replace(static, warmup=1 + max(0, more))
    static = group.bcast(static if group.rank == 0 else None)
    rec = case.record
    first_checks = len(rec.verify_times)
    t1 = perf_counter()
    if static.warmup > 1:
        case.block(1, static.warmup - 1, False, lambda i: True)
    # seconds per iteration: the later warm-up iterations if there are any (the first pays for
    # first touches and connections), else the first; verification likewise, per iteration over
    # the same iterations (not its longest single check: see verify_per_iteration)
    later = static.warmup > 1
    wall = (perf_counter() - t1) / (static.warmup - 1) if later else first
    verify_cost = verify_per_iteration(rec.verify_times[first_checks:] if later else rec.verify_times,
                                       static.warmup - 1 if later else 1)
    costs = group.gather((wall, verify_cost))
    if costs is not None:  # rank 0
        per_iteration = max(c[0] for c in costs)
        worst_verify = max(c[1] for c in costs)
        plan = timed_plan(static, per_iteration, worst_verify, settings)
    else:
        plan = None
    plan = group.bcast(plan)
    rec.verify_times.clear()
    return plan


def _run_iterations(case: _Case, plan: Plan, start: int, count: int) -> None:
    """Timed iterations ``start ..`` of the plan (their seeds continue after the warm-up's)."""
    w = plan.warmup
    case.block(start + w, count, True, lambda i: plan.verify_at(i - w))


def _finish(cases: list[_Case], plans: list[Plan], group: Group,
            counted: list[Counters | str | None]) -> list[Result | None]:
    """Collective: gather every rank's records; rank 0 builds the Results (with their counters, or
    why there are none); a failed check fails all."""
    results: list[Result | None] = []
    problems: list[str] = []
    for case, plan, counters in zip(cases, plans, counted):
        records = group.gather(case.record)
        if records is not None:  # rank 0
            case.counted = counters
            result = case.result(records, plan)
            results.append(result)
            for r in records:
                shown = [f for f in r.failures if f]
                if r.failures:
                    problems.append(
                        f"{case.spec.id} {case.scenario}: rank {r.rank} failed {len(r.failures)} of "
                        f"{r.checked} checks ({'; '.join(shown)})"
                    )
        else:
            results.append(None)
    verdict = group.bcast(problems if group.rank == 0 else None)
    if verdict:
        raise VerificationError("received data differ from what was written: " + " | ".join(verdict))
    return results


def _count_cases(
    cases: list[_Case], plans: list[Plan], group: Group, settings: BenchSettings
) -> list[Counters | str | None]:
    """Collective: the counting pass of every case (harness/count.py), after all timed rounds;
    rank 0 gets each case's Counters, or the reason it has none, the others Nones."""
    out: list[Counters | str | None] = []
    for case, plan in zip(cases, plans):
        reason = not_counted(case, settings)
        if reason is not None:
            out.append(reason if group.rank == 0 else None)
            continue
        out.append(count_case(case, plan, group, settings, lambda: _wait(group, settings)))
    return out


def _pair_group(group: Group, scenario: str) -> tuple[Group | None, Group]:
    """The 2-rank group a pair scenario runs on (None on the ranks left out)."""
    if group.size == 2:
        return group, group
    if isinstance(group, MPIGroup):
        if group.size < 2:
            raise ValueError(f"{scenario} needs 2 ranks, the group has {group.size}")
        return group.split(2), group
    raise ValueError(
        f"{scenario} needs a group of exactly 2 ranks (got {group.size}): start it with "
        f"LocalWorld.run(..., ranks=2) or ask ipc_group for 2 ranks"
    )


def bench(
    group: Group,
    backend: BackendSpec,
    payload: Payload,
    scenario: str = "broadcast",
    settings: BenchSettings | None = None,
) -> Result | None:
    """Collective: measure one case on every rank of ``group``; the Result on rank 0, else None."""
    return bench_interleaved(group, [backend], payload, scenario, settings, rounds=1)[0]


def bench_interleaved(
    group: Group,
    backends: Sequence[BackendSpec],
    payload: Payload,
    scenario: str = "broadcast",
    settings: BenchSettings | None = None,
    rounds: int = 10,
) -> list[Result | None]:
    """Collective: several backends (or modes) on one payload, measured interleaved.

    Every case is opened and warmed up first; then ``rounds`` rounds each run a block of every
    case in turn (A B A B ..., docs/method.md rule 16), so that drift on the machine hits every case
    alike. Each case's iteration count comes from its own plan (spread over the rounds).
    """
    if scenario not in _SCENARIO_CLASSES:
        raise ValueError(f"unknown scenario {scenario!r}; choose one of {', '.join(SCENARIOS)}")
    if rounds < 1:
        raise ValueError(f"rounds must be at least 1, got {rounds}")
    settings = group.bcast(settings or BenchSettings()) if group.size > 1 else (settings or BenchSettings())
    outer = group
    if scenario in PAIR_SCENARIOS:
        sub, outer = _pair_group(group, scenario)
        if sub is not group:
            try:
                if sub is None:
                    return [None] * len(backends)
                return _bench_on(sub, backends, payload, scenario, settings, rounds)
            finally:
                _wait(outer, settings)  # the ranks left out wait here, asleep
    return _bench_on(group, backends, payload, scenario, settings, rounds)


def _bench_on(
    group: Group,
    backends: Sequence[BackendSpec],
    payload: Payload,
    scenario: str,
    settings: BenchSettings,
    rounds: int,
) -> list[Result | None]:
    steady_heap()  # a 1 MB block costs the same whatever the process did before (core/heap.py)
    with pinned(group.node_rank, settings.pin, group.node_size) as cpu:
        results = _bench_pinned(group, backends, payload, scenario, settings, rounds)
        if settings.pin == "none":
            return results
        cpus = group.allgather(cpu)  # each rank's CPU, by rank: the placement a reader can check
        if all(c is None for c in cpus):
            return results
        return [None if r is None else replace(r, extra={**r.extra, "pinned_cpus": cpus}) for r in results]


def _bench_pinned(group: Group, backends: Sequence[BackendSpec], payload: Payload, scenario: str,
                  settings: BenchSettings, rounds: int) -> list[Result | None]:
    cls = _SCENARIO_CLASSES[scenario]
    cases = [cls(group, spec, payload, settings) for spec in backends]
    opened: list[_Case] = []
    try:
        for case in cases:
            try:
                case.open()
            except BaseException:
                case.close()  # what it opened before failing (the failure is the same on every rank)
                raise
            opened.append(case)
        gc.collect()
        gc_was = gc.isenabled()
        gc.disable()  # no collector pauses inside the timed loops (as pytest-benchmark's option)
        try:
            plans = [_plan_case(case, group, settings) for case in cases]
            for case in cases:
                case.record.warm_times.clear()
            # every case gets the same number of rounds (one alone: one block); its iterations spread evenly
            rounds = 1 if len(cases) == 1 else rounds
            done = [0] * len(cases)
            for r in range(rounds):
                for k, (case, plan) in enumerate(zip(cases, plans)):
                    n = plan.iterations * (r + 1) // rounds - done[k]
                    if n:
                        _wait(group, settings)
                        _run_iterations(case, plan, done[k], n)
                        done[k] += n
            counted = _count_cases(cases, plans, group, settings)
        finally:
            if gc_was:
                gc.enable()
        results = _finish(cases, plans, group, counted)
    finally:
        for case in reversed(opened):
            case.close()
    return results


def run_bench(
    group: Group,
    backend: BackendSpec,
    payload: Payload,
    scenario: str = "broadcast",
    settings: BenchSettings | None = None,
) -> Result:
    """Run :func:`bench` through ``group.run`` (works for local and MPI groups); rank 0's Result,
    on every calling rank (under MPI every rank calls it; for a local group rank 0)."""
    outcomes = group.run(bench, backend, payload, scenario, settings)
    result = outcomes[0]
    if result is None:
        raise RuntimeError("rank 0 produced no result")
    return result


def run_interleaved(
    group: Group,
    backends: Sequence[BackendSpec],
    payload: Payload,
    scenario: str = "broadcast",
    settings: BenchSettings | None = None,
    rounds: int = 10,
) -> list[Result]:
    """:func:`bench_interleaved` through ``group.run``; rank 0's Results, on every calling rank."""
    outcomes = group.run(bench_interleaved, list(backends), payload, scenario, settings, rounds)
    return list(outcomes[0])


# with names re-exported for runner/ and plugin/, which import them from here
__all__ = ["PAIR_SCENARIOS", "PIPE_REFERENCE_SIZES", "SCENARIOS", "BenchSettings", "BufferPayload", "CopyReference",
           "VerificationError", "bench", "bench_interleaved", "copy_result", "payload_bytes", "pipe_pingpong_result",
           "quiet_barrier", "run_bench", "run_interleaved", "with_copy_reference"]
