"""Counter verdicts: what changed in the cost of a message between two results of one case.

:func:`counter_changes` is pure (two :class:`~.results.Result` in, a list out). An exact counter
(every repeat counted the same, on both sides, and not one of :data:`TIMING_COUNTERS`) changes
when its value per message differs at all: counts do not move with load, so any difference is the
code's. A statistical one (waiting, context switches, zmq's I/O thread) changes only when the two
spreads lie apart by more than the wider of them and by half the larger value. :func:`explain` turns the changes of a case into one line per rank, e.g.
``reader: +1 copy of 1.05 MB per message (+1,048,576 B allocated, +256 minor faults)``.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..core.counters import COUNTERS, Counters, RankCounters
from ..core.units import format_bytes, format_count
from .results import Result

#: a change in words: (singular, plural) of what is counted, per message
_WORDS: dict[str, tuple[str, str]] = {
    "syscalls.total": ("system call", "system calls"),
    "syscalls.data": ("data system call (read/write/send/recv family)", "data system calls (read/write/send/recv family)"),
    "syscalls.sync": ("futex call", "futex calls"),
    "syscalls.mapping": ("mapping system call (mmap/munmap/ftruncate...)", "mapping system calls (mmap/munmap/ftruncate...)"),
    "syscalls.waiting": ("waiting system call (poll/sleep/yield)", "waiting system calls (poll/sleep/yield)"),
    "syscalls.other": ("other system call", "other system calls"),
    "io.rchar": ("B read through the kernel", "B read through the kernel"),
    "io.wchar": ("B written through the kernel", "B written through the kernel"),
    "io.syscr": ("read-family call", "read-family calls"),
    "io.syscw": ("write-family call", "write-family calls"),
    "faults.minor": ("minor fault", "minor faults"),
    "faults.major": ("major fault", "major faults"),
    "ctx.voluntary": ("voluntary context switch", "voluntary context switches"),
    "ctx.involuntary": ("involuntary context switch", "involuntary context switches"),
    "pickle.dumps": ("pickle dumps", "pickle dumps"),
    "pickle.dumps_bytes": ("B pickled", "B pickled"),
    "pickle.loads": ("pickle loads", "pickle loads"),
    "pickle.loads_bytes": ("B unpickled", "B unpickled"),
    "alloc.peak_bytes": ("B allocated (peak)", "B allocated (peak)"),
    "alloc.net_bytes": ("B kept allocated", "B kept allocated"),
}
# the counters that show a copy of the payload, in the order a copy's details are listed
_COPY_EVIDENCE = ("alloc.peak_bytes", "faults.minor", "io.rchar", "io.wchar")
#: a byte counter's change is "k copies" when it is within this share of k payloads
COPY_TOLERANCE = 0.1
#: counters driven by timing (the scheduler, waits, wake-ups): compared as statistical even when
#: a run's repeats agreed, because across runs they did not (A/A runs, docs/counters.md)
TIMING_COUNTERS = frozenset({"ctx.voluntary", "ctx.involuntary", "syscalls.waiting", "syscalls.sync",
                             "syscalls.total", "syscalls.other"})
#: a statistical change must also exceed this share of the larger value (3 repeats understate a
#: spread: A/A runs flagged 48 statistical counters of 76 cases with the spreads alone)
STATISTICAL_TOLERANCE = 0.5
#: byte counters: exact within a run, yet a message's bytes may differ by a few between runs (mp-queue
#: pickles a growing sequence number: one byte more from 256 on); a change must exceed this many
#: bytes per message or this share of the value (a copy of a payload is far more)
BYTE_COUNTERS = frozenset({"io.rchar", "io.wchar", "pickle.dumps_bytes", "pickle.loads_bytes", "alloc.peak_bytes",
                           "alloc.net_bytes"})
BYTE_TOLERANCE = (64, 0.01)


@dataclass(frozen=True)
class CounterChange:
    """One counter of one rank that changed between base and head (values per message)."""

    key: str  # the case (Result.key)
    role: str  # writer | reader
    rank: int
    counter: str
    base: int | float
    head: int | float
    exact: bool  # exact on both sides: compared exactly; else against the spreads
    text: str  # the change in words, e.g. "reader: +1 data system call ... per message"

    @property
    def delta(self) -> float:
        return self.head - self.base


def _pairs(base: Counters, head: Counters) -> list[tuple[RankCounters, RankCounters]]:
    """Ranks matched by role and order within it (the writer; the first reader, the second, ...)."""
    out = []
    for role in ("writer", "reader"):
        b = [r for r in base.ranks if r.role == role]
        h = [r for r in head.ranks if r.role == role]
        out.extend(zip(b, h))
    return out


def _who(rank: RankCounters, several: bool) -> str:
    return f"{rank.role} (rank {rank.rank})" if several else rank.role


def _word(counter: str, delta: float) -> str:
    one, many = _WORDS.get(counter, (counter, counter))
    return one if abs(delta) == 1 else many


def _phrase(counter: str, delta: float) -> str:
    return f"{format_count(delta, signed=True)} {_word(counter, delta)} per message"


def counter_changes(base: Result, head: Result) -> list[CounterChange]:
    """The counters of ``head`` that differ from ``base`` (the same case), each in words.

    Exact counters are compared exactly; statistical ones (either side inexact) against their
    measured spread: a change when the spreads are apart by more than the wider one. Counters
    absent on either side, and ranks without a partner (other rank counts), are not compared.
    Raises ValueError when the results are of different cases.
    """
    if base.key != head.key:
        raise ValueError(f"counter_changes compares one case; got {base.key!r} and {head.key!r}")
    if base.counters is None or head.counters is None:
        return []
    pairs = _pairs(base.counters, head.counters)
    several = sum(1 for b, _ in pairs if b.role == "reader") > 1
    changes = []
    for b, h in pairs:
        for name in COUNTERS:
            if not (b.has(name) and h.has(name)):
                continue
            exact = b.exact(name) and h.exact(name) and name not in TIMING_COUNTERS
            bv, hv = b.value(name), h.value(name)
            if exact and name in BYTE_COUNTERS:
                changed = abs(hv - bv) > max(BYTE_TOLERANCE[0], BYTE_TOLERANCE[1] * max(abs(bv), abs(hv)))
            elif exact:
                changed = bv != hv
            else:
                (blo, bhi), (hlo, hhi) = b.spread(name), h.spread(name)
                margin = max(bhi - blo, hhi - hlo, STATISTICAL_TOLERANCE * max(abs(bv), abs(hv)))
                changed = hlo > bhi + margin or hhi < blo - margin
            if changed:
                text = f"{_who(b, several)}: {_phrase(name, hv - bv)}"
                if not exact:
                    text += f" (statistical: {format_count(bv)} -> {format_count(hv)}, spreads apart)"
                changes.append(CounterChange(head.key, b.role, b.rank, name, bv, hv, exact, text))
    return changes


def explain(changes: list[CounterChange], nbytes: int) -> list[str]:
    """One line per rank: a change of about k payloads in the allocation peak (or in the bytes
    through the kernel) reads as "+k copies of <size>", the other counters follow in brackets.

    ``nbytes``: the payload's bytes (``Result.nbytes``).
    """
    by_rank: dict[tuple[str, int], list[CounterChange]] = {}
    for c in changes:
        by_rank.setdefault((c.role, c.rank), []).append(c)
    several = len({r for role, r in by_rank if role == "reader"}) > 1
    lines = []
    for (role, rank), group in by_rank.items():
        who = f"{role} (rank {rank})" if several else role
        parts = {c.counter: c for c in group}
        head = ""
        for name in _COPY_EVIDENCE:
            c = parts.get(name)
            if c is None or not nbytes or name == "faults.minor":
                continue
            k = round(c.delta / nbytes)
            if k and abs(c.delta - k * nbytes) <= COPY_TOLERANCE * abs(k) * nbytes:
                what = "copy" if abs(k) == 1 else "copies"
                head = f"{format_count(k, signed=True)} {what} of {format_bytes(nbytes)} per message"
                break
        # the bytes of the copy first, then what came with it
        ordered = sorted(group, key=lambda c: _COPY_EVIDENCE.index(c.counter) if c.counter in _COPY_EVIDENCE else 99)
        details = [f"{format_count(c.delta, signed=True)} {_word(c.counter, c.delta)}" for c in ordered]
        if head:
            lines.append(f"{who}: {head} ({', '.join(details)})")
        else:
            lines.append(f"{who}: " + "; ".join(_phrase(c.counter, c.delta) for c in group))
    return lines
