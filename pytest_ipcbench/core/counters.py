"""What a message costs in counts: the counters' names, and the record of them per rank.

docs/method.md rule 20. The counters are measured by :mod:`.probes` (getrusage, /proc, pickle,
tracemalloc) and :mod:`.syscalls` (the kernel's own count of system calls); a counter that could
not be measured is absent with the reason (:class:`CounterAbsent`), never 0.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

from .errors import IpcbenchError
from .syscalls import SYSCALL_CLASSES

RUSAGE_COUNTERS = ("faults.minor", "faults.major", "ctx.voluntary", "ctx.involuntary")
IO_COUNTERS = ("io.rchar", "io.wchar", "io.syscr", "io.syscw")
PICKLE_COUNTERS = ("pickle.dumps", "pickle.dumps_bytes", "pickle.loads", "pickle.loads_bytes")
SYSCALL_COUNTERS = ("syscalls.total", *(f"syscalls.{c}" for c in SYSCALL_CLASSES), "syscalls.other")
ALLOC_COUNTERS = ("alloc.bytes", "alloc.peak_bytes", "alloc.net_bytes")
#: deep mode's counters (harness/deep.py, opt-in): bytes and calls of memcpy-like copies (valgrind's
#: DHAT in copy mode) and instructions executed (callgrind's Ir), every thread of the process
DEEP_COUNTERS = ("copied.bytes", "copied.calls", "instructions")
#: how the allocation counters were counted; compare and the gate compare them only between records
#: of one method. 1 (records without the field): every iteration of a repeat traced, line events in
#: the standard library; 2: one traced iteration a repeat, scaled (harness/count.py), no line events
#: in the standard library (core/probes.AllocProbe); how far apart they are: docs/counters.md
ALLOC_METHOD = 2
#: every counter, in the order reports show them
COUNTERS = (*SYSCALL_COUNTERS, *IO_COUNTERS, *RUSAGE_COUNTERS, *PICKLE_COUNTERS, *ALLOC_COUNTERS, *DEEP_COUNTERS)


class CounterAbsent(IpcbenchError, LookupError):
    """A counter that was not measured here; the message says why."""


def _number(x: Fraction) -> int | float:
    return int(x) if x.denominator == 1 else float(x)


@dataclass
class RankCounters:
    """One rank's counts of a case: per repeat, the message phase minus the barrier-only phase.

    ``rank.value("syscalls.data")`` or ``rank.syscalls_data`` is the count per message: exact
    (an int where the division is whole, ``totals/messages``) when every repeat gave the same
    total, else the median repeat's. ``exact(name)`` and ``spread(name)`` say which.
    """

    rank: int
    role: str  # "writer" or "reader" (ping-pong: rank 0 writes, rank 1 echoes: "reader")
    totals: dict[str, list[int]]
    messages: int  # messages per repeat
    absent: dict[str, str] = field(default_factory=dict)
    #: messages per repeat of the deep counters (DEEP_COUNTERS), which deep mode counts in runs of
    #: its own with another message count; 0 when they were not counted
    deep_messages: int = 0

    def _messages(self, name: str) -> int:
        return max(1, self.deep_messages if name in DEEP_COUNTERS and self.deep_messages else self.messages)

    def _totals(self, name: str) -> list[int]:
        if name in self.absent:
            raise CounterAbsent(f"{name} of rank {self.rank} ({self.role}) is absent: {self.absent[name]}")
        if name not in self.totals:
            if name in COUNTERS:  # a record made without it (another version)
                raise CounterAbsent(f"{name} of rank {self.rank} ({self.role}) was not counted")
            raise KeyError(f"no counter {name!r}; counters are {', '.join(COUNTERS)}")
        return self.totals[name]

    def value(self, name: str) -> int | float:
        """Per message: exact where the repeats agree, else the median repeat's."""
        totals = sorted(self._totals(name))
        return _number(Fraction(totals[len(totals) // 2], self._messages(name)))

    def exact(self, name: str) -> bool:
        """Whether every repeat counted the same total (measured, not assumed)."""
        totals = self._totals(name)
        return all(t == totals[0] for t in totals)

    def spread(self, name: str) -> tuple[int | float, int | float]:
        """(min, max) per message over the repeats."""
        totals = self._totals(name)
        m = self._messages(name)
        return _number(Fraction(min(totals), m)), _number(Fraction(max(totals), m))

    def has(self, name: str) -> bool:
        return name in self.totals and name not in self.absent

    def __getattr__(self, attr: str) -> int | float:
        # rank.pickle_dumps -> value("pickle.dumps"); only names of COUNTERS
        if not attr.startswith("_"):
            name = _ATTRS.get(attr)
            if name is not None:
                return self.value(name)
        raise AttributeError(f"{type(self).__name__} has no attribute {attr!r}")

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {"rank": self.rank, "role": self.role, "messages": self.messages,
                             "totals": self.totals, "absent": self.absent}
        if self.deep_messages:
            d["deep_messages"] = self.deep_messages
        # derived, for readers of the file (never read back)
        names = [n for n in self.totals if n not in self.absent]
        d["per_message"] = {n: self.value(n) for n in names}
        d["exact"] = {n: self.exact(n) for n in names}
        d["spread"] = {n: list(self.spread(n)) for n in names if not self.exact(n)}
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> RankCounters:
        return cls(int(d["rank"]), str(d["role"]), {k: [int(x) for x in v] for k, v in d["totals"].items()},
                   int(d["messages"]), dict(d.get("absent") or {}), int(d.get("deep_messages") or 0))


_ATTRS = {n.replace(".", "_"): n for n in COUNTERS}


@dataclass
class Counters:
    """The counting pass of one case: every counted rank, and how it was counted.

    ``counters.writer.pickle_dumps``, ``counters.reader.syscalls_data`` (the first reader;
    ``counters.readers`` has them all), ``counters.cost("reader", "io.rchar")`` (the largest over
    the readers, as completion is the slowest reader).
    """

    ranks: list[RankCounters]
    iterations: int  # per repeat
    messages_per_iteration: int  # 1; a stream's window
    repeats: int
    # seconds rank 0 spent in the pass: the kernel counters' repeats, then the tracemalloc pass
    # (what the pass costs a run: docs/counters.md, "Cost")
    seconds: tuple[float, float] = (0.0, 0.0)
    alloc_method: int = ALLOC_METHOD
    #: counters the backend's own threads make depend on timing (Backend.timing_counters): never
    #: compared across runs
    timing: tuple[str, ...] = ()
    #: each repeat's turn (harness/count.py TURNS: "as run", "writes late", "reads late"); empty in
    #: records made before the turns: such repeats are compared only where they agree
    turns: tuple[str, ...] = ()

    @property
    def messages(self) -> int:
        return self.iterations * self.messages_per_iteration

    @property
    def writer(self) -> RankCounters:
        return self._role("writer")[0]

    @property
    def readers(self) -> list[RankCounters]:
        return self._role("reader")

    @property
    def reader(self) -> RankCounters:
        return self._role("reader")[0]

    def _role(self, role: str) -> list[RankCounters]:
        if role not in ("writer", "reader"):
            raise ValueError(f"role must be 'writer' or 'reader', not {role!r}")
        found = [r for r in self.ranks if r.role == role]
        if not found:
            raise CounterAbsent(f"no {role} was counted")
        return found

    def cost(self, role: str, name: str) -> int | float:
        """Per message, for ``role``: the writer's, or the largest over the readers."""
        return max(r.value(name) for r in self._role(role))

    def exact(self, role: str, name: str) -> bool:
        return all(r.exact(name) for r in self._role(role))

    def per_role(self, names: tuple[str, ...] | list[str]) -> dict[str, dict[str, int | float]]:
        """{role: {counter: :meth:`cost`}} for the roles counted and the counters measured (an
        absent one is left out, never 0): a compact record, e.g. beside a reference's."""
        out: dict[str, dict[str, int | float]] = {}
        for role in ("writer", "reader"):
            if not any(r.role == role for r in self.ranks):
                continue
            values = {}
            for name in names:
                try:
                    values[name] = self.cost(role, name)
                except (CounterAbsent, KeyError):
                    continue
            out[role] = values
        return out

    def to_dict(self) -> dict[str, Any]:
        return {"iterations": self.iterations, "messages_per_iteration": self.messages_per_iteration,
                "repeats": self.repeats, "seconds": [round(x, 4) for x in self.seconds],
                "alloc_method": self.alloc_method, **({"timing": list(self.timing)} if self.timing else {}),
                **({"turns": list(self.turns)} if self.turns else {}),
                "ranks": [r.to_dict() for r in self.ranks]}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Counters:
        seconds = d.get("seconds")
        kept = (0.0, 0.0)  # informative only: never trusted
        if isinstance(seconds, list) and len(seconds) == 2 and all(
                isinstance(x, (int, float)) and not isinstance(x, bool) and 0 <= x < 1e9 for x in seconds):
            kept = (float(seconds[0]), float(seconds[1]))
        timing, turns = d.get("timing") or (), d.get("turns") or ()
        return cls([RankCounters.from_dict(r) for r in d["ranks"]], int(d["iterations"]),
                   int(d["messages_per_iteration"]), int(d["repeats"]), kept, int(d.get("alloc_method") or 1),
                   tuple(str(n) for n in timing if n in COUNTERS) if isinstance(timing, list) else (),
                   tuple(str(t) for t in turns) if isinstance(turns, list) else ())
