"""The scenarios the harness times: broadcast, ping-pong, stream, granularity and idle gap.

One cohesive thing: the scenario classes, each a variant of one life cycle (:class:`_Case`).

Each is a class with ``open`` (backends, payloads), ``iteration(i, timed, verify)`` and
``result`` (one :class:`~..results.results.Result` on rank 0); :mod:`.measure` drives them.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field, replace
from typing import Any

import numpy as np

from ..backends.base import Backend, BackendSpec
from ..core.counters import Counters
from ..core.envinfo import cores as _cores
from ..core.errors import IpcbenchError
from ..core.group import Group
from ..core.units import duration_label
from ..results.results import Result, Verified
from .clock import SHARED, rank_clocks
from .inject import DeliveryStretch, slowdown_for, stretcher
from .payload import Payload, payload_bytes, steady_place, touch
from .plan import BenchSettings, Plan, static_plan
from .transfer import describe_difference

SCENARIOS = ("broadcast", "pingpong", "stream", "granularity", "idle")

perf_counter = time.perf_counter
_CORES = _cores()


class VerificationError(IpcbenchError, AssertionError):
    """A reader received something else than what was written."""


# ---------------------------------------------------------------------------------- helpers


def delivery_times(started: list[float], arrived: dict[int, list[float]], offsets: Sequence[float]) -> list[float]:
    """Per iteration: from the writer's start to the last reader's arrival, on the writer's clock.

    ``started`` holds the writer's timestamps, ``arrived`` each reader's (by rank) and ``offsets``
    each rank's clock offset to the writer's (``t_writer = t_rank - offset``; see clock.py).
    """
    at = np.array([np.asarray(stamps, dtype=float) - offsets[rank] for rank, stamps in arrived.items()])
    return [float(x) for x in at.max(axis=0) - np.asarray(started, dtype=float)]


def quiet_barrier(group: Group, spin: float = 50e-6, max_sleep: float = 1e-3, fraction: float = 0.05) -> None:
    """A barrier that does not spin: MPI waits in ``Ibarrier`` + ``Test`` with sleeps.

    The sleeps grow with the time waited (at most ``fraction`` of it, at most ``max_sleep``), so a
    rank that waits long for a slow writer leaves the cores to the ranks that work (ranks may
    outnumber cores), yet wakes within 5% of its wait. A plain ``Barrier`` follows, so the
    ranks leave together. A local group's barrier blocks in a pipe and never spins.
    """
    comm = getattr(group, "comm", None)
    if not group.is_mpi or comm is None:
        group.barrier()
        return
    req = comm.Ibarrier()
    t0 = perf_counter()
    while not req.Test():
        waited = perf_counter() - t0
        if waited > spin:
            time.sleep(min(max_sleep, fraction * waited))
    comm.Barrier()


@dataclass
class _Record:
    """One rank's samples and verification record for one case."""

    rank: int
    samples: dict[str, list[float]] = field(default_factory=dict)
    checked: int = 0
    failures: list[str] = field(default_factory=list)
    verify_times: list[float] = field(default_factory=list)
    warm_times: list[float] = field(default_factory=list)

    def add(self, metric: str, value: float) -> None:
        self.samples.setdefault(metric, []).append(value)

    def check(self, ok: bool, what: str) -> None:
        self.checked += 1
        if not ok:
            self.failures.append(what if len(self.failures) < 5 else "")  # the first 5 said, the rest counted


# --------------------------------------------------------------------------------- scenarios


