"""The harness: time a backend on every rank of a group, by the rules of METHOD.md.

Usable without pytest. Collective: :func:`bench` runs on every rank of a group (under MPI every
rank calls it; a local group runs it through ``group.run``, which :func:`run_bench` does)::

    result = run_bench(group, BackendSpec("shm", "native"), PayloadSpec("ndarray", 10**6))

What one case does:

1. rank 0 makes the **static plan** from the payload size (:func:`static_plan`: mpi4py.bench and
   OSU's counts, 10000 iterations up to 16 KiB, 1000 up to 1 MiB, 100 up to 64 MB, 20 above,
   capped by volume) and broadcasts it;
2. every rank runs the **warm-up** iterations (verified, untimed); rank 0 gathers how long an
   iteration and a verification took, decides the **iteration count** (capped by the time budget,
   never below ``min_iterations``) and whether verification runs every iteration or only on the
   first and last (when it would cost more than half an iteration), and broadcasts the plan;
   ranks never calibrate on their own, so every rank makes the same number of collective calls;
3. the timed iterations keep **samples on every rank**; at the end they are gathered on rank 0,
   which builds one :class:`~.results.Result` (per iteration: max / avg / min over readers).

Scenarios (:data:`SCENARIOS`):

* ``broadcast``: rank ``root`` writes, every other rank reads (seeds 000/001). Barrier before each
  iteration (and, for a store, between the write and the reads). Metrics: ``write`` (send-only
  for a channel), ``read_avg|min|max`` (time to a usable object), ``touched_avg|min|max`` (read and
  touch every cache line: time to a fully read object, METHOD rule 10), ``completion`` (the
  primary metric: for a channel the max over readers of barrier exit -> usable object; for a
  store, written then read, the write plus the slowest read of the iteration, and the readers'
  view from the barrier, which includes the harness's barrier between write and read, is kept as
  ``completion_synced``) and ``completion_touched`` (the same to a fully read object);
* ``pingpong``: two ranks; latency = round trip / 2 (primary ``latency``), bandwidth = bytes /
  latency (mpi4py.bench's convention). A larger MPI group is split to its first two ranks; the
  others wait without spinning;
* ``stream``: channels only; the writer sends a window of messages back to back, a barrier
  acknowledges the window (OSU bw). Per message: ``send`` (send-only) and ``delivered`` (primary);
* ``granularity``: seed 003's "how small can a task be": a ping-pong whose echo side works
  ``work`` seconds (sleeps) before it answers; ``overhead`` = round trip - work (primary).

Times are ``time.perf_counter`` durations in seconds (never timestamps compared across ranks).
Every rank starts its clock when it leaves the same barrier: under MPI they leave within
microseconds; a local group's barrier goes through rank 0's pipes, so readers leave it some tens
of microseconds after the writer and a local completion under ~100 µs reads somewhat short.
Payloads are built outside the timed region; two payloads (seeds 1 and 2) alternate, so a reader
that gets a stale value fails verification (``alternate=False`` sends one, as mpi4py.bench does:
the self-check uses it, so that both hold the same bytes in the caches). A verification failure
on any rank fails every rank (:class:`VerificationError`) after the case has ended cleanly.
"""

from __future__ import annotations

import gc
import math
import os
import time
from dataclasses import asdict, dataclass, field, replace
from typing import Any, Callable, Sequence

import numpy as np

from ..backends.base import BackendSpec
from ..core.envinfo import cores as _cores
from ..core.units import duration_label, size_label
from ..core.group import Group, MPIGroup
from ..core.payloads import (DICT_ENTRY_BYTES, NDARRAY_COLS, SEED004_ELEMENTS_PER_BASE, TINY_BYTES, PayloadSpec)
from ..history.results import Result, Verified
from .transfer import describe_object

SCENARIOS = ("broadcast", "pingpong", "stream", "granularity")
VERIFY_MODES = ("auto", "every", "ends")

# Static plan: (payload bytes up to, iterations, warm-up) -- mpi4py.bench (10000 / 1000 above
# 16 KiB / 10 above 1 MiB; skip 100 / 10 / 1) and OSU (10000 / 1000, skip 100 / 10), with more
# iterations above 1 MiB than mpi4py.bench so that the ratio intervals have samples to work on.
STATIC_PLAN = (
    (16 * 1024, 10_000, 100),
    (1024 * 1024, 1_000, 10),
    (64 * 10**6, 100, 2),
    (math.inf, 20, 1),
)
perf_counter = time.perf_counter
_CORES = _cores()
WARMUP_SHARE = 0.5  # at most this share of the time budget goes to warm-up beyond its first iteration


