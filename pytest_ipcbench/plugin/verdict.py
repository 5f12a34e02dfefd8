"""Collective verdicts: every MPI rank reports each test phase the same way.

After each phase of each test the ranks exchange their outcome: a failure anywhere fails the
phase everywhere, naming the failing ranks; a skip or expected failure anywhere is one
everywhere. All waiting goes through :class:`WorldChannel`, non-blocking requests polled with
short sleeps: MPICH's blocking collectives spin and steal the CPU when ranks outnumber cores.
"""

from __future__ import annotations

import contextlib
import os
import pickle
import time
from array import array
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ..core.errors import IpcbenchError

POLL_S = 0.0005
LONG_TEXT_LIMIT = 4000  # characters of a failing rank's report shown by the others
SHORT_TEXT_LIMIT = 300


class WorldChannel:
    """Non-blocking exchanges among all ranks, over a private duplicate of the world."""

    def __init__(self, comm: Any, poll: float = POLL_S) -> None:
        self.comm = comm
        self.rank: int = comm.Get_rank()
        self.size: int = comm.Get_size()
        self.poll = poll

    @classmethod
    def open(cls, comm: Any, poll: float = POLL_S) -> WorldChannel:
        """Duplicate ``comm`` (non-blocking, so a late rank does not make the others spin)."""
        dup, request = comm.Idup()
        cls._wait(request, poll)
        return cls(dup, poll)

    @staticmethod
    def _wait(request: Any, poll: float) -> None:
        while not request.Test():
            time.sleep(poll)

    def allgather(self, obj: Any) -> list[Any]:
        """Every rank's ``obj`` (picklable), by rank: lengths first, then the bytes."""
        from mpi4py import MPI

        data = pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)
        mine = array("q", [len(data)])
        lengths = array("q", [0] * self.size)
        self._wait(self.comm.Iallgather([mine, MPI.INT64_T], [lengths, MPI.INT64_T]), self.poll)
        counts = list(lengths)
        displs = [sum(counts[:i]) for i in range(self.size)]
        recv = bytearray(max(1, sum(counts)))
        self._wait(
            self.comm.Iallgatherv([data, MPI.BYTE], [recv, (counts, displs), MPI.BYTE]),
            self.poll,
        )
        view = memoryview(recv)
        return [pickle.loads(view[d : d + c]) for d, c in zip(displs, counts)]

    def close(self) -> None:
        if self.comm is not None:
            with contextlib.suppress(Exception):
                self.comm.Free()
            self.comm = None


# ------------------------------------------------------------------------------ outcomes


@dataclass(frozen=True)
class RankOutcome:
    """What one rank says about one phase of one test."""

    rank: int
    outcome: str  # "passed", "failed", "skipped"
    idle: bool = False  # outside the test's group: its skip does not count
    xfail: str | None = None  # the xfail reason when the failure was expected
    short: str = ""  # one line: the error (or skip reason)
    long: str = ""  # the report text, truncated
    nodeid: str = ""
    phase: str = ""


def short_error(report: Any) -> str:
    """One line for a report: ``AssertionError: assert 2 != 2 (test_x.py:7)`` or a skip reason."""
    longrepr = report.longrepr
    if isinstance(longrepr, tuple) and len(longrepr) == 3:
        text = str(longrepr[2])
        return text.removeprefix("Skipped: ")[:SHORT_TEXT_LIMIT]
    crash = getattr(longrepr, "reprcrash", None)
    if crash is not None and getattr(crash, "message", None):
        first = str(crash.message).strip().splitlines()[0] if str(crash.message).strip() else "error"
        where = f" ({os.path.basename(str(crash.path))}:{crash.lineno})" if getattr(crash, "path", None) else ""
        return (first[: SHORT_TEXT_LIMIT - len(where)] + where).strip()
    lines = [line for line in str(longrepr or "").strip().splitlines() if line.strip()]
    return (lines[-1] if lines else report.outcome)[:SHORT_TEXT_LIMIT]


def outcome_of(report: Any, rank: int, idle: bool = False) -> RankOutcome:
    failed = report.outcome == "failed"
    xfail = getattr(report, "wasxfail", None)
    expected = report.outcome == "skipped" and xfail is not None
    text = ""
    if failed or expected:
        text = report.longreprtext
        if len(text) > LONG_TEXT_LIMIT:
            text = "...\n" + text[-LONG_TEXT_LIMIT:]
    return RankOutcome(
        rank=rank,
        outcome=report.outcome,
        idle=idle,
        xfail=xfail if expected else None,
        short=short_error(report) if report.outcome != "passed" else "",
        long=text,
        nodeid=report.nodeid,
        phase=report.when,
    )


@dataclass(frozen=True)
class Verdict:
    """The outcome every rank adopts for a phase."""

    outcome: str  # "passed", "failed", "xfailed", "skipped"
    ranks: tuple[int, ...] = ()  # the ranks that decided it (failed / xfailed / skipped ones)


