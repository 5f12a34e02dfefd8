"""The counting pass: what one message costs each rank, in counts (docs/method.md rule 20).

After a case's timed rounds, every rank runs ``count_repeats`` repeats of

1. a block of untimed, unverified iterations between two counter snapshots (the message phase), the
   repeats taking turns: as the case runs, its writes late, its reads late (:data:`TURNS`);
2. the same number of iterations of the harness's own waits alone (the barrier phase),

and keeps phase 1 minus phase 2 per counter: the messages' cost, not the harness's barrier
(a local group's barrier is pipe reads and writes; an MPI one may sleep). A counter is exact when
every repeat gave the same total; else it is statistical with its spread. Then a pass of its own
with tracemalloc (tracing slows every allocation, so it never shares a pass with the others)
takes each iteration's bytes allocated and allocation peak above its start (core/probes.AllocProbe). Timed samples are
never touched.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from ..backends.base import Backend, get_backend
from ..core.counters import Counters, RankCounters
from ..core.group import Group
from ..core.probes import AllocProbe, CounterProbe, differences
from .plan import BenchSettings, Plan
from .scenarios import _Broadcast, _Case, _Granularity, _PingPong, _Stream, quiet_barrier

#: messages a repeat aims at, and the payload bytes it may move at most (a repeat has at least
#: 2 iterations). Fixed, not scaled by time: two runs of one case must count the same messages.
#: Few: an exact counter divides by them exactly anyway, and the pass is paid per message
#: (docs/counters.md, "Cost")
COUNT_MESSAGES = 4
COUNT_VOLUME = 2 * 2**20
#: the repeats take turns (name, the call made late): as the case runs; each iteration's write late
#: by :data:`LATE_S` (each reader waits in read()); its read late (each message waits for its reader).
#: A count the code causes is the same in each turn; one that follows timing (a reader that takes what
#: has arrived so far: a read call more, a poll and its objects) is not, and compare judges it turn by
#: turn (comparison/counters.py; docs/counters.md, "Counts that follow timing")
TURNS = (("as run", ""), ("writes late", "write"), ("reads late", "read"))
LATE_S = 2e-3  # above the harness barrier's longest sleep (quiet_barrier: 1 ms)


@contextmanager
def late(case: _Case, repeat: int) -> Iterator[None]:
    """Repeat ``repeat``'s turn (:data:`TURNS`): the first write or read of each iteration late
    (a stream's window once: the rest of it is back to back anyway)."""
    which = TURNS[repeat % len(TURNS)][1]
    patched = [(b, b.__dict__.get(which)) for b in case.live if which and isinstance(b, Backend)]
    per = messages_per_iteration(case)
    for backend, _ in patched:
        call, calls = getattr(backend, which), [0]

        def slow(*args: object, _call: Callable[..., object] = call, _calls: list[int] = calls) -> object:
            if _calls[0] % per == 0:
                time.sleep(LATE_S)
            _calls[0] += 1
            return _call(*args)

        setattr(backend, which, slow)
    try:
        yield
    finally:
        for backend, own in patched:  # the instance's own attribute back, if it had one
            if own is None:
                delattr(backend, which)
            else:
                setattr(backend, which, own)


def _never(i: int) -> bool:
    return False


def messages_per_iteration(case: _Case) -> int:
    return int(getattr(case, "window", 1)) if isinstance(case, _Stream) else 1


def count_iterations(case: _Case) -> int:
    """Iterations per repeat: ``COUNT_MESSAGES`` messages, capped by ``COUNT_VOLUME``, at least 2;
    the same on every rank and in every run of the case."""
    per = messages_per_iteration(case)
    by_count = -(-COUNT_MESSAGES // per)
    by_volume = COUNT_VOLUME // max(1, case.nbytes * per)
    return max(2, min(by_count, by_volume))


def not_counted(case: _Case, settings: BenchSettings) -> str | None:
    """Why this case gets no counting pass, or None."""
    if not settings.count:
        return "counting turned off (count=False, --ipc-count=no)"
    if isinstance(case, _Granularity):
        return "granularity cases are not counted (the echo's work is a sleep)"
    if case.nbytes > settings.count_max_bytes:
        return f"payload of {case.nbytes} B is above count_max_bytes ({settings.count_max_bytes} B)"
    return None


def _harness_waits(case: _Case, settings: BenchSettings) -> Callable[[], None]:
    """One iteration of the scenario's own waits, nothing else (mirrors ``iteration``)."""
    group = case.group
    wait: Callable[[Group], None] = quiet_barrier if settings.quiet_waits else (lambda g: g.barrier())
    if isinstance(case, _PingPong):
        return lambda: None  # a ping-pong block has no harness wait inside
    if isinstance(case, _Stream):
        def stream() -> None:
            wait(group)
            group.barrier()  # the window's acknowledgement
        return stream
    if isinstance(case, _Broadcast) and case.backend_delivery == "store":
        def store() -> None:
            wait(group)
            wait(group)  # between the write and the reads
        return store
    return lambda: wait(group)


def role(case: _Case) -> str:
    if isinstance(case, _PingPong):
        return "writer" if case.group.rank == 0 else "reader"
    return "writer" if case.group.rank == case.live_backend.root else "reader"


def count_case(case: _Case, plan: Plan, group: Group, settings: BenchSettings,
               wait: Callable[[], None], syscalls: bool = True) -> Counters | None:
    """Collective: the counting pass of one opened, warmed-up case; the Counters on rank 0."""
    n = count_iterations(case)
    per = messages_per_iteration(case)
    first = plan.warmup + plan.iterations  # seeds continue after the timed iterations
    harness = _harness_waits(case, settings)
    totals: dict[str, list[int]] = {}
    t0 = time.perf_counter()
    with CounterProbe(syscalls=syscalls) as probe:
        absent = dict(probe.absent)
        # a barrier closes each phase: an asynchronous writer (mp.Queue's feeder thread, zmq's
        # I/O thread) has then sent everything, so its work falls inside the phase; the
        # barrier-only phase ends with the same barrier, so it cancels too
        wait()
        s0 = probe.snapshot()
        for repeat in range(settings.count_repeats):
            with late(case, repeat):
                case.block(first, n, False, _never)
            wait()
            s1 = probe.snapshot()
            for _ in range(n):
                harness()
            wait()
            s2 = probe.snapshot()
            msg, base = differences(s0, s1), differences(s1, s2)
            for k, v in msg.items():
                totals.setdefault(k, []).append(v - base[k])
            s0 = s2
    t1 = time.perf_counter()
    # one iteration a repeat under tracemalloc (tracing is most of the pass's cost): the peak above
    # its start (the harness's barrier's own transient, tens of bytes, stays in it) and what stayed
    # allocated, scaled to the kernel pass's messages, so that every total divides by one count
    # (each repeat traces the same iteration, so exact stays exact, as Go's AllocsPerRun divides)
    alloc = AllocProbe()
    wait()
    # one iteration first, not kept, under the profile function but before tracemalloc starts
    # (tracing multiplies the cost of each allocation): its first calls fill caches, which would
    # otherwise inflate the first repeat's allocations (docs/counters.md, "Cost")
    start = alloc.start()
    case.block(first, 1, False, _never)
    alloc.stop(start)
    with alloc:
        for repeat in range(settings.count_repeats):
            with late(case, repeat):
                start = alloc.start()
                case.block(first, 1, False, _never)
                peak, net, got = alloc.stop(start)
            for name, value in (("alloc.bytes", got), ("alloc.peak_bytes", peak), ("alloc.net_bytes", net)):
                totals.setdefault(name, []).append(value * n)
    t2 = time.perf_counter()
    case.record.warm_times.clear()  # the untimed iterations appended there
    mine = RankCounters(group.rank, role(case), totals, n * per, absent)
    everyone = group.gather(mine)
    if everyone is None:  # not the root
        return None
    return Counters(list(everyone), n, per, settings.count_repeats, (t1 - t0, t2 - t1),
                    timing=tuple(sorted(get_backend(case.spec.name).timing_counters)),
                    turns=tuple(TURNS[k % len(TURNS)][0] for k in range(settings.count_repeats)))