class VerificationError(AssertionError):
    """A reader received something else than what was written."""


# ------------------------------------------------------------------------------ settings, plan


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
    quiet_waits: bool = True  # the harness's own MPI waits sleep instead of spinning
    alternate: bool = True  # two payloads alternate (a stale read fails); False: one, every time

    def __post_init__(self) -> None:
        if self.verify not in VERIFY_MODES:
            raise ValueError(f"verify must be one of {', '.join(VERIFY_MODES)}, not {self.verify!r}")
        if self.time_budget <= 0:
            raise ValueError(f"time_budget must be positive, got {self.time_budget}")
        if not 1 <= self.min_iterations <= self.max_iterations:
            raise ValueError(
                f"need 1 <= min_iterations ({self.min_iterations}) <= max_iterations ({self.max_iterations})"
            )
        if self.warmup is not None and self.warmup < 0:
            raise ValueError(f"warmup must not be negative, got {self.warmup}")
        if self.window < 1:
            raise ValueError(f"window must be at least 1, got {self.window}")
        if self.work < 0:
            raise ValueError(f"work must not be negative, got {self.work}")


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
    for limit, count, warm in STATIC_PLAN:
        if nbytes <= limit:
            break
    limited_by = "count"
    n = count
    if n > settings.max_iterations:
        n = settings.max_iterations
    by_volume = settings.volume_cap // moved
    if by_volume < n:
        n, limited_by = int(by_volume), "volume"
    if n < settings.min_iterations:
        n, limited_by = settings.min_iterations, "min"
    warm = settings.warmup if settings.warmup is not None else warm
    return Plan(warmup=max(1, warm), iterations=n, limited_by=limited_by)


def timed_plan(static: Plan, per_iteration: float, verify_cost: float, settings: BenchSettings) -> Plan:
    """Rank 0's decision after the warm-up: cap by time, choose the verification mode.

    ``per_iteration`` is the wall time of one warm-up iteration (verification included),
    ``verify_cost`` the longest verification a rank made in one iteration.
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


# -------------------------------------------------------------------------------- payloads


@dataclass(frozen=True)
class BufferPayload:
    """Exactly ``size`` bytes (a uint8 array): latency from 1 byte, bandwidth at exact sizes."""

    size: int
    kind: str = "buffer"

    def __post_init__(self) -> None:
        if self.size < 1:
            raise ValueError(f"a buffer payload needs at least 1 byte, got {self.size}")

    @property
    def id(self) -> str:
        return f"{self.kind}-{size_label(self.size)}"

    @property
    def nbytes(self) -> int:
        return self.size

    def build(self, seed: int = 0) -> np.ndarray:
        pattern = (np.arange(256, dtype=np.uint16) * 7 + seed * 13) % 251
        return np.resize(pattern.astype(np.uint8), self.size)

    def equal(self, a: Any, b: Any) -> bool:
        try:
            x = np.asarray(a if isinstance(a, np.ndarray) else memoryview(a)).reshape(-1).view(np.uint8)
            y = np.asarray(b if isinstance(b, np.ndarray) else memoryview(b)).reshape(-1).view(np.uint8)
        except (TypeError, ValueError):
            return False
        return x.shape == y.shape and bool(np.array_equal(x, y))


Payload = Any  # PayloadSpec or BufferPayload: kind, size, id, nbytes, build(seed), equal(a, b)


def payload_bytes(payload: Payload) -> int:
    """Bytes of data a payload holds (``PayloadSpec.nbytes``), without building a large one."""
    if isinstance(payload, PayloadSpec):
        kind, size = payload.kind, payload.size
        if kind == "ndarray":
            return max(1, size // (NDARRAY_COLS * 4)) * NDARRAY_COLS * 4
        if kind in ("array1d", "ragged2d"):
            return max(1, size // (SEED004_ELEMENTS_PER_BASE * 4)) * SEED004_ELEMENTS_PER_BASE * 4
        if kind == "dict":
            return max(1, size // DICT_ENTRY_BYTES) * DICT_ENTRY_BYTES
        if kind == "tiny":
            return TINY_BYTES
    return int(payload.nbytes)


# ---------------------------------------------------------------------------------- helpers


def touch(obj: Any) -> int:
    """Read one byte of every cache line of every buffer in ``obj`` (a fully read object).

    Arrays, bytes-likes and lists/tuples of them are scanned; other objects (a dict, already
    built by unpickling) count as read.
    """
    if isinstance(obj, np.ndarray):
        if obj.size == 0:
            return 0
        if obj.flags.c_contiguous:
            flat = obj.reshape(-1).view(np.uint8)
            return int(flat[::64].sum(dtype=np.uint64))
        return int(np.asarray(obj).sum() != 0)
    if isinstance(obj, (bytes, bytearray, memoryview)):
        return touch(np.frombuffer(obj, dtype=np.uint8)) if len(obj) else 0
    if isinstance(obj, (list, tuple)) and obj and isinstance(obj[0], (np.ndarray, bytes, bytearray, memoryview)):
        return sum(touch(x) for x in obj)
    try:
        return len(obj)
    except TypeError:
        return 0


def quiet_barrier(group: Group, spin: float = 50e-6, max_sleep: float = 1e-3, fraction: float = 0.05) -> None:
    """A barrier that does not spin: MPI waits in ``Ibarrier`` + ``Test`` with sleeps.

    The sleeps grow with the time waited (at most ``fraction`` of it, at most ``max_sleep``), so a
    rank that waits long for a slow writer leaves the cores to the ranks that work (our machines
    run 4 ranks on 2 cores), yet wakes within 5% of its wait. A plain ``Barrier`` follows, so the
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
        if not ok and len(self.failures) < 5:
            self.failures.append(what)
        elif not ok:
            self.failures.append("")