def decide(outcomes: Sequence[RankOutcome]) -> Verdict:
    """Failed anywhere > expected failure anywhere > skipped on a rank of the group > passed."""
    for outcome, counts in (("failed", lambda o: o.outcome == "failed"), ("xfailed", lambda o: o.xfail is not None),
                            ("skipped", lambda o: o.outcome == "skipped" and not o.idle)):
        ranks = tuple(o.rank for o in outcomes if counts(o))
        if ranks:
            return Verdict(outcome, ranks)
    return Verdict("passed")


def failure_text(outcomes: Sequence[RankOutcome], ranks: Sequence[int], size: int, phase: str) -> str:
    """The message every rank shows for ranks that failed: one line each, then their reports."""
    by_rank = {o.rank: o for o in outcomes}
    names = ", ".join(str(r) for r in ranks)
    lines = [f"ipcbench: {phase} failed on rank {names} of {size}:"]
    lines += [f"  rank {r}: {by_rank[r].short or 'failed'}" for r in ranks]
    for r in ranks:
        if by_rank[r].long:
            lines += ["", f"---------------- rank {r} ----------------", by_rank[r].long.rstrip()]
    return "\n".join(lines)


@dataclass
class _Crash:
    path: str
    lineno: int
    message: str


class RankFailureRepr:
    """A report body for a phase that failed on other ranks (prints like a failure, has a crash line)."""

    def __init__(self, text: str, message: str, path: str, lineno: int) -> None:
        self.text = text
        self.reprcrash = _Crash(path, lineno, message)

    def toterminal(self, tw: Any) -> None:
        for line in self.text.splitlines():
            tw.line(line)

    def __str__(self) -> str:
        return self.text


def apply(report: Any, verdict: Verdict, outcomes: Sequence[RankOutcome], me: RankOutcome, size: int) -> None:
    """Make ``report`` (this rank's) say what the verdict says."""
    path, lineno = str(report.location[0]), int(report.location[1] or 0) + 1
    first = {o.rank: o for o in outcomes}[verdict.ranks[0]] if verdict.ranks else me
    if verdict.outcome == "failed":
        others = [r for r in verdict.ranks if r != me.rank]
        if me.outcome == "failed":
            if others:
                report.sections.append(
                    (f"ipcbench: also failed on rank {', '.join(map(str, others))}",
                     failure_text(outcomes, others, size, report.when))
                )
            return
        text = failure_text(outcomes, verdict.ranks, size, report.when)
        ranks = ", ".join(map(str, verdict.ranks))
        message = f"failed on rank {ranks}: {first.short or 'failed'}"
        report.outcome = "failed"
        report.longrepr = RankFailureRepr(text, message, path, lineno)
        if hasattr(report, "wasxfail"):
            del report.wasxfail
        return
    if verdict.outcome == "xfailed":
        if me.xfail is None and not me.idle and report.outcome == "passed":
            report.outcome = "skipped"
            report.wasxfail = f"{first.xfail} (failed as expected on rank {', '.join(map(str, verdict.ranks))})"
            report.longrepr = (path, lineno, f"XFAIL on rank {first.rank}: {first.short}")
        return
    if verdict.outcome == "skipped":
        if report.outcome == "passed" and not me.idle:
            report.outcome = "skipped"
            report.longrepr = (path, lineno, f"Skipped: on rank {first.rank}: {first.short}")


def exchange_and_apply(channel: WorldChannel, report: Any, idle: bool) -> Verdict:
    """Exchange this rank's outcome of a phase with every rank and apply the collective verdict."""
    me = outcome_of(report, channel.rank, idle)
    outcomes: list[RankOutcome] = channel.allgather(me)
    check_same_phase(outcomes)
    verdict = decide(outcomes)
    apply(report, verdict, outcomes, me, channel.size)
    return verdict


def idle_call(channel: WorldChannel, nodeid: str) -> tuple[Verdict, list[RankOutcome]]:
    """An idle rank's share of the call-phase exchange (it runs no body, the others do)."""
    me = RankOutcome(rank=channel.rank, outcome="passed", idle=True, nodeid=nodeid, phase="call")
    outcomes: list[RankOutcome] = channel.allgather(me)
    check_same_phase(outcomes)
    return decide(outcomes), outcomes


class OutOfStep(IpcbenchError, RuntimeError):
    """The ranks are not at the same phase of the same test: every rank must run the same tests."""


def check_same_phase(outcomes: Sequence[RankOutcome]) -> None:
    where = {(o.nodeid, o.phase) for o in outcomes}
    if len(where) > 1:
        detail = "; ".join(f"rank {o.rank}: {o.phase} of {o.nodeid}" for o in outcomes)
        raise OutOfStep(f"ipcbench: the ranks are out of step ({detail})")
