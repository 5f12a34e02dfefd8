"""Counter verdicts: what changed in the cost of a message between two results of one case.

:func:`counter_changes` is pure (two :class:`~.results.Result` in, a list out). An exact counter
(every repeat the same, on both sides) changes when its value per message differs at all
(bytes and the allocator's counters within a small tolerance): counts do not move with load. One
that is not exact, of two records whose repeats took the same turns (harness/count.py), changes
the same way when every turn moved alike. A statistical one changes only when the two spreads lie
apart by more than the wider of them and by half the larger value; it is a note, never a verdict.
The counters driven by timing (:data:`TIMING_COUNTERS`) are not compared across runs at all (A/A:
docs/counters.md). :func:`explain` says a case's changes in one line per rank, e.g.
``reader: +1 copy of 1.05 MB per message (+1,048,688 B allocated, +256 minor faults)``.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..core.counters import COUNTERS, Counters, RankCounters
from ..core.units import format_bytes, format_count, size_label
from ..results.results import Result

#: a change in words: (singular, plural) of what is counted, per message
_WORDS: dict[str, tuple[str, str]] = {
    "syscalls.total": ("system call", "system calls"),
    "syscalls.data": (
        "data system call (read/write/send/recv family)",
        "data system calls (read/write/send/recv family)",
    ),
    "syscalls.sync": ("futex call", "futex calls"),
    "syscalls.mapping": (
        "mapping system call (mmap/munmap/ftruncate...)",
        "mapping system calls (mmap/munmap/ftruncate...)",
    ),
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
    "alloc.bytes": ("B allocated", "B allocated"),
    "alloc.peak_bytes": ("B allocated (peak)", "B allocated (peak)"),
    "alloc.net_bytes": ("B kept allocated", "B kept allocated"),
}
# the counters that show a copy of the payload, in the order a copy's details are listed
# (the bytes allocated first: a copy of N bytes allocates N bytes whatever is freed before or after
# it, where the peak misses a copy made after a larger transient was freed: core/probes.AllocProbe)
_COPY_EVIDENCE = ("alloc.bytes", "alloc.peak_bytes", "faults.minor", "io.rchar", "io.wchar")
#: a byte counter's change is "k copies" when it is within this share of k payloads
COPY_TOLERANCE = 0.1
#: ... or within this many bytes (an object's header: a copied 1 KB ndarray allocates ~1.1 KB)
COPY_SLACK = 512
#: counters driven by timing (the scheduler, waits, wake-ups): not compared across runs (even when
#: a run's repeats agreed): across runs of identical code they did not (A/A runs, docs/counters.md)
TIMING_COUNTERS = frozenset({"ctx.voluntary", "ctx.involuntary", "syscalls.waiting", "syscalls.sync",
                             "syscalls.total", "syscalls.other"})
#: a statistical change must also exceed this share of the larger value (3 repeats understate a
#: spread: A/A runs flagged 48 statistical counters of 76 cases with the spreads alone)
STATISTICAL_TOLERANCE = 0.5
#: byte counters: exact within a run, yet a message's bytes may differ by a few between runs (mp-queue
#: pickles a growing sequence number: one byte more from 256 on); a change must exceed this many
#: bytes per message or this share of the value (a copy of a payload is far more)
BYTE_COUNTERS = frozenset({"io.rchar", "io.wchar", "pickle.dumps_bytes", "pickle.loads_bytes", "alloc.bytes",
                           "alloc.peak_bytes", "alloc.net_bytes"})
BYTE_TOLERANCE = (64, 0.01)
#: the allocation counters: the harness's own lists and dicts grow as it goes, and where a run's frees
#: fall between the probe's events moves what it counts by a grain or more in every turn alike
#: (A/A runs, docs/counters.md); a copy of a 1 KB payload is 1,000 B and more
ALLOC_COUNTERS = frozenset({"alloc.bytes", "alloc.peak_bytes", "alloc.net_bytes"})
ALLOC_TOLERANCE = (768, 0.01)
#: counters of the allocator's state, not of the message: glibc's malloc takes a block of 128 KiB or
#: more from mmap below a threshold that it raises when such a block is freed (its "dynamic mmap
#: threshold") and trims the heap as its top grows, so whether a message's buffer comes from a
#: fresh mapping (a mapping call and one fault per page) or from reused heap depends on what the
#: process freed before. Exact within a run, they moved between runs of identical code (lmdb 1 MB
#: dicts: +-25 minor faults and 1 mapping call per message on one reader; docs/counters.md). A change
#: counts when it is at least this many per message and above this share of the larger value: a
#: copy of a payload of a page or more is a fault per page and shows anyway in the allocation peak.
ALLOCATOR_COUNTERS = frozenset({"faults.minor", "syscalls.mapping"})
ALLOCATOR_TOLERANCE = (1.0, 0.1)


@dataclass(frozen=True)
class CounterChange:
    """One counter of one rank that changed between base and head (values per message)."""

    key: str  # the case (Result.key)
    role: str  # writer | reader
    rank: int
    counter: str
    base: int | float
    head: int | float
    exact: bool  # exact on both sides, or alike in every turn: a verdict; else against the spreads
    text: str  # the change in words, e.g. "reader: +1 data system call ... per message"
    readers: int = 0  # a reader's change: how many readers its value is the mean of

    @property
    def delta(self) -> float:
        return self.head - self.base

    @property
    def regression(self) -> bool:
        """An exact counter that grew: the message costs more work that the code asked for.

        compare and the gate exit 1 on it, whatever the times say (counts do not move with load:
        A/A runs, docs/counters.md). Statistical changes and decreases are notes only."""
        return self.exact and self.delta > 0


def readers_mean(ranks: list[RankCounters]) -> RankCounters:
    """The readers as one: per repeat the sum of their totals, over their messages, so that its
    value is the mean per reader and message. Readers are symmetric: which of them comes first
    and pays a first touch (lmdb's 1 MB dicts: one reader 26 minor faults and one mapping call
    per message fewer, another 26 more, the sum over the readers identical to the fault, in two
    runs of identical code) is timing, not the code; their mean is what the code costs."""
    if len(ranks) == 1:
        return ranks[0]
    names = set(ranks[0].totals).intersection(*(r.totals for r in ranks[1:]))
    absent: dict[str, str] = {}
    for r in ranks:
        absent.update(r.absent)
    totals = {n: [sum(t) for t in zip(*(r.totals[n] for r in ranks))] for n in names if n not in absent}
    return RankCounters(ranks[0].rank, "reader", totals, sum(r.messages for r in ranks), absent)


def _pairs(base: Counters, head: Counters) -> list[tuple[RankCounters, RankCounters, int]]:
    """(base, head, readers): the writer, and the readers as their mean (:func:`readers_mean`);
    ``readers`` is how many readers the mean is of (0 for the writer)."""
    out: list[tuple[RankCounters, RankCounters, int]] = []
    for role in ("writer", "reader"):
        b = [r for r in base.ranks if r.role == role]
        h = [r for r in head.ranks if r.role == role]
        if role == "writer":
            out.extend((x, y, 0) for x, y in zip(b, h))
        elif b and len(b) == len(h):
            out.append((readers_mean(b), readers_mean(h), len(b)))
    return out


def _who(role: str, readers: int) -> str:
    return f"readers (mean of {readers})" if readers > 1 else role


def _word(counter: str, delta: float) -> str:
    one, many = _WORDS.get(counter, (counter, counter))
    return one if abs(delta) == 1 else many


def _phrase(counter: str, delta: float) -> str:
    return f"{format_count(delta, signed=True)} {_word(counter, delta)} per message"


def _byte_tolerance(a: float, b: float, name: str = "") -> float:
    least, share = ALLOC_TOLERANCE if name in ALLOC_COUNTERS else BYTE_TOLERANCE
    return max(least, share * max(abs(a), abs(b)))


def _exact(rank: RankCounters, name: str) -> bool:
    """Exact over the repeats; a byte counter within its tolerance too: the allocation peak moves
    by a few bytes between repeats (the harness's own lists and dicts grow), far below a copy."""
    if rank.exact(name):
        return True
    if name not in BYTE_COUNTERS:
        return False
    lo, hi = rank.spread(name)
    return hi - lo <= _byte_tolerance(lo, hi, name)


def counter_changes(base: Result, head: Result, timing: bool = False) -> list[CounterChange]:
    """The counters of ``head`` that differ from ``base`` (the same case), each in words.

    Exact counters are compared exactly (a change of less than one per message, over all the
    readers, is a note: ``exact`` False); so are those that moved alike in every turn of records
    with the same turns (:func:`_turn_shift`); statistical ones (the rest) against their measured
    spread: a change when the spreads are apart by more than the wider one. Counters
    absent on either side, and ranks without a partner (other rank counts), are not compared;
    nor are :data:`TIMING_COUNTERS` and the backend's own (``Counters.timing``) unless ``timing`` (then
    as statistical ones), nor the allocation
    counters of two records counted by different methods.
    Raises ValueError when the results are of different cases.
    """
    if base.key != head.key:
        raise ValueError(f"counter_changes compares one case; got {base.key!r} and {head.key!r}")
    if base.counters is None or head.counters is None:
        return []
    changes = []
    # the allocation counters of records counted by two methods (core/counters.ALLOC_METHOD) differ by
    # the method: not compared
    other_method = base.counters.alloc_method != head.counters.alloc_method
    timed = TIMING_COUNTERS.union(base.counters.timing, head.counters.timing)  # and the backend's own
    turns = bool(base.counters.turns) and base.counters.turns == head.counters.turns
    for b, h, readers in _pairs(base.counters, head.counters):
        for name in COUNTERS:
            if not (b.has(name) and h.has(name)) or (name in timed and not timing) or (
                    other_method and name in ALLOC_COUNTERS):
                continue
            exact = _exact(b, name) and _exact(h, name) and name not in timed
            bv, hv = b.value(name), h.value(name)
            delta: float = hv - bv
            spread = 0.0
            if exact and name in BYTE_COUNTERS:  # plus the wider spread of the two (within the tolerance)
                spread = max(b.spread(name)[1] - b.spread(name)[0], h.spread(name)[1] - h.spread(name)[0])
            elif not exact and turns and name not in timed:
                shift = _turn_shift(b, h, name, bv, hv)
                if shift is not None:  # every turn moved alike: the code's cost, not timing
                    exact, (delta, spread) = True, shift
            if exact and name in BYTE_COUNTERS:
                changed = abs(delta) > _byte_tolerance(bv, hv, name) + spread
            elif exact and name in ALLOCATOR_COUNTERS:
                changed = abs(delta) >= ALLOCATOR_TOLERANCE[0] and \
                    abs(delta) > ALLOCATOR_TOLERANCE[1] * max(abs(bv), abs(hv))
            elif exact:
                changed = delta != 0
                # less than one call per message (over all readers): something that happens on
                # some messages only (zmq's I/O thread signalling a wake-up: 26.25 and 26 data
                # calls per message in two A/A runs) is timing or state, not the code: a note
                if changed and abs(delta) * max(1, readers) < 1:
                    exact = False
            else:
                (blo, bhi), (hlo, hhi) = b.spread(name), h.spread(name)
                margin = max(bhi - blo, hhi - hlo, STATISTICAL_TOLERANCE * max(abs(bv), abs(hv)))
                changed = hlo > bhi + margin or hhi < blo - margin
            if changed:
                text = f"{_who(b.role, readers)}: {_phrase(name, delta)}"
                if not exact and _exact(b, name) and _exact(h, name):
                    text += f" (on some messages only: {format_count(bv)} -> {format_count(hv)}, a note)"
                elif not exact:
                    text += f" (statistical: {format_count(bv)} -> {format_count(hv)}, spreads apart)"
                head_value = hv if delta == hv - bv else bv + delta  # by the turns: the base's plus their shift
                changes.append(CounterChange(head.key, b.role, b.rank, name, bv, head_value, exact, text, readers))
    return changes


def _turn_shift(b: RankCounters, h: RankCounters, name: str, bv: float, hv: float) -> tuple[float, float] | None:
    """(the median of head - base per message, turn by turn; the range of those differences) when
    the turns agree on it (docs/counters.md, "Counts that follow timing"): a count within a
    run moved by the turns (a wait that allocates) is still compared, its turns against the same
    turns. None when they disagree (the count follows what the turns do not hold: a note at most)."""
    bt, ht = b.totals[name], h.totals[name]
    if len(bt) != len(ht) or not bt:
        return None
    d = sorted(y / h.messages - x / b.messages for x, y in zip(bt, ht))
    width = d[-1] - d[0]
    if name in BYTE_COUNTERS:
        agree = width <= _byte_tolerance(bv, hv, name)
    elif name in ALLOCATOR_COUNTERS:
        agree = width < ALLOCATOR_TOLERANCE[0]
    else:
        agree = width == 0
    return (d[len(d) // 2], width) if agree else None


def explain(changes: list[CounterChange], nbytes: int) -> list[str]:
    """One line per role (the writer; the readers, as their mean): a change of about k payloads in
    the allocation peak (or in the bytes through the kernel) reads as "+k copies of <size>", the
    other counters follow in brackets.

    ``nbytes``: the payload's bytes (``Result.nbytes``).
    """
    by_role: dict[str, list[CounterChange]] = {}
    for c in changes:
        by_role.setdefault(c.role, []).append(c)
    lines = []
    for role, group in by_role.items():
        who = _who(role, group[0].readers)
        parts = {c.counter: c for c in group}
        head = ""
        for name in _COPY_EVIDENCE:
            change = parts.get(name)
            if change is None or not nbytes or name == "faults.minor":
                continue
            k = round(change.delta / nbytes)
            if k and abs(change.delta - k * nbytes) <= max(COPY_TOLERANCE * abs(k) * nbytes, COPY_SLACK):
                what = "copy" if abs(k) == 1 else "copies"
                head = f"{format_count(k, signed=True)} {what} of {payload_size(nbytes)} per message"
                break
        # the bytes of the copy first, then what came with it
        ordered = sorted(group, key=lambda c: _COPY_EVIDENCE.index(c.counter) if c.counter in _COPY_EVIDENCE else 99)
        details = [f"{format_count(c.delta, signed=True)} {_word(c.counter, c.delta)}" for c in ordered]
        # a named call first: a pickle round trip allocates copies of its own
        head = _calls(parts) or head
        if head:
            lines.append(f"{who}: {head} ({', '.join(details)})")
        else:
            lines.append(f"{who}: " + "; ".join(_phrase(c.counter, c.delta) for c in group))
    return lines


def payload_size(nbytes: int) -> str:
    """A payload's size as its case names it, ``1 MiB``, ``1 MB``, ``64 KiB``; else ``2.41 KB``."""
    label = size_label(nbytes)
    number = label.rstrip("KMGTiB")
    if label.endswith("B") and label != f"{nbytes}B" and number:
        return f"{number} {label[len(number):]}"
    return format_bytes(nbytes)


def _calls(parts: dict[str, CounterChange]) -> str:
    """What a group of changes of one rank adds up to, named as the call the code makes:
    "+1 write system call" (a data call that /proc/self/io counts as a write), "+1 pickle round
    trip" (as many dumps as loads); "" when the changes name no such thing."""
    data, syscw, syscr = (parts.get(n) for n in ("syscalls.data", "io.syscw", "io.syscr"))
    dumps, loads = parts.get("pickle.dumps"), parts.get("pickle.loads")
    if dumps is not None and loads is not None and dumps.delta == loads.delta:
        k = dumps.delta
        trips = "trip" if abs(k) == 1 else "trips"
        return f"{format_count(k, signed=True)} pickle round {trips} (dumps and loads) per message"
    for io, what in ((syscw, "write"), (syscr, "read")):
        if data is not None and io is not None and data.delta == io.delta:
            k = data.delta
            return f"{format_count(k, signed=True)} {what} system {'call' if abs(k) == 1 else 'calls'} per message"
    return ""


@dataclass(frozen=True)
class CounterVerdict:
    """The counters of one case compared: the lines shown beside its time verdict, how many
    counters changed, and the lines of the ranks whose exact counters grew (a regression)."""

    lines: list[str]
    changes: int
    regressions: list[str]


def counter_verdict(base: Result, head: Result) -> CounterVerdict | None:
    """One case's counter verdict for compare and the gate; None when either side was not counted.

    ``lines``: :func:`explain` of every change, or ``["no counter moved"]``; ``regressions``:
    :func:`explain` of the exact increases alone (they set exit 1)."""
    if base.counters is None or head.counters is None:
        return None
    if base.counters.messages != head.counters.messages:  # per-message figures of a backend that batches
        # or numbers its messages depend on how many were counted: versions that count differently
        return CounterVerdict([f"counters not compared: base counted {base.counters.messages} messages a repeat, "
                               f"head {head.counters.messages} (versions that count differently)"], 0, [])
    changes = counter_changes(base, head)
    lines = explain(changes, head.nbytes) if changes else ["no counter moved"]
    worse = [c for c in changes if c.regression]
    return CounterVerdict(lines, len(changes), explain(worse, head.nbytes) if worse else [])


def regression_line(costlier: list[tuple[str, list[str]]], shown: int = 3) -> str:
    """The verdict line's part about counters: the cases whose exact counters grew, with the first
    explanation of each (""  when none did)."""
    if not costlier:
        return ""
    first = "; ".join(f"{key}: {lines[0]}" for key, lines in costlier[:shown])
    more = f"; and {len(costlier) - shown} more" if len(costlier) > shown else ""
    return (f"{len(costlier)} case(s) cost more per message in exact counters "
            f"(whatever the load): {first}{more}")