# --------------------------------------------------------------------------------- scenarios


class _Case:
    """One case of one scenario on one rank; subclasses implement one iteration."""

    scenario = ""
    primary = "completion"

    def __init__(self, group: Group, spec: BackendSpec, payload: Payload, settings: BenchSettings) -> None:
        self.group = group
        self.spec = spec
        self.payload = payload
        self.settings = settings
        self.nbytes = payload_bytes(payload)
        self.record = _Record(group.rank)
        self.live: list[Any] = []
        self.extra: dict[str, Any] = {}
        self.kind_of_backend, self.readers = "", 0  # set by open()

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
        self.extra["wait"] = backend.wait  # how its readers waited (METHOD rule 18)
        return backend

    def _payloads(self) -> list[Any]:
        """Two payloads (seeds 1 and 2) that alternate, so a stale value fails verification; or
        one sent every time (``alternate=False``: what mpi4py.bench and OSU do)."""
        first = self.payload.build(seed=1)
        return [first, self.payload.build(seed=2) if self.settings.alternate else first]

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

    def _result(self, samples: dict[str, list[float]], plan: Plan, records: list[_Record], **extra: Any) -> Result:
        checked = sum(r.checked for r in records)
        failed = sum(len(r.failures) for r in records)
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
            verified=Verified(checked, failed),
            kind=self.kind_of_backend,
            readers=self.readers,
            group="mpi" if self.group.is_mpi else "local",
            oversubscribed=self.group.size > _CORES,
            nodes=self.group.nodes,
            plan=asdict(plan),
        )


