"""The advice as a record: what was picked, against what, by how much, why, and on what.

:class:`Advice` is what ``pytest_ipcbench.advise`` returns and ``ipcbench advise --json`` writes
(schema ``pytest-ipcbench-advice`` version 1, docs/advise.md); :meth:`Advice.from_dict` reads it
back, so a decision can be replayed and audited. :meth:`Advice.lines` is what the command prints.
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from ..core.counters import CounterAbsent, Counters
from ..core.errors import UsageError
from ..core.units import format_bytes, format_count, format_time
from .features import Features

SCHEMA = "pytest-ipcbench-advice"
VERSION = 1

#: the counters quoted per candidate and message (per role: the writer, the largest reader)
QUOTED = ("syscalls.total", "syscalls.data", "io.rchar", "io.wchar", "pickle.dumps", "pickle.loads",
          "alloc.bytes", "faults.minor")
#: below this many bytes of data a copy is not told from the allocator's own bytes
COPY_FLOOR = 4096


def counts_of(counters: Counters | None) -> dict[str, dict[str, Any]]:
    """{role: {counter: value per message, "exact": {counter: bool}}} of the quoted counters."""
    if counters is None:
        return {}
    out: dict[str, dict[str, Any]] = {}
    for role, values in counters.per_role(QUOTED).items():
        exact = {}
        for name in values:
            try:
                exact[name] = counters.exact(role, name)
            except CounterAbsent:
                continue
        out[role] = {**values, "exact": exact}
    return out


def counts_text(counts: dict[str, dict[str, Any]], data_bytes: int) -> str:
    """``writer 2 system calls, 0 B through the kernel, 1 pickle, ~1.0 copy (4.2 MB allocated); reader ...``"""
    parts = []
    for role in ("writer", "reader"):
        c = counts.get(role)
        if not c:
            continue
        bits = []
        if "syscalls.total" in c:
            bits.append(f"{format_count(c['syscalls.total'])} system calls")
        if "io.rchar" in c and "io.wchar" in c:
            bits.append(f"{format_bytes(c['io.rchar'] + c['io.wchar'])} through the kernel")
        if "pickle.dumps" in c and "pickle.loads" in c:
            bits.append(f"{format_count(c['pickle.dumps'] + c['pickle.loads'])} pickles")
        if "alloc.bytes" in c:
            copies = f"~{c['alloc.bytes'] / data_bytes:.1f} copies, " if data_bytes >= COPY_FLOOR else ""
            bits.append(f"{copies}{format_bytes(c['alloc.bytes'])} allocated")
        parts.append(f"{role} " + ", ".join(bits))
    return "; ".join(parts) if parts else "not counted"


@dataclass
class Candidate:
    """One (backend, mode) pair: raced, left out by the prior, failed on the object, or unavailable."""

    pair: str
    status: str  # pick | runner-up | tie | raced | eliminated | not-probed | not-shortlisted | failed | unavailable
    median_s: float | None = None  # the race's median of round medians
    ratio: float | None = None  # its median / the race leader's, with the interval
    low: float | None = None
    high: float | None = None
    rounds: int = 0
    out_at_stage: int | None = None
    reason: str = ""  # why it failed, is unavailable, or has no counters
    counts: dict[str, dict[str, Any]] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class Advice:
    """The decision (rank 0's, broadcast to every rank)."""

    pick: str
    runner_up: str | None
    ratio: float | None  # runner-up / pick, from the confirmation
    low: float | None
    high: float | None
    confidence: float
    tie: list[str]  # pairs within ``tie_threshold`` of the race's leader
    tie_threshold: float
    measured: bool  # False: from the prior alone (--describe)
    scenario: str
    metric: str
    readers: int
    features: Features
    candidates: list[Candidate]
    environment: dict[str, Any]
    prior: dict[str, Any]  # source, bucket, order, shortlist
    race: dict[str, Any] = field(default_factory=dict)  # stages, stopped, rounds, elapsed, swapped, medians
    notes: list[str] = field(default_factory=list)

    # ------------------------------------------------------------------ JSON
    def to_dict(self) -> dict[str, Any]:
        d = {"schema": SCHEMA, "version": VERSION}
        d.update({k: v for k, v in asdict(self).items() if k not in ("features", "candidates")})
        d["features"] = self.features.to_dict()
        d["candidates"] = [c.to_dict() for c in self.candidates]
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Advice:
        if d.get("schema") != SCHEMA or d.get("version") != VERSION:
            raise UsageError(f"not an advice file of schema {SCHEMA} version {VERSION}")
        fields = {k: v for k, v in d.items() if k not in ("schema", "version", "features", "candidates")}
        return cls(features=Features.from_dict(d["features"]), candidates=[Candidate(**c) for c in d["candidates"]],
                   **fields)

    def write_json(self, path: str | Path) -> None:
        """Written whole or not at all, checked as every output (core/outdir.py)."""
        from ..core.outdir import write_output

        write_output(path, json.dumps(self.to_dict(), indent=1, allow_nan=False) + "\n", "--json")

    @classmethod
    def read_json(cls, path: str | Path) -> Advice:
        return cls.from_dict(json.loads(Path(path).read_text()))

    # ------------------------------------------------------------------ words
    def candidate(self, pair: str) -> Candidate:
        for c in self.candidates:
            if c.pair == pair:
                return c
        raise KeyError(pair)

    def verdict(self) -> str:
        """The last line: ``use shm/native: 1.84x faster than zmq/native (95% CI 1.71-1.98x)``."""
        if not self.measured:
            return f"use {self.pick} (from the prior alone: measure with --sample to decide)"
        if self.race.get("probes_only"):
            then = f" (then {self.runner_up})" if self.runner_up else ""
            return (f"use {self.pick}{then}: judged on one probe iteration a pair, without a race or an interval "
                    f"(the budget held none: see the race line)")
        if self.runner_up is None or self.ratio is None:
            return f"use {self.pick} (the only candidate that could send the object)"
        pct = round(self.confidence * 100)
        span = f"({pct}% CI {self.low:.2f}-{self.high:.2f}x, confirmation run)"
        tie = 1 + self.tie_threshold
        if self.low is not None and self.low > 1:
            return f"use {self.pick}: {self.ratio:.2f}x faster than {self.runner_up} {span}"
        if self.low is not None and self.high is not None and 1 / tie <= self.low and self.high <= tie:
            why = ("the simpler of the two" if self.race.get("leader") not in (None, self.pick)
                   else "the faster in the race")
            return (f"use {self.pick}: tie with {self.runner_up} ({self.runner_up} / {self.pick} = {self.ratio:.2f}x "
                    f"{span}, within {self.tie_threshold:.0%}); {self.pick} is {why}")
        return (f"use {self.pick}: not decided against {self.runner_up} at {pct}% ({self.runner_up} / {self.pick} = "
                f"{self.ratio:.2f}x {span}); chosen on the two's rounds of the race and the confirmation together")

    def lines(self) -> list[str]:
        env = self.environment
        out = [f"object: {self.features.describe()}",
               f"scenario: {self.scenario}, {self.readers} reader{'s' * (self.readers != 1)}, judged by {self.metric}"]
        if not self.measured:
            out.append(f"prior: {self.prior.get('bucket')} -> {', '.join(self.prior.get('order', []))} "
                       f"({self.prior.get('source')})")
            out.extend(f"unavailable here: {c.pair} ({c.reason})" for c in self.candidates if c.status == "unavailable")
            out.append(self.verdict())
            return out
        load = "/".join("?" if x is None else f"{x:.1f}" for x in (env.get("load_start"), env.get("load_end")))
        out += [f"environment: {env.get('cores')} cores, {env.get('ranks')} ranks ({env.get('ranks_per_core', 0):.1f} "
                f"per core), load {load} (start/end), {env.get('group')} group",
                f"prior: {self.prior.get('bucket')} -> shortlist {', '.join(self.prior.get('shortlist', []))} "
                f"({self.prior.get('source')})"]
        r = self.race
        if r.get("probes_only"):
            out.append(f"race: none: {r.get('stopped')}")
        else:
            out.append(f"race: {r.get('stages')} stage(s), {r.get('rounds')} rounds, stopped: {r.get('stopped')}; "
                       f"{r.get('elapsed_s', 0):.1f} s")
        if r.get("stage_rounds", 0) < r.get("asked_rounds", 0) and not r.get("probes_only"):
            out.append(f"  {r['stage_rounds']} rounds a stage, not {r['asked_rounds']}: the slowest probe took "
                       f"{r['iteration_s']:.2f} s an iteration, and the budget holds no more")
        out.append("")
        out.append(f"{'candidate':<20} {'status':<16} {'median':>10} {'vs leader':>22}  per message")
        uncounted: dict[str, list[str]] = {}
        for c in self.candidates:
            if c.status in ("not-probed", "not-shortlisted", "failed", "unavailable"):
                continue
            med = format_time(c.median_s) if c.median_s else "-"
            vs = (f"{c.ratio:.2f}x ({c.low:.2f}-{c.high:.2f})" if c.ratio is not None and c.low is not None
                  and math.isfinite(c.low) else "-")
            if c.counts:
                said = counts_text(c.counts, self.features.total_bytes)
            else:
                said = "-"
                uncounted.setdefault(c.reason or "not counted", []).append(c.pair)
            out.append(f"{c.pair:<20} {c.status:<16} {med:>10} {vs:>22}  {said}")
        for reason, names in uncounted.items():
            out.append(f"no counts for {', '.join(names)}: {reason}")
        for c in self.candidates:
            if c.status == "failed":
                out.append(f"{c.pair}: failed on the object, left out: {c.reason}")
        why: dict[str, list[str]] = {}
        for c in self.candidates:
            if c.status == "unavailable":
                why.setdefault(c.reason, []).append(c.pair)
        for reason, names in why.items():
            out.append(f"unavailable here: {', '.join(names)} ({reason})")
        unprobed = [c.pair for c in self.candidates if c.status == "not-probed"]
        if unprobed:
            out.append(f"not probed (the budget was spent on the probes): {', '.join(unprobed)}")
        left = [c.pair for c in self.candidates if c.status == "not-shortlisted"]
        if left:
            out.append(f"not raced (the prior ranked them lower): {', '.join(left)}")
        if len(self.tie) > 1:
            out.append(f"tie within {self.tie_threshold:.0%} of the leader: {', '.join(self.tie)}; "
                       f"preferring the simpler (fewer processes, packages, files; bytes before native)")
        out.extend(self.notes)
        out.append(self.verdict())
        return out
