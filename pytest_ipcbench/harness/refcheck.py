"""Every backend against its reference: what the mechanism costs and what our wrapper adds.

One cohesive thing: the reference checks of ``ipcbench selfcheck``, their cases, rows and runs.

:func:`compare_on` times a backend and its reference (:mod:`.references`) interleaved (rules 16,
17): ``pingpong`` on 2 ranks (latency = round trip / 2) and ``stream`` (time per delivered
message, channels only) on ``ranks``, and keeps the ratio of medians with its bootstrap interval.
The target (rule 17): latency within ``1.25 x reference + 5 us``, stream at least 0.8x the
reference's rate. MPI references receive into a reused buffer (as OSU does); their ``-fresh``
variants allocate per message (``alloc`` shows the cost) and are the stream's reference, whose
window keeps every message alive. :func:`run_refchecks` runs the MPI backends under
``mpiexec -n 2`` (``--worker``), the others in two local processes.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from ..backends.base import MODES, Backend, BackendSpec, BackendUnavailable, backend_names, get_backend
from ..backends.references import reference_of
from ..core import launcher
from ..core.errors import UsageError
from ..core.group import Group, MPIGroup, in_mpi_job
from ..core.local import LocalWorld
from ..core.units import format_time, size_label
from ..results.stats import ratio_interval
from .floor import FLOOR_BACKEND, FLOOR_SCENARIOS, measure_floor
from .measure import BenchSettings, BufferPayload, bench_interleaved
from .physics import FAST_END_PERCENTILE, PHYSICS_SHARE, SMALL_BYTES, crossing_floor

SIZES = (1, 1024, 64 * 1024, 10**6, 16 * 2**20)
#: the counters set beside the reference's (per message, the writer and the costliest reader)
REF_COUNTERS = ("syscalls.total", "syscalls.data", "syscalls.sync", "syscalls.waiting", "io.rchar", "io.wchar",
                "faults.minor", "pickle.dumps", "pickle.loads", "alloc.bytes")
SCENARIOS = ("pingpong", "stream", "broadcast")
TARGET_FACTOR = 1.25  # at most this many times the reference's time ...
TARGET_SLACK = 5e-6  # ... plus this (ping-pong latency only)
DEFAULT_TIME_BUDGET = 0.3
DEFAULT_ROUNDS = 10
_MARK = "@@ipcbench-refcheck "


@dataclass
class RefRow:
    """One case: the backend's and its reference's median seconds per message, and their ratio."""

    backend: str
    mode: str
    scenario: str
    size: int
    reference: str
    ours: float  # median seconds (latency for pingpong, per delivered message for stream)
    ref: float = math.nan  # NaN: no reference (or the case failed)
    ratio: float = math.nan  # median(ours) / median(ref)
    low: float = math.nan
    high: float = math.nan
    wait: str = ""
    fresh: float | None = None  # the -fresh reference variant's median, if timed
    samples: int = 0
    ranks: int = 2
    extra: dict[str, Any] = field(default_factory=dict)
    #: per message, {"ours"|"ref": {role: {counter: value}}} (REF_COUNTERS; harness/count.py): the
    #: overhead in counts; empty when a side was not counted
    counts: dict[str, Any] = field(default_factory=dict)
    fast_end: float = float("nan")  # the 5th percentile of ours: the bound of the physics check
    below_physics: str = ""  # broadcast: why its completion reads faster than one crossing (physics.py)

    @property
    def target(self) -> float:
        """The longest time per message that meets the target (NaN without a reference)."""
        return TARGET_FACTOR * self.ref + (TARGET_SLACK if self.scenario == "pingpong" else 0.0)

    @property
    def has_reference(self) -> bool:
        return bool(self.reference)

    @property
    def ok(self) -> bool:
        """Within the target; a backend without a reference has no target to miss; a broadcast
        has physics to respect."""
        if self.scenario == "broadcast":
            return not self.below_physics
        return not self.has_reference or self.ours <= self.target

    @property
    def is_floor(self) -> bool:
        """The harness's own floor (the null channel, harness/floor.py), not a backend."""
        return bool(self.extra.get("floor"))

    @property
    def verdict(self) -> str:
        if self.is_floor:
            return "floor"
        if self.scenario == "broadcast":  # checked against physics, not a reference
            return "BELOW PHYSICS" if self.below_physics else "physics ok"
        return "no ref" if not self.has_reference else "ok" if self.ok else "OUTSIDE"

    @property
    def overhead(self) -> float:
        """Seconds per message our wrapper adds to the mechanism (negative: faster)."""
        return self.ours - self.ref

    @property
    def alloc(self) -> float | None:
        """fresh / reused receive buffer: what allocating a receive array per message costs."""
        return self.fresh / self.ref if self.fresh and self.ref > 0 else None

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "target": self.target, "ok": self.ok, "overhead": self.overhead, "alloc": self.alloc}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> RefRow:
        return cls(**{k: d[k] for k in cls.__dataclass_fields__ if k in d})