class _Broadcast(_Case):
    """1 writer (the spec's root), N readers; write, (barrier for a store), read, touch, verify."""

    scenario = "broadcast"

    def open(self) -> None:
        self.live_backend = self._open(self.spec)
        self.kind = self.live_backend.kind
        self.is_writer = self.group.rank == self.live_backend.root
        self.objs = self._payloads()  # writer: sent; readers: expected
        self.live_backend.prepare(self.objs)  # iteration i sends objs[i % 2]
        self.kind_of_backend, self.readers = self.kind, len(self.live_backend.readers)
        self.extra.update(root=self.live_backend.root, touched=self.settings.touch)

    def iteration(self, i: int, timed: bool, verify: bool) -> None:
        backend, rec, obj = self.live_backend, self.record, self.objs[i % 2]
        store = self.kind == "store"
        quiet = self.settings.quiet_waits
        wait = quiet_barrier if quiet else (lambda g: g.barrier())
        wait(self.group)
        t0 = perf_counter()
        if self.is_writer:
            backend.write(obj)
            t1 = perf_counter()
            if store:
                wait(self.group)
            if timed:
                rec.add("write", t1 - t0)
            else:
                rec.warm_times.append(t1 - t0)
            return
        if store:
            wait(self.group)
        t1 = perf_counter()
        got = backend.read()
        t2 = perf_counter()
        if self.settings.touch:
            touch(got)
        t3 = perf_counter()
        if timed:
            rec.add("read", t2 - t1)
            rec.add("completion", t2 - t0)
            if self.settings.touch:
                rec.add("touched", t3 - t1)
                rec.add("completion_touched", t3 - t0)
        else:
            rec.warm_times.append(t2 - t0)
        if verify:
            v0 = perf_counter()
            ok = self.payload.equal(got, obj)
            rec.verify_times.append(perf_counter() - v0)
            rec.check(ok, f"iteration {i}: received {describe_object(got)}, expected {describe_object(obj)}")
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
        for metric in ("completion", "completion_touched"):
            if readers and all(metric in r.samples for r in readers):
                samples[metric] = list(np.array([r.samples[metric] for r in readers]).max(axis=0))
        if self.kind == "store" and samples["write"]:
            # A store is written, then read: completion = write + slowest read, per iteration
            # (durations on two ranks, added; no timestamps compared). What the readers saw
            # from the common barrier, which adds the harness's own barrier between write and
            # read, stays as completion_synced.
            write = np.array(samples["write"])
            samples["completion_synced"] = samples.pop("completion", [])
            samples["completion"] = list(write + np.array(samples["read_max"]))
            if "touched_max" in samples:
                samples.pop("completion_touched", None)
                samples["completion_touched"] = list(write + np.array(samples["touched_max"]))
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
        self.kind_of_backend, self.readers = self.fwd.kind, 1
        self.extra.update(work_s=self.settings.work)

    def iteration(self, i: int, timed: bool, verify: bool) -> None:
        self.block(i, 1, timed, lambda _: verify)

    def block(self, start: int, count: int, timed: bool, verify_at: Callable[[int], bool]) -> None:
        # A tight loop (names bound once): rank 1's turn-around is inside rank 0's round trip.
        rec = self.record
        if self.group.rank == 0:
            write, read, objs, equal = self.fwd.write, self.back.read, self.objs, self.payload.equal
            out = rec.samples.setdefault("roundtrip", []) if timed else rec.warm_times
            clock = perf_counter
            for i in range(start, start + count):
                obj = objs[i & 1]
                t0 = clock()
                write(obj)
                got = read()
                t1 = clock()
                out.append(t1 - t0)
                if verify_at(i):
                    v0 = perf_counter()
                    ok = equal(got, obj)
                    rec.verify_times.append(perf_counter() - v0)
                    rec.check(ok, f"iteration {i}: echo is {describe_object(got)}, sent {describe_object(obj)}")
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
        result = self._result(samples, plan, records, efficiency_work=eff, tasks_per_s=1 / med if med > 0 else None)
        result.variant = f"work={duration_label(self.settings.work)}"
        return result