class _Case:
    """One case of one scenario on one rank; subclasses implement one iteration."""

    scenario = ""
    primary = "completion"
    live_backend: Backend  # the opened backend (open())

    def __init__(self, group: Group, spec: BackendSpec, payload: Payload, settings: BenchSettings) -> None:
        self.group = group
        self.spec = spec
        self.payload = payload
        self.settings = settings
        self.nbytes = payload_bytes(payload)
        # how a reader reads what it got: the payload's own way if it has one (advise's objects:
        # every buffer at any depth), else :func:`touch`
        self.touch = getattr(payload, "touch", None) or touch
        self.record = _Record(group.rank)
        self.live: list[Any] = []
        self.extra: dict[str, Any] = {}
        self.backend_delivery, self.readers = "", 0  # set by open()
        # None unless $IPCBENCH_INJECT slows this backend on purpose (harness/inject.py): called
        # where a timed operation ends, with the seconds it took
        self.stretch = stretcher(spec.name, payload.size)  # the size the case is named by
        # the counting pass's Counters, or why there are none (measure._finish sets it before
        # result(): the Result is built once, counters included)
        self.counted: Counters | str | None = None

    # life cycle (collective)
    def open(self) -> None:
        raise NotImplementedError

    def close(self) -> None:
        while self.live:
            self.live.pop().close()

    def _open(self, spec: BackendSpec) -> Any:
        backend = spec.open(self.group)
        backend.setup()
        self.live.append(backend)
        self.wait = backend.wait  # how its readers waited (docs/method.md rule 18)
        return backend

    def _payloads(self) -> list[Any]:
        """Two payloads (seeds 1 and 2) that alternate, so a stale value fails verification; or
        one sent every time (``alternate=False``: what mpi4py.bench and OSU do). Each large array
        sits at the same place in its page in every run (:func:`~.payload.steady_place`)."""
        first = steady_place(self.payload.build(seed=1))
        return [first, steady_place(self.payload.build(seed=2)) if self.settings.alternate else first]

    @property
    def per_iteration_bytes(self) -> int:
        return self.nbytes

    def static_plan(self) -> Plan:
        return static_plan(self.nbytes, self.settings, self.per_iteration_bytes)

    def iteration(self, i: int, timed: bool, verify: bool) -> None:
        raise NotImplementedError

    def block(self, start: int, count: int, timed: bool, verify_at: Callable[[int], bool]) -> None:
        """Iterations ``start .. start + count - 1``."""
        for i in range(start, start + count):
            self.iteration(i, timed, verify_at(i))

    def result(self, records: list[_Record], plan: Plan) -> Result:
        raise NotImplementedError

    def variant(self) -> str:
        """A further case parameter that is not a size (``Result.variant``); none by default."""
        return ""

    def _result(self, samples: dict[str, list[float]], plan: Plan, records: list[_Record], **extra: Any) -> Result:
        checked = sum(r.checked for r in records)
        failed = sum(len(r.failures) for r in records)
        counted = self.counted
        if isinstance(counted, str):
            extra["counting"] = counted  # why this case has no counters
        return Result(
            scenario=self.scenario,
            backend=self.spec.name,
            mode=self.spec.mode,
            payload=self.payload.kind,
            size=int(self.payload.size),
            ranks=self.group.size,
            samples={k: [float(x) for x in v] for k, v in samples.items()},
            nbytes=self.nbytes,
            primary=self.primary,
            extra={**self.extra, **extra},
            wait=getattr(self, "wait", ""),
            verified=Verified(checked, failed),
            delivery=self.backend_delivery,
            readers=self.readers,
            group="mpi" if self.group.is_mpi else "local",
            oversubscribed=self.group.size > _CORES,
            nodes=self.group.nodes,
            plan=asdict(plan),
            variant=self.variant(),
            counters=counted if isinstance(counted, Counters) else None,
        )