def _fresh_variant(ref: str) -> str | None:
    try:
        get_backend(ref + "-fresh")
    except (ValueError, BackendUnavailable):  # no such variant
        return None
    return ref + "-fresh"


HOW_TO_ADD_A_REFERENCE = ("add one: a Backend subclass with internal = True doing the plainest use of the "
                          "same mechanism, registered next to the backend, and named in the backend's "
                          "reference = '...' (docs/extending.md, 'A reference for ipcbench selfcheck')")


def missing_reference(name: str) -> str | None:
    """Why backend ``name`` cannot be timed against a reference (``None`` when it can): what is
    missing and how to add it. Its own figures are still measured, alone."""
    try:
        cls = get_backend(name)
    except BackendUnavailable:
        return None  # cannot run here at all: reported as such
    if not cls.reference:
        return f"{name} names no reference (its class attribute reference is not set): {HOW_TO_ADD_A_REFERENCE}"
    try:
        get_backend(cls.reference)
    except ValueError:
        return f"{name} names the reference {cls.reference!r}, which is not registered: {HOW_TO_ADD_A_REFERENCE}"
    except BackendUnavailable:
        return None
    return None


def stream_modes(cls: type[Backend], modes: Sequence[str]) -> list[str]:
    """The modes the stream scenario checks ``cls`` in: a backend whose native values are views that
    the next write overwrites (``native_views_until_next_write``, mpi-shm-win) cannot keep the
    scenario's window of values, so its native stream case is timed in bytes mode instead (once)."""
    if not cls.native_views_until_next_write:
        return list(modes)
    return list(dict.fromkeys("bytes" if m == "native" else m for m in modes))


def stream_notes(backends: Sequence[str], modes: Sequence[str], scenarios: Sequence[str]) -> list[str]:
    """What :func:`stream_modes` changed, in words for the report (empty when nothing)."""
    if "stream" not in scenarios or "native" not in modes:
        return []
    return [f"{name}: stream timed in bytes mode (its native values are views that the next write overwrites, "
            "so the scenario's window of them cannot be kept)"
            for name, cls in _loaded(backends) if cls.delivery == "channel" and cls.native_views_until_next_write]


def _loaded(backends: Sequence[str]) -> list[tuple[str, type[Backend]]]:
    """(name, class) of the backends that load here (the others are reported where they run)."""
    out = []
    for name in backends:
        try:
            out.append((name, get_backend(name)))
        except (ValueError, BackendUnavailable):
            continue
    return out


def beyond_largest(cls: Any, size: int) -> bool:
    """Is ``size`` above the largest message backend class ``cls`` takes (``max_message_bytes``)?"""
    largest = getattr(cls, "max_message_bytes", None)
    return largest is not None and size > largest


def skipped_cases(backends: Sequence[str], sizes: Sequence[int]) -> list[str]:
    """One line per backend whose declared largest message (``max_message_bytes``) leaves sizes out."""
    lines = []
    for name, cls in _loaded(backends):
        beyond, largest = [s for s in sizes if beyond_largest(cls, s)], cls.max_message_bytes
        if beyond and largest is not None:
            lines.append(f"skipped: {name} at {', '.join(size_label(s) for s in beyond)}: above the largest message it "
                         f"takes ({size_label(largest)}, its max_message_bytes)")
    return lines


