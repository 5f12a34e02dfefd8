"""``advise(obj)``: which (backend, mode) pair moves this object fastest here, measured on it.

The steps (docs/advise.md): the object's features; every pair this group can run (users'
backends included, both modes); a shortlist from the prior; each shortlisted pair probed once
with the object (a failure is reported and the pair left out); the race and its confirmation;
the :class:`~.decision.Advice`, decided on rank 0 and broadcast. Outside MPI the ranks are a
:class:`~..core.local.LocalWorld` of ``readers + 1`` processes, each probe in a run of its own
(a crash or hang restarts the world); under ``mpiexec`` every rank calls :func:`advise`.
"""

from __future__ import annotations

import platform
import time
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from ..backends.base import MODES, BackendSpec, BackendUnavailable, backend_names, get_backend
from ..core.errors import IpcbenchError, UsageError
from ..core.group import Group, MPIGroup, in_mpi_job
from ..core.local import LocalWorld
from ..core.procs import cores, load_average
from ..core.registry import ExtensionError
from .decision import Advice, Candidate, counts_of
from .features import Features, features
from .payload import ObjectPayload
from .prior import SHORTLIST, bucket, ranked, shortlist, source
from .race import METRICS, RaceOptions, RaceRecord, probe, probes_only, race, race_floor

SCENARIOS = tuple(METRICS)
#: a probe's reader gives up after this long (a backend that never delivers the object)
PROBE_TIMEOUT = 60.0
#: the race's budget at least, whatever the start and the probes took (a stage and a confirmation)
MIN_RACE = 2.0


def _check(scenario: str, readers: int, budget: float) -> None:
    if scenario not in SCENARIOS:
        raise UsageError(f"scenario {scenario!r}: choose one of {', '.join(SCENARIOS)}")
    if not 1 <= readers <= 64:
        raise UsageError(f"readers must be between 1 and 64, got {readers}")
    if scenario == "pingpong" and readers != 1:
        raise UsageError("a ping-pong has one reader (the echo): use --readers 1")
    if not 1 <= budget <= 3600:
        raise UsageError(f"budget must be between 1 and 3600 seconds, got {budget:g}")


def pairs(group: Group | None, scenario: str, backends: Sequence[str] | None = None
          ) -> tuple[list[BackendSpec], dict[str, str]]:
    """(the pairs that can run here, {pair: why not} for the others). ``backends`` limits the
    names (an unknown name is a UsageError); internal backends (references) are never offered."""
    known = backend_names()
    if backends:
        unknown = [b for b in backends if b not in known]
        if unknown:
            raise UsageError(f"unknown backend(s) {', '.join(unknown)}; known: {', '.join(known)}")
    names = list(backends) if backends else list(known)
    ok: list[BackendSpec] = []
    out: dict[str, str] = {}
    for name in names:
        try:
            cls = get_backend(name)
        except (BackendUnavailable, ExtensionError, ValueError) as exc:
            for mode in MODES:
                out[f"{name}/{mode}"] = str(exc)
            continue
        if cls.internal:
            continue
        why = cls.unavailable(group)
        if why is None and scenario == "stream" and cls.delivery != "channel":
            why = "a store keeps only the newest value: the stream scenario needs a channel"
        for mode in MODES:
            reason = why
            if reason is None and scenario == "stream" and mode == "native" and cls.native_views_until_next_write:
                reason = "its native values are views the next write overwrites: streamed in bytes mode only"
            if reason:
                out[f"{name}/{mode}"] = reason
            else:
                ok.append(BackendSpec(name, mode))
    return ok, out


def environment(group_kind: str, ranks: int, load_start: float | None, load_end: float | None) -> dict[str, Any]:
    n = cores()
    return {"cores": n, "ranks": ranks, "ranks_per_core": ranks / n, "load_start": load_start,
            "load_end": load_end, "group": group_kind, "machine": platform.node(),
            "python": platform.python_version()}


def _probe_rank(group: Group, spec: BackendSpec, payload: ObjectPayload, scenario: str) -> float:
    return probe(group, replace(spec, timeout=PROBE_TIMEOUT), payload, scenario)


def _ready(group: Group) -> None:
    group.barrier()