class _Broadcast(_Case):
    """1 writer (the spec's root), N readers; write, (barrier for a store), read, touch, verify."""

    scenario = "broadcast"

    def open(self) -> None:
        self.live_backend = self._open(self.spec)
        self.backend_delivery = self.live_backend.delivery
        self.is_writer = self.group.rank == self.live_backend.root
        self.objs = self._payloads()  # writer: sent; readers: expected
        self.live_backend.prepare(self.objs)  # iteration i sends objs[i % 2]
        self.readers = len(self.live_backend.readers)
        self.extra.update(root=self.live_backend.root, touched=self.settings.touch)
        if self.backend_delivery != "store":
            # a channel's completion compares the writer's and the readers' timestamps
            self.clocks = rank_clocks(self.group, self.live_backend.root, self.settings.clock == "offset")
            self.extra.update(clock=self.clocks.method, clock_error_s=self.clocks.error)
        # slowed on purpose, on one clock: the last reader stretches from the writer's start (inject.py)
        self.delivery = None
        slowdown = slowdown_for(self.spec.name, self.payload.size)
        if slowdown is not None and self.backend_delivery != "store" and self.clocks.method == SHARED:
            self.delivery = DeliveryStretch.open(self.group, self.live_backend.root,
                                                 list(self.live_backend.readers), slowdown.factor)
            if self.delivery is not None:
                self.live.append(self.delivery)  # closed with the backend

    def iteration(self, i: int, timed: bool, verify: bool) -> None:
        backend, rec, obj = self.live_backend, self.record, self.objs[i % 2]
        store = self.backend_delivery == "store"
        quiet = self.settings.quiet_waits
        wait = quiet_barrier if quiet else (lambda g: g.barrier())
        wait(self.group)
        t0 = perf_counter()
        if self.is_writer:
            if self.delivery is not None:
                self.delivery.started(t0)
            backend.write(obj)
            if store and self.stretch is not None:
                self.stretch(perf_counter() - t0)  # a store's completion adds the write (inject.py)
            t1 = perf_counter()
            if store:
                wait(self.group)
            if timed:
                rec.add("write", t1 - t0)
                rec.add("write_started_at", t0)
            else:
                rec.warm_times.append(t1 - t0)
            return
        if store:
            wait(self.group)
        t1 = perf_counter()
        got = backend.read()
        if self.delivery is not None:
            self.delivery.arrived()
        elif self.stretch is not None:
            self.stretch(perf_counter() - (t1 if store else t0))
        t2 = perf_counter()
        if self.settings.touch:
            self.touch(got)
        t3 = perf_counter()
        if timed:
            rec.add("read", t2 - t1)
            rec.add("completion", t2 - t0)
            if not store:
                rec.add("usable_at", t2)
            if self.settings.touch:
                rec.add("touched", t3 - t1)
                rec.add("completion_touched", t3 - t0)
                if not store:
                    rec.add("touched_at", t3)
        else:
            rec.warm_times.append(t2 - t0)
        if verify:
            v0 = perf_counter()
            ok = self.payload.equal(got, obj)
            rec.verify_times.append(perf_counter() - v0)
            rec.check(ok, "" if ok else f"iteration {i}: {describe_difference(got, obj)}")
        del got

    def result(self, records: list[_Record], plan: Plan) -> Result:
        root = self.live_backend.root
        writer = records[root]
        readers = [r for r in records if r.rank != root]
        samples: dict[str, list[float]] = {"write": writer.samples.get("write", [])}
        for metric, out in (("read", "read"), ("touched", "touched")):
            if all(metric in r.samples for r in readers) and readers:
                m = np.array([r.samples[metric] for r in readers])
                samples[f"{out}_avg"] = list(m.mean(axis=0))
                samples[f"{out}_min"] = list(m.min(axis=0))
                samples[f"{out}_max"] = list(m.max(axis=0))
        # What the readers saw from the common barrier (each reader's own clock, started when it
        # left the barrier; the max over readers). Not the completion: a reader that leaves the
        # barrier late finds the message waiting and times a local receive only.
        if readers and all(r.samples.get("completion") for r in readers):
            samples["completion_synced"] = list(np.array([r.samples["completion"] for r in readers]).max(axis=0))
        if self.backend_delivery == "store" and samples["write"]:
            # A store is written, then read: completion = write + slowest read, per iteration
            # (durations on two ranks, added; the harness's own barrier between write and read,
            # which completion_synced includes, is left out).
            write = np.array(samples["write"])
            samples["completion"] = list(write + np.array(samples["read_max"]))
            if "touched_max" in samples:
                samples["completion_touched"] = list(write + np.array(samples["touched_max"]))
        elif readers:
            # A channel delivers: completion = from the writer's start of the write to the moment
            # the last reader holds a usable (completion_touched: fully read) object, timestamps
            # on the writer's clock (harness/clock.py).
            start = writer.samples.get("write_started_at", [])
            for metric, stamp in (("completion", "usable_at"), ("completion_touched", "touched_at")):
                if start and all(len(r.samples.get(stamp, ())) == len(start) for r in readers):
                    samples[metric] = delivery_times(start, {r.rank: r.samples[stamp] for r in readers},
                                                     self.clocks.offsets)
        per_reader = {str(r.rank): float(np.median(r.samples["read"])) for r in readers if r.samples.get("read")}
        return self._result(samples, plan, records, read_median_by_rank=per_reader)


