"""The counters in the report: a "cost per message" table (summary.md) and counters.csv.

A value is per message: plain where the counter was exact (every repeat the same), ``~`` and
the median repeat's where it was statistical (counters.csv has its spread); ``n/a`` where the
source was missing here (the reasons are listed under the table).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..core.counters import COUNTERS, DEEP_COUNTERS, CounterAbsent, Counters
from ..core.units import format_count, size_label
from ..results.results import Result
from .common import backend_order, kind_order, table

#: the table's columns: (heading, counter)
COLUMNS = (
    ("syscalls", "syscalls.total"), ("data", "syscalls.data"), ("sync", "syscalls.sync"),
    ("mapping", "syscalls.mapping"), ("waiting", "syscalls.waiting"), ("read B", "io.rchar"),
    ("written B", "io.wchar"), ("minor faults", "faults.minor"), ("dumps", "pickle.dumps"),
    ("loads", "pickle.loads"), ("alloc B", "alloc.bytes"), ("alloc peak B", "alloc.peak_bytes"),
)
#: deep mode's columns (valgrind, harness/deep.py), shown when some case has them
DEEP_COLUMNS = (("copied B", "copied.bytes"), ("copies", "copied.calls"), ("instructions", "instructions"))


def _has_deep(c: Counters) -> bool:
    return any(n in x.totals or n in x.absent for x in c.ranks for n in DEEP_COUNTERS)


REFERENCE_PREFIX = "ref-"  # a reference backend's name: ref-<backend> (backends/references.py)


def _sorted(results: Sequence[Result]) -> list[Result]:
    """Counted results in table order; a reference (``ref-zmq``) right under its backend's rows, so
    an overhead reads off in counts."""
    def key(r: Result) -> tuple[Any, ...]:
        base = r.backend.removeprefix(REFERENCE_PREFIX)
        return (r.scenario, kind_order(r.payload), r.size, backend_order(base), r.mode, r.ranks,
                r.backend.startswith(REFERENCE_PREFIX))
    return sorted((r for r in results if r.counters is not None), key=key)


def cell(c: Counters, role: str, name: str) -> str:
    """One role's value: the writer's, or the largest over the readers."""
    try:
        value = c.cost(role, name)
    except CounterAbsent:
        return "n/a"
    return format_count(value) if c.exact(role, name) else "~" + format_count(value)


def cost_section(results: Sequence[Result]) -> list[str]:
    """The "cost per message" section of summary.md (no lines when nothing was counted)."""
    counted = _sorted(results)
    if not counted:
        return []
    columns = COLUMNS + (DEEP_COLUMNS if any(_has_deep(r.counters) for r in counted if r.counters) else ())
    rows = []
    reasons: set[str] = set()  # why a counter is n/a
    for r in counted:
        c = r.counters
        assert c is not None
        for role in ("writer", "reader"):
            ranks = [x for x in c.ranks if x.role == role]
            if not ranks:
                continue
            reasons.update(why for x in ranks for why in x.absent.values())
            rows.append([r.scenario, f"{r.backend}/{r.mode}", f"{r.payload}-{size_label(r.size)} r{r.ranks}", role,
                         *[cell(c, role, name) for _, name in columns]])
    out = ["## Cost per message (counted apart from the timing)", "",
           "Per message and rank: system calls (all threads, by class), bytes through the kernel's "
           "read and write calls, page faults, pickle calls, the allocation peak (tracemalloc). A plain "
           "number was exact (the same in every repeat); `~` marks a statistical one (median repeat; "
           "the spread is in counters.csv). Readers: the largest over the readers. The harness's own "
           "barrier is subtracted. A reference (`ref-<backend>`, the plain use of the mechanism: "
           "`ipcbench run --backends zmq,ref-zmq --count`) is listed under its backend."
           + (" Copied B, copies and instructions: deep mode (`--deep`, valgrind's DHAT "
              "and callgrind; every thread; docs/counters.md)." if columns != COLUMNS else ""),
           "",
           table(["Scenario", "Backend", "Case", "Rank", *[h for h, _ in columns]], rows, "llll" + "r" * len(columns)),
           ""]
    if reasons:
        out += ["Not measured here (n/a):", ""] + [f"- {why}" for why in sorted(reasons)] + [""]
    return out


def counter_rows(results: Sequence[Result]) -> list[dict[str, Any]]:
    """counters.csv: one row per case, rank and counter (values per message)."""
    rows: list[dict[str, Any]] = []
    for r in _sorted(results):
        c = r.counters
        assert c is not None
        for x in c.ranks:
            for name in COUNTERS:
                deep = name in DEEP_COUNTERS
                if deep and name not in x.totals and name not in x.absent:
                    continue  # deep mode is opt-in: no row for a case it did not run on
                row: dict[str, Any] = {
                    "key": r.key, "scenario": r.scenario, "backend": r.backend, "mode": r.mode,
                    "payload": r.payload, "size": r.size, "ranks": r.ranks, "rank": x.rank, "role": x.role,
                    "counter": name, "messages": x.deep_messages if deep and x.deep_messages else x.messages,
                    "repeats": c.repeats,
                }
                if x.has(name):
                    lo, hi = x.spread(name)
                    row.update(per_message=x.value(name), exact=x.exact(name), min=lo, max=hi, absent="")
                else:
                    row.update(per_message=None, exact=None, min=None, max=None,
                               absent=x.absent.get(name, "not counted"))
                rows.append(row)
    return rows


#: what ``ipcbench run`` shows per case (exact counters only)
RUN_NOTE = (("syscalls", "syscalls.total"), ("data", "syscalls.data"), ("faults", "faults.minor"),
            ("dumps", "pickle.dumps"), ("loads", "pickle.loads"))


def run_note(result: Result) -> str:
    """The counters of a case on ``ipcbench run``'s progress line: per message, the exact ones
    only (what a verdict compares exactly), e.g. ``writer syscalls 0 data 0 dumps 1 | reader ...``."""
    c = result.counters
    if c is None:
        return ""
    out = []
    for role in ("writer", "reader"):
        if not any(x.role == role for x in c.ranks):
            continue
        parts = []
        for heading, name in RUN_NOTE:
            try:
                if c.exact(role, name):
                    parts.append(f"{heading} {format_count(c.cost(role, name))}")
            except CounterAbsent:
                continue
        if parts:
            out.append(f"{role} " + " ".join(parts))
    return " | ".join(out)