def _probe_mpi(group: Group, spec: BackendSpec, payload: ObjectPayload, scenario: str) -> tuple[str, float]:
    """(why the probe failed on some rank, or ""; rank 0: seconds of its iteration)."""
    reason, seconds = "", 0.0
    try:
        seconds = _probe_rank(group, spec, payload, scenario)
    except Exception as exc:
        reason = f"rank {group.rank}: {type(exc).__name__}: {exc}"
    return "; ".join(r for r in group.allgather(reason) if r), seconds


def advise(obj: Any, readers: int = 1, scenario: str = "broadcast", backends: Sequence[str] | None = None,
           budget: float = 60.0, shortlist_size: int = SHORTLIST, rounds: int = 6, confirm_rounds: int = 8,
           group: Group | None = None, label: str = "object") -> Advice:
    """Measure the shortlisted (backend, mode) pairs on ``obj`` and say which to use.

    Collective under MPI (every rank calls it with its own copy of the object; ``readers`` is then
    the group's size - 1); otherwise this process is the writer and ``readers`` local worker
    processes read. ``budget`` is the call's time in seconds: the processes' start and the probes
    come out of it, the race, its confirmation and the counting pass get what is left (the last
    stage may overrun it by a stage). Raises UsageError for bad arguments or an object no backend can
    send; a pair that fails on the object is left out, with the reason, in ``Advice.candidates``.
    """
    if group is None and in_mpi_job():
        group = MPIGroup.world()
    if group is not None:
        readers = group.size - 1
        if scenario == "pingpong" and group.size == 2:
            readers = 1
    _check(scenario, 1 if scenario == "pingpong" else readers, budget)
    opts = RaceOptions(scenario=scenario, budget=budget, rounds=rounds, confirm_rounds=confirm_rounds)
    load_start = load_average()
    if group is not None:
        return _advise_on(group, obj, readers, opts, backends, shortlist_size, label, load_start)
    ranks = 2 if scenario == "pingpong" else readers + 1
    with LocalWorld(ranks) as world:
        return _advise_local(world, ranks, obj, readers, opts, backends, shortlist_size, label, load_start)


def _plan(group: Group | None, obj: Any, opts: RaceOptions, backends: Sequence[str] | None, size: int, label: str
          ) -> tuple[Features, ObjectPayload, list[BackendSpec], list[str], dict[str, str], list[str]]:
    f = features(obj)
    payload = ObjectPayload(obj, f.total_bytes, f.oob_bytes or f.total_bytes, label)
    ok, unavailable = pairs(group, opts.scenario, backends)
    names = [f"{s.name}/{s.mode}" for s in ok]
    raced, left = shortlist(f, names, size)
    by = {f"{s.name}/{s.mode}": s for s in ok}
    return f, payload, [by[p] for p in raced], left, unavailable, ranked(f, names)


def _left(opts: RaceOptions, t_start: float, probe_s: list[float]) -> RaceOptions:
    """The race's options with the budget that is left after the world's start and the probes, and
    the slowest probe's iteration (what a round of the race costs at least)."""
    return replace(opts, budget=max(MIN_RACE, opts.budget - (time.perf_counter() - t_start)),
                   iteration_s=max(probe_s, default=0.0))


def _probe_fits(opts: RaceOptions, t_start: float, walls: list[float], probed: dict[str, float]) -> bool:
    """Another probe fits in the budget: the time spent and the slowest probe so far (probing goes
    on until one pair has sent the object)."""
    return not probed or time.perf_counter() - t_start + max(walls) <= opts.budget


def _no_race(opts: RaceOptions, t_start: float, probed: dict[str, float], unprobed: list[str],
             walls: list[float]) -> str:
    """Rank 0: why the budget holds no race after the probes, "" when it does (or one pair is left).
    An object whose one iteration takes seconds would otherwise overrun the budget many times over."""
    spent = time.perf_counter() - t_start
    iteration = max(probed.values(), default=0.0)
    floor = race_floor(iteration, len(probed))
    if not probed or (not unprobed and (len(probed) < 2 or spent + floor <= opts.budget)):
        return ""
    needed = spent + max(walls, default=0.0) * len(unprobed) + race_floor(iteration, len(probed) + len(unprobed))
    return (f"the budget: {len(probed)} probe(s) took {spent:.0f} s of the {opts.budget:.0f} s (one iteration of the "
            f"object up to {iteration:.2f} s)" + (f", {len(unprobed)} shortlisted pair(s) not probed" if unprobed
                                                   else f", a race of them needs about {floor:.0f} s more")
            + f"; each pair is judged on its probe's one iteration, without an interval (--budget {needed:.0f} "
            f"races them)")