class _PingPong(_Case):
    """Two ranks; rank 0 writes to rank 1, which answers with what it got (or after ``work``)."""

    scenario = "pingpong"
    primary = "latency"

    def open(self) -> None:
        if self.group.size != 2:
            raise ValueError(f"{self.scenario} needs a group of 2 ranks, got {self.group.size}")
        self.fwd = self._open(replace(self.spec, root=0))
        self.back = self._open(replace(self.spec, root=1))
        self.objs = self._payloads() if self.group.rank == 0 else []
        self.backend_delivery, self.readers = self.fwd.delivery, 1
        self.extra.update(work_s=self.settings.work)
        if self.settings.work > 0:
            # rank 0 cannot tell the mechanism's share of a round trip from the echo's work (a
            # sleep that overshoots): stretching the whole round trip would overstate a slowdown
            self.stretch = None

    def iteration(self, i: int, timed: bool, verify: bool) -> None:
        self.block(i, 1, timed, lambda _: verify)

    def block(self, start: int, count: int, timed: bool, verify_at: Callable[[int], bool]) -> None:
        # A tight loop (names bound once): rank 1's turn-around is inside rank 0's round trip.
        rec = self.record
        if self.group.rank == 0:
            write, read, objs, equal = self.fwd.write, self.back.read, self.objs, self.payload.equal
            out = rec.samples.setdefault("roundtrip", []) if timed else rec.warm_times
            clock, stretch = perf_counter, self.stretch
            for i in range(start, start + count):
                obj = objs[i & 1]
                t0 = clock()
                write(obj)
                got = read()
                if stretch is not None:  # (never with work: see open)
                    stretch(clock() - t0)
                t1 = clock()
                out.append(t1 - t0)
                if verify_at(i):
                    v0 = perf_counter()
                    ok = equal(got, obj)
                    rec.verify_times.append(perf_counter() - v0)
                    rec.check(ok, "" if ok else
                              f"iteration {i}: the echo differs from what was sent: {describe_difference(got, obj)}")
                del got
            return
        read, write, work = self.fwd.read, self.back.write, self.settings.work
        if work <= 0:
            for _ in range(count):
                write(read())
            return
        works = rec.samples.setdefault("work", []) if timed else []
        for _ in range(count):
            got = read()
            w0 = perf_counter()
            time.sleep(work)
            works.append(perf_counter() - w0)
            write(got)
            del got

    def result(self, records: list[_Record], plan: Plan) -> Result:
        rtt = np.array(records[0].samples.get("roundtrip", []))
        samples = {"roundtrip": list(rtt), "latency": list(rtt / 2)}
        return self._result(samples, plan, records)


class _Granularity(_PingPong):
    scenario = "granularity"
    primary = "overhead"

    def result(self, records: list[_Record], plan: Plan) -> Result:
        rtt = np.array(records[0].samples.get("roundtrip", []))
        work = np.array(records[1].samples.get("work", [0.0] * len(rtt)))
        samples = {"roundtrip": list(rtt), "work": list(work), "overhead": list(rtt - work)}
        med = float(np.median(rtt)) if rtt.size else float("nan")
        eff = float(np.median(work)) / med if rtt.size and med > 0 else float("nan")
        return self._result(samples, plan, records, efficiency_work=eff, tasks_per_s=1 / med if med > 0 else None)

    def variant(self) -> str:
        return f"work={duration_label(self.settings.work)}"


class _IdleGap(_PingPong):
    """Latency after an idle gap: both ranks idle ``settings.gap`` seconds (the echo side waiting in
    ``read()``), then one timed round trip. A request/response service sends its message after a
    idle gap: a wait that sleeps (a futex, ZeroMQ's poller, the backoff strategy) wakes slowly,
    which back-to-back ping-pong never shows."""

    scenario = "idle"
    primary = "latency"

    def open(self) -> None:
        super().open()
        self.extra.update(gap_s=self.settings.gap)

    def block(self, start: int, count: int, timed: bool, verify_at: Callable[[int], bool]) -> None:
        if self.group.rank != 0:
            super().block(start, count, timed, verify_at)  # the echo: read (idle until it comes), answer
            return
        gap = self.settings.gap
        for i in range(start, start + count):
            time.sleep(gap)  # the idle gap, outside the timed region
            super().block(i, 1, timed, verify_at)

    def variant(self) -> str:
        return f"gap={duration_label(self.settings.gap)}"