class _Stream(_Case):
    """Channels only: windows of messages back to back, acknowledged by a barrier (OSU bw)."""

    scenario = "stream"
    primary = "delivered"

    def open(self) -> None:
        self.live_backend = self._open(self.spec)
        if self.live_backend.kind != "channel":
            raise ValueError(
                f"the stream scenario needs a channel backend; {self.spec.name} is a "
                f"{self.live_backend.kind} (a store keeps only the newest value)"
            )
        if self.spec.mode == "native" and getattr(self.live_backend, "native_views_until_next_write", False):
            raise ValueError(
                f"the stream scenario keeps a window of values; {self.spec.name}'s native values are "
                "views that the next write overwrites: stream it in bytes mode"
            )
        self.is_writer = self.group.rank == self.live_backend.root
        self.window = max(1, min(self.settings.window, self.settings.window_bytes // max(1, self.nbytes)))
        self.objs = self._payloads()
        self.kind_of_backend, self.readers = "channel", len(self.live_backend.readers)
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
}
PAIR_SCENARIOS = ("pingpong", "granularity")


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
    if group.rank == 0:
        more = static.warmup - 1
        if settings.warmup is None:
            more = min(more, int(WARMUP_SHARE * settings.time_budget / max(max(firsts), 1e-9)))
        static = replace(static, warmup=1 + max(0, more))
    static = group.bcast(static if group.rank == 0 else None)
    t1 = perf_counter()
    if static.warmup > 1:
        case.block(1, static.warmup - 1, False, lambda i: True)
    # seconds per iteration: the later warm-up iterations if there are any (the first pays for
    # first touches and connections), else the first
    wall = (perf_counter() - t1) / (static.warmup - 1) if static.warmup > 1 else first
    rec = case.record
    verify_cost = max(rec.verify_times) if rec.verify_times else 0.0
    costs = group.gather((wall, verify_cost))
    if group.rank == 0:
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


def _finish(cases: list[_Case], plans: list[Plan], group: Group) -> list[Result | None]:
    """Collective: gather every rank's records; rank 0 builds the Results; a failed check fails all."""
    results: list[Result | None] = []
    problems: list[str] = []
    for case, plan in zip(cases, plans):
        records = group.gather(case.record)
        if group.rank == 0:
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
    case in turn (A B A B ..., METHOD rule 16), so that drift on the machine hits every case
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
            if rounds == 1 or len(cases) == 1:
                for case, plan in zip(cases, plans):
                    _wait(group, settings)
                    _run_iterations(case, plan, 0, plan.iterations)
            else:
                # every case gets the same number of rounds; a case's iterations are spread evenly
                done = [0] * len(cases)
                for r in range(rounds):
                    for k, (case, plan) in enumerate(zip(cases, plans)):
                        n = plan.iterations * (r + 1) // rounds - done[k]
                        if n:
                            _wait(group, settings)
                            _run_iterations(case, plan, done[k], n)
                            done[k] += n
        finally:
            if gc_was:
                gc.enable()
        results = _finish(cases, plans, group)
    finally:
        for case in reversed(opened):
            case.close()
    return results


def _bench_rank0(group: Group, backend: BackendSpec, payload: Payload, scenario: str, settings: BenchSettings | None) -> Result | None:
    return bench(group, backend, payload, scenario, settings)


def _interleaved_rank0(group: Group, backends: Sequence[BackendSpec], payload: Payload, scenario: str,
                       settings: BenchSettings | None, rounds: int) -> list[Result | None]:
    return bench_interleaved(group, backends, payload, scenario, settings, rounds)


def run_bench(
    group: Group,
    backend: BackendSpec,
    payload: Payload,
    scenario: str = "broadcast",
    settings: BenchSettings | None = None,
) -> Result:
    """Run :func:`bench` through ``group.run`` (works for local and MPI groups); rank 0's Result.

    Under MPI every rank calls this and gets the same Result; for a local group rank 0 calls it.
    """
    outcomes = group.run(_bench_rank0, backend, payload, scenario, settings)
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
    outcomes = group.run(_interleaved_rank0, list(backends), payload, scenario, settings, rounds)
    return list(outcomes[0])


# ---------------------------------------------------------------------------- copy bandwidth


def copy_samples(nbytes: int, time_budget: float = 0.3, max_reps: int = 200, min_reps: int = 5) -> list[float]:
    """Seconds per ``np.copyto`` of ``nbytes`` into an already touched destination.

    The reference for efficiency: what one plain memory copy costs on this machine now.
    """
    nbytes = max(1, int(nbytes))
    src = np.ones(nbytes, dtype=np.uint8)
    dst = np.zeros(nbytes, dtype=np.uint8)  # zeros + the warm-up copy: every page touched
    np.copyto(dst, src)
    t0 = perf_counter()
    np.copyto(dst, src)
    one = max(perf_counter() - t0, 1e-9)
    reps = int(min(max_reps, max(min_reps, time_budget / one)))
    out = []
    for _ in range(reps):
        t0 = perf_counter()
        np.copyto(dst, src)
        out.append(perf_counter() - t0)
    return out


def copy_result(nbytes: int, time_budget: float = 0.3) -> Result:
    """A :class:`Result` (scenario ``copy``, backend ``numpy``) of :func:`copy_samples`."""
    samples = copy_samples(nbytes, time_budget)
    return Result(
        scenario="copy",
        backend="numpy",
        mode="native",
        payload="buffer",
        size=int(nbytes),
        ranks=1,
        samples={"copy": samples},
        nbytes=int(nbytes),
        primary="copy",
        extra={"what": "np.copyto into a touched destination"},
    )


# A child that echoes every message it reads from stdin back on stdout (exactly ``n`` bytes each).
_ECHO = (
    "import os, sys\n"
    "n = int(sys.argv[1])\n"
    "while True:\n"
    "    buf = b''\n"
    "    while len(buf) < n:\n"
    "        chunk = os.read(0, n - len(buf))\n"
    "        if not chunk:\n"
    "            sys.exit(0)\n"
    "        buf += chunk\n"
    "    view = memoryview(buf)\n"
    "    while view:\n"
    "        view = view[os.write(1, view):]\n"
)


def pipe_pingpong_samples(nbytes: int, time_budget: float = 0.1, max_reps: int = 5000,
                          min_reps: int = 20, warmup: int = 20) -> list[float]:
    """Seconds of one way (round trip / 2) of ``nbytes`` between this process and an echoing
    child over two plain OS pipes: the raw ping-pong that no wrapper of ours touches.

    With :func:`copy_samples`, the in-run reference for the machine's state (METHOD rule 19):
    the pipe ping-pong follows the scheduler (wake-ups, other processes on the cores), the copy
    follows the memory bandwidth.
    """
    import subprocess
    import sys

    nbytes = max(1, int(nbytes))
    msg = b"x" * nbytes
    child = subprocess.Popen([sys.executable, "-c", _ECHO, str(nbytes)], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, bufsize=0)
    assert child.stdin is not None and child.stdout is not None
    w, r = child.stdin.fileno(), child.stdout.fileno()

    def trip() -> None:
        view = memoryview(msg)
        while view:
            view = view[os.write(w, view):]
        got = 0
        while got < nbytes:
            chunk = os.read(r, nbytes - got)
            if not chunk:
                raise RuntimeError("the echo child of the pipe ping-pong exited")
            got += len(chunk)

    out: list[float] = []
    try:
        for _ in range(warmup):
            trip()
        deadline = perf_counter() + time_budget
        while len(out) < max_reps and (len(out) < min_reps or perf_counter() < deadline):
            t0 = perf_counter()
            trip()
            out.append((perf_counter() - t0) / 2)
    finally:
        child.stdin.close()
        child.stdout.close()
        try:
            child.wait(timeout=10)
        except subprocess.TimeoutExpired:
            child.kill()
            child.wait()
    return out


#: Sizes of the pipe ping-pong reference: latency-bound and bandwidth-bound.
PIPE_REFERENCE_SIZES = (1, 64 * 1024)


def pipe_pingpong_result(nbytes: int, time_budget: float = 0.1) -> Result:
    """A :class:`Result` (scenario ``reference``, backend ``pipe``) of :func:`pipe_pingpong_samples`."""
    samples = pipe_pingpong_samples(nbytes, time_budget)
    return Result(
        scenario="reference",
        backend="pipe",
        mode="bytes",
        payload="buffer",
        size=int(nbytes),
        ranks=2,
        samples={"latency": samples},
        nbytes=int(nbytes),
        primary="latency",
        extra={"what": "os.write/os.read ping-pong with an echoing child over two pipes (round trip / 2)"},
    )


#: Scenarios of in-run references: they measure the machine, not the code under test.
REFERENCE_SCENARIOS = ("copy", "reference")


class CopyReference:
    """Copy bandwidth by size, measured once per size per process (cheap, cached)."""

    def __init__(self, time_budget: float = 0.2) -> None:
        self.time_budget = time_budget
        self.results: dict[int, Result] = {}

    def bandwidth(self, nbytes: int) -> float:
        """Bytes per second of a plain copy of ``nbytes`` (median)."""
        nbytes = max(1, int(nbytes))
        if nbytes not in self.results:
            self.results[nbytes] = copy_result(nbytes, self.time_budget)
        return self.results[nbytes].throughput()


def with_copy_reference(result: Result, copy_bw: float) -> Result:
    """Give ``result`` the copy bandwidth (B/s) measured in the same run: its efficiency is
    derived from it (:meth:`Result.efficiency`)."""
    result.copy_bandwidth = copy_bw if copy_bw > 0 else None
    return result


__all__ = [
    "BenchSettings",
    "BufferPayload",
    "CopyReference",
    "Plan",
    "SCENARIOS",
    "VerificationError",
    "with_copy_reference",
    "bench",
    "bench_interleaved",
    "copy_result",
    "copy_samples",
    "pipe_pingpong_result",
    "pipe_pingpong_samples",
    "quiet_barrier",
    "run_bench",
    "run_interleaved",
    "static_plan",
    "timed_plan",
    "touch",
]