def _going(raced: list[BackendSpec], failed: dict[str, str]) -> list[BackendSpec]:
    """The shortlisted pairs whose probe passed; IpcbenchError when none did."""
    going = [s for s in raced if f"{s.name}/{s.mode}" not in failed]
    if not going:
        raise IpcbenchError("no candidate could send the object: "
                            + "; ".join(f"{p}: {why}" for p, why in failed.items()))
    return going


def _advise_local(world: LocalWorld, ranks: int, obj: Any, readers: int, opts: RaceOptions,
                  backends: Sequence[str] | None, size: int, label: str, load_start: float | None) -> Advice:
    t_start = time.perf_counter()
    pairs(None, opts.scenario, backends)  # every backend loaded first: their before_ranks hooks (mp-queue's
    world.run(_ready, ranks=ranks)  # queues) made as the world starts; a world that cannot start raises here
    f, payload, raced, left, unavailable, order = _plan(world.group(ranks), obj, opts, backends, size, label)
    failed: dict[str, str] = {}
    probed: dict[str, float] = {}
    walls: list[float] = []
    unprobed: list[str] = []
    for spec in raced:
        pair = f"{spec.name}/{spec.mode}"
        if not _probe_fits(opts, t_start, walls, probed):
            unprobed.append(pair)
            continue
        w0 = time.perf_counter()
        try:
            probed[pair] = world.run(_probe_rank, spec, payload, opts.scenario, ranks=ranks,
                                     timeout=PROBE_TIMEOUT + 30)[0]
        except Exception as exc:  # the world restarts itself after a failure
            failed[pair] = f"{type(exc).__name__}: {exc}"
        walls.append(time.perf_counter() - w0)
    going = _going([s for s in raced if f"{s.name}/{s.mode}" not in unprobed], failed)
    no_race = _no_race(opts, t_start, probed, unprobed, walls)
    if no_race:
        record = probes_only(probed, no_race, opts.tie)
    else:
        record = world.run(race, going, payload, _left(opts, t_start, list(probed.values())), ranks=ranks)[0]
    return _decision(record, f, opts, readers, order, raced, left, unavailable, failed,
                     environment("local", ranks, load_start, load_average()), unprobed)


def _advise_on(group: Group, obj: Any, readers: int, opts: RaceOptions, backends: Sequence[str] | None,
               size: int, label: str, load_start: float | None) -> Advice:
    t_start = time.perf_counter()
    planned = None
    if group.rank == 0:
        f, payload, raced, left, unavailable, order = _plan(group, obj, opts, backends, size, label)
        planned = (f, raced, left, unavailable, order)  # not the object: every rank has its own copy
    f, raced, left, unavailable, order = group.bcast(planned)
    payload = ObjectPayload(obj, f.total_bytes, f.oob_bytes or f.total_bytes, label)
    failed: dict[str, str] = {}
    probed: dict[str, float] = {}
    walls: list[float] = []
    unprobed: list[str] = []
    for spec in raced:
        pair = f"{spec.name}/{spec.mode}"
        if not group.bcast(_probe_fits(opts, t_start, walls, probed)):  # rank 0's clock decides for all
            unprobed.append(pair)
            continue
        w0 = time.perf_counter()
        reason, seconds = _probe_mpi(group, spec, payload, opts.scenario)
        if reason:
            failed[pair] = reason
        else:
            probed[pair] = seconds
        walls.append(time.perf_counter() - w0)
    going = _going([s for s in raced if f"{s.name}/{s.mode}" not in unprobed], failed)
    no_race = group.bcast(_no_race(opts, t_start, probed, unprobed, walls) if group.rank == 0 else None)
    if no_race:
        record = probes_only(probed, no_race, opts.tie) if group.rank == 0 else None
    else:
        record = race(group, going, payload, group.bcast(_left(opts, t_start, list(probed.values()))))
    advice = None
    if group.rank == 0:
        assert record is not None
        advice = _decision(record, f, opts, readers, order, raced, left, unavailable, failed,
                           environment("mpi", group.size, load_start, load_average()), unprobed)
    return group.bcast(advice)