class _Stream(_Case):
    """Channels only: windows of messages back to back, acknowledged by a barrier (OSU bw)."""

    scenario = "stream"
    primary = "delivered"

    def open(self) -> None:
        self.live_backend = self._open(self.spec)
        if self.live_backend.delivery != "channel":
            raise ValueError(
                f"the stream scenario needs a channel backend; {self.spec.name} is a "
                f"{self.live_backend.delivery} (a store keeps only the newest value)"
            )
        if self.spec.mode == "native" and self.live_backend.native_views_until_next_write:
            raise ValueError(
                f"the stream scenario keeps a window of values; {self.spec.name}'s native values are "
                "views that the next write overwrites: stream it in bytes mode"
            )
        self.is_writer = self.group.rank == self.live_backend.root
        self.window = max(1, min(self.settings.window, self.settings.window_bytes // max(1, self.nbytes)))
        self.objs = self._payloads()
        self.backend_delivery, self.readers = "channel", len(self.live_backend.readers)
        self.extra.update(window=self.window)

    @property
    def per_iteration_bytes(self) -> int:
        return self.nbytes * self.window

    def static_plan(self) -> Plan:
        """The size rules count messages; an iteration here is a window of them."""
        per_message = static_plan(self.nbytes, replace(self.settings, volume_cap=10**30, min_iterations=1))
        windows = max(1, per_message.iterations // self.window)
        by_volume = self.settings.volume_cap // max(1, self.per_iteration_bytes)
        n, limited = (windows, per_message.limited_by)
        if by_volume < n:
            n, limited = by_volume, "volume"
        if n < self.settings.min_iterations:
            n, limited = self.settings.min_iterations, "min"
        warm = self.settings.warmup if self.settings.warmup is not None else -(-per_message.warmup // self.window)
        return Plan(warmup=max(1, warm), iterations=int(n), limited_by=limited)

    def iteration(self, i: int, timed: bool, verify: bool) -> None:
        backend, rec, w = self.live_backend, self.record, self.window
        quiet_barrier(self.group) if self.settings.quiet_waits else self.group.barrier()
        t0 = perf_counter()
        if self.is_writer:
            for k in range(w):
                backend.write(self.objs[k % 2])
            t1 = perf_counter()
            self.group.barrier()  # the acknowledgement: every reader has every message
            if self.stretch is not None:
                self.stretch(perf_counter() - t0)
            t2 = perf_counter()
            if timed:
                rec.add("send", (t1 - t0) / w)
                rec.add("delivered", (t2 - t0) / w)
            else:
                rec.warm_times.append(t2 - t0)
            return
        got = [backend.read() for _ in range(w)]
        t1 = perf_counter()
        self.group.barrier()
        if timed:
            rec.add("read", (t1 - t0) / w)
        if verify:
            v0 = perf_counter()
            bad = [k for k, x in enumerate(got) if not self.payload.equal(x, self.objs[k % 2])]
            rec.verify_times.append(perf_counter() - v0)
            rec.check(not bad, f"window {i}: messages {bad[:5]} differ from what was sent")
        del got

    def result(self, records: list[_Record], plan: Plan) -> Result:
        writer = records[self.live_backend.root]
        readers = [r for r in records if r.rank != self.live_backend.root]
        samples = {"send": writer.samples.get("send", []), "delivered": writer.samples.get("delivered", [])}
        if readers and all("read" in r.samples for r in readers):
            m = np.array([r.samples["read"] for r in readers])
            samples.update(read_avg=list(m.mean(axis=0)), read_max=list(m.max(axis=0)))
        med = float(np.median(samples["delivered"])) if samples["delivered"] else float("nan")
        return self._result(samples, plan, records, msgs_per_s=1 / med if med > 0 else None)


_SCENARIO_CLASSES: dict[str, type[_Case]] = {
    "broadcast": _Broadcast,
    "pingpong": _PingPong,
    "stream": _Stream,
    "granularity": _Granularity,
    "idle": _IdleGap,
}
PAIR_SCENARIOS = ("pingpong", "granularity", "idle")