def compare_on(
    group: Group,
    backends: Sequence[str],
    modes: Sequence[str] = ("native",),
    sizes: Sequence[int] = SIZES,
    scenarios: Sequence[str] = SCENARIOS,
    time_budget: float = DEFAULT_TIME_BUDGET,
    rounds: int = DEFAULT_ROUNDS,
    wait: str | None = None,
    say: Any = None,
    floor: bool = False,
) -> list[RefRow]:
    """Collective on a 2-rank group: every case, backend against reference; rows on rank 0.

    ``floor``: first the harness's own floor per scenario (the null channel, harness/floor.py), as
    rows of backend ``null`` marked ``extra["floor"]``."""
    settings = BenchSettings(time_budget=time_budget)
    rows: list[RefRow] = []

    def add(row: RefRow) -> None:
        rows.append(row)
        if say is not None:
            say(row)

    for scenario in scenarios if floor else ():
        if scenario not in FLOOR_SCENARIOS:
            continue
        got = measure_floor(group, scenarios=(scenario,))
        if got is not None and scenario in got["seconds"]:
            add(RefRow(FLOOR_BACKEND, "native", scenario, 1, "", got["seconds"][scenario], ranks=got["ranks"],
                       extra={"floor": True, "group": got["group"]}))
    for name in backends:
        cls = get_backend(name)
        ref = "" if missing_reference(name) else reference_of(name)  # none: the backend's figures alone
        fresh = _fresh_variant(ref) if ref else None
        for scenario in scenarios:
            if scenario in ("stream", "broadcast") and cls.delivery != "channel":
                continue
            for mode in stream_modes(cls, modes) if scenario == "stream" else modes:
                for size in sizes:
                    if scenario == "broadcast" and size > SMALL_BYTES:
                        continue  # the physics check: 1 B - 1 KB, against the same run's ping-pong
                    if beyond_largest(cls, size):
                        continue  # said once by skipped_cases(), not timed
                    specs = [BackendSpec(name, mode, wait=wait)]
                    reference = ref if scenario != "broadcast" else ""
                    if scenario == "stream" and fresh and mode == "native":
                        reference = fresh  # a window of kept messages needs a buffer each
                    if reference:
                        specs.append(BackendSpec(reference, mode, wait=wait))
                    if scenario == "pingpong" and fresh and mode == "native":
                        specs.append(BackendSpec(fresh, mode, wait=wait))
                    failure = None
                    try:
                        results = bench_interleaved(group, specs, BufferPayload(size), scenario, settings, rounds)
                    except Exception as exc:
                        failure = f"{type(exc).__name__}: {exc}"
                    # every rank takes part, so the ranks agree before the next case (and a failure on
                    # one rank is named on rank 0)
                    failures = [f for f in group.allgather(failure) if f]
                    if group.rank != 0:
                        continue
                    if failures:
                        add(RefRow(name, mode, scenario, size, reference, math.nan,
                                   extra={"error": failures[0][:2000]}))
                        continue
                    ours = results[0]
                    assert ours is not None
                    metric = ours.primary
                    row = RefRow(name, mode, scenario, size, reference, float(np.median(ours.samples[metric])),
                                 wait=ours.wait, samples=len(ours.samples[metric]), ranks=ours.ranks,
                                 fast_end=float(np.percentile(ours.samples[metric], FAST_END_PERCENTILE)))
                    theirs = results[1] if reference else None
                    if theirs is not None:
                        iv = ratio_interval(ours.samples[metric], theirs.samples[metric])
                        row.ours, row.ref, row.ratio, row.low, row.high = (iv.median_a, iv.median_b, iv.ratio,
                                                                           iv.low, iv.high)
                        if ours.counters is not None and theirs.counters is not None:
                            row.counts = {"ours": ours.counters.per_role(REF_COUNTERS),
                                          "ref": theirs.counters.per_role(REF_COUNTERS)}
                        if len(results) > 2 and results[2] is not None:
                            fresh_samples = sorted(results[2].samples[metric])
                            row.fresh = float(fresh_samples[len(fresh_samples) // 2])
                    add(row)
    return rows


# ----------------------------------------------------------------------------------- running


def _split(backends: Sequence[str]) -> tuple[list[str], list[str]]:
    """(backends that need MPI, the others): the first run under mpiexec, the others locally."""
    mpi: list[str] = []
    local: list[str] = []
    for name in backends:
        try:
            needs_mpi = get_backend(name).needs_mpi
        except BackendUnavailable:  # cannot load here: the MPI job says why, as for any unusable backend
            needs_mpi = True
        (mpi if needs_mpi else local).append(name)
    return mpi, local


def _local_rank0(group: Group, kwargs: dict[str, Any]) -> list[RefRow]:
    return compare_on(group, **kwargs)


def run_refchecks(
    backends: Sequence[str] | None = None,
    modes: Sequence[str] = ("native",),
    sizes: Sequence[int] = SIZES,
    scenarios: Sequence[str] = SCENARIOS,
    time_budget: float = DEFAULT_TIME_BUDGET,
    rounds: int = DEFAULT_ROUNDS,
    wait: str | None = None,
    mpiexec: str | None = None,
    timeout: float = 1800.0,
    ranks: int = 2,
) -> tuple[list[RefRow], list[str]]:
    """Every backend against its reference; (rows, problems). Rank 0's rows under MPI.

    ``ranks``: the stream scenario's ranks (1 writer, ranks - 1 readers); ping-pong always uses 2.
    """
    if ranks < 2:
        raise UsageError(f"the reference checks need at least 2 ranks, got {ranks}")
    backends = list(backend_names()) if backends is None else list(backends)
    # a backend without a reference is timed alone; missing_reference() says what to add
    for mode in modes:
        if mode not in MODES:
            raise UsageError(f"unknown mode {mode!r}; choose from {', '.join(MODES)}")
    for s in scenarios:
        if s not in SCENARIOS:
            raise UsageError(f"unknown scenario {s!r} for the reference checks; choose from {', '.join(SCENARIOS)}")
    kwargs: dict[str, Any] = dict(modes=list(modes), sizes=list(sizes), scenarios=list(scenarios),
                                  time_budget=time_budget, rounds=rounds, wait=wait, floor=True)
    mpi, local = _split(backends)
    rows: list[RefRow] = []
    problems: list[str] = []
    if in_mpi_job():
        world = MPIGroup.world()  # pingpong uses its first 2 ranks, stream all of them
        usable = [b for b in backends if get_backend(b).unavailable(world) is None]
        problems += [f"{b}: {get_backend(b).unavailable(world)}" for b in backends if b not in usable]
        rows.extend(compare_on(world, usable, **kwargs))
        return _checked(rows, problems)
    if mpi:
        spec = json.dumps({"backends": mpi, **kwargs})
        try:
            job = launcher.run(ranks, "pytest_ipcbench.harness.refcheck", ["--worker", spec], mark=_MARK,
                               timeout=timeout, mpiexec=mpiexec)
        except launcher.MPIExecNotFound:
            problems.append(f"{launcher.NO_MPIEXEC}: {', '.join(mpi)} not checked")
        else:
            if job.timed_out:
                problems.append(f"the MPI reference checks did not finish within {timeout:g} s")
            else:
                rows.extend(RefRow.from_dict(d) for d in job.records)
                if job.returncode:
                    problems.append(f"the MPI reference checks failed (exit {job.returncode}): "
                                    f"{job.stderr.strip()[-2000:]}")
    if local:
        try:
            with LocalWorld(ranks) as local_world:
                for scenario in scenarios:  # a local group is exactly the ranks a scenario runs on
                    n = 2 if scenario == "pingpong" else ranks
                    args = {**kwargs, "backends": local, "scenarios": [scenario]}
                    rows.extend(local_world.run(_local_rank0, args, ranks=n)[0])
        except Exception as exc:
            problems.append(f"the local reference checks failed: {type(exc).__name__}: {exc}")
    order = {name: i for i, name in enumerate(backends)}
    rows.sort(key=lambda r: (SCENARIOS.index(r.scenario), -1 if r.is_floor else order.get(r.backend, 99),
                             MODES.index(r.mode), r.size))
    return _checked(rows, problems)


def _checked(rows: list[RefRow], problems: list[str]) -> tuple[list[RefRow], list[str]]:
    """(the rows that ran, physics-checked; the problems with the failed cases added)."""
    problems += [f"{r.backend} {r.mode} {r.scenario} {size_label(r.size)} failed (the other cases still ran): "
                 f"{r.extra['error']}" for r in rows if r.extra.get("error")]
    rows = [r for r in rows if not r.extra.get("error")]
    check_physics(rows)
    return rows, problems


def check_physics(rows: Sequence[RefRow]) -> list[RefRow]:
    """Mark the broadcast rows that complete faster than PHYSICS_SHARE of the same backend's fastest
    ping-pong crossing (physics.crossing_floor): a harness error. Returns the marked rows."""
    floor = crossing_floor((r.backend, r.size, r.fast_end, r) for r in rows
                           if r.scenario == "pingpong" and math.isfinite(r.fast_end))
    marked = []
    for r in rows:
        if r.scenario != "broadcast" or r.backend not in floor:
            continue
        fast_end, pong = floor[r.backend]
        if r.ours < PHYSICS_SHARE * fast_end:
            r.below_physics = (f"harness error: broadcast {r.backend} {r.mode} {size_label(r.size)} to {r.ranks - 1} "
                               f"reader(s) completes in {format_time(r.ours)} (median), below {PHYSICS_SHARE:g}x the "
                               f"fastest of its one-way ping-pong crossings ({format_time(fast_end)} at the 5th "
                               f"percentile, {pong.mode} {size_label(pong.size)})")
            marked.append(r)
    return marked


def main(argv: Sequence[str] | None = None) -> int:
    """The MPI part, under ``mpiexec -n 2`` (launched by :func:`run_refchecks`)."""
    parser = argparse.ArgumentParser(prog="python -m pytest_ipcbench.harness.refcheck")
    parser.add_argument("--worker", action="store_true", help="required: run the MPI part on every rank")
    parser.add_argument("spec", help="JSON: the keyword arguments of compare_on")
    args = parser.parse_args(argv)
    if not args.worker:
        parser.error("this module is the MPI part of `ipcbench selfcheck`: run that instead")
    world = MPIGroup.world()  # pingpong uses its first 2 ranks, stream all of them
    compare_on(world, say=lambda row: launcher.emit(_MARK, row.as_dict()), **json.loads(args.spec))
    world.barrier()
    return 0


if __name__ == "__main__":
    sys.exit(main())


__all__ = ["REF_COUNTERS", "RefRow", "SIZES", "beyond_largest", "skipped_cases", "missing_reference", "stream_modes",
           "stream_notes", "TARGET_FACTOR", "TARGET_SLACK", "compare_on", "run_refchecks"]