def _decision(record: RaceRecord, f: Features, opts: RaceOptions, readers: int, order: list[str],
              raced: list[BackendSpec], left: list[str], unavailable: dict[str, str], failed: dict[str, str],
              env: dict[str, Any], unprobed: Sequence[str] = ()) -> Advice:
    candidates: list[Candidate] = []
    for st in sorted(record.standings, key=lambda s: s.median):
        if st.pair == record.pick:
            status = "pick"
        elif st.pair == record.runner_up:
            status = "runner-up"
        elif st.pair in record.tie:
            status = "tie"
        elif st.out_at_stage is not None:
            status = "eliminated"
        else:
            status = "raced"
        candidates.append(Candidate(st.pair, status, st.median, st.ratio, st.low, st.high, len(st.rounds),
                                    st.out_at_stage, st.counting, counts_of(st.counters)))
    candidates += [Candidate(p, "failed", reason=why) for p, why in failed.items()]
    candidates += [Candidate(p, "not-probed", reason="the budget was spent on the probes") for p in unprobed]
    candidates += [Candidate(p, "not-shortlisted") for p in left]
    candidates += [Candidate(p, "unavailable", reason=why) for p, why in unavailable.items()]
    notes = []
    if record.swapped:
        notes.append(f"the confirmation reversed the race: {record.pick} beat {record.runner_up} beyond the tie")
    return Advice(
        pick=record.pick, runner_up=record.runner_up, ratio=record.confirm_ratio, low=record.confirm_low,
        high=record.confirm_high, confidence=opts.confidence, tie=record.tie, tie_threshold=opts.tie,
        measured=True, scenario=opts.scenario, metric=opts.metric, readers=readers, features=f,
        candidates=candidates, environment=env,
        prior={"source": source(), "bucket": bucket(f), "order": order,
               "shortlist": [f"{s.name}/{s.mode}" for s in raced]},
        race={"stages": record.stages, "stopped": record.stopped, "rounds": record.race_rounds,
              "asked_rounds": opts.rounds, "stage_rounds": record.stage_rounds, "confirm_rounds": record.confirm_rounds,
              "iteration_s": record.iteration_s, "elapsed_s": record.elapsed, "swapped": record.swapped,
              "leader": record.leader, "budget_s": opts.budget, "race_budget_s": record.budget,
              "stage_s": record.stage_s, "probes_only": record.probes_only,
              "confirm_medians_s": list(record.confirm_medians) if record.confirm_medians else None},
        notes=notes,
    )


def advise_described(text: str, readers: int = 1, scenario: str = "broadcast",
                     backends: Sequence[str] | None = None) -> Advice:
    """The prior's pick for a described object (advice/describe.py), without measuring anything."""
    from .describe import described

    _check(scenario, readers, 60.0)
    t0 = time.perf_counter()
    obj = described(text)
    f = features(obj)
    ok, unavailable = pairs(None, scenario, backends)
    # outside mpiexec: the pairs a local world can run (the MPI ones need a launcher)
    for s in list(ok):
        if s.cls.needs_mpi:
            ok.remove(s)
            unavailable[f"{s.name}/{s.mode}"] = "needs MPI: run advise under mpiexec"
    names = [f"{s.name}/{s.mode}" for s in ok]
    if not names:
        raise UsageError("no backend can run here for this scenario")
    order = ranked(f, names)
    raced, left = shortlist(f, names)
    candidates = [Candidate(p, "pick" if i == 0 else "prior") for i, p in enumerate(order)]
    candidates += [Candidate(p, "unavailable", reason=why) for p, why in unavailable.items()]
    return Advice(
        pick=order[0], runner_up=order[1] if len(order) > 1 else None, ratio=None, low=None, high=None,
        confidence=0.95, tie=[], tie_threshold=0.05, measured=False, scenario=scenario,
        metric=METRICS[scenario], readers=readers, features=f, candidates=candidates,
        environment=environment("none", 0, load_average(), load_average()),
        prior={"source": source(), "bucket": bucket(f), "order": order, "shortlist": raced,
               "described": text, "seconds": time.perf_counter() - t0},
    )
