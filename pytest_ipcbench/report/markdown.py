"""The markdown tables of ``summary.md`` and the headline printed after a run."""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np

from ..core.envinfo import describe as describe_env
from ..core.units import format_bytes, format_percent, format_rate, format_time
from ..results.results import Result, ResultSet
from .common import (
    WIDE_SPREAD,
    backend_order,
    by_scenario,
    copy_bandwidth_by_size,
    efficiency,
    is_wide,
    kind_order,
    median_of,
    mixed_models_note,
    percentiles_of,
    process_model,
    size_of,
    table,
    wide_note,
)
from .counters import cost_section


def test_of(result: Result) -> str:
    """The pytest test a result was measured in (``extra["test"]``; empty for ``ipcbench run``)."""
    return str(result.extra.get("test", "") or "")


def relative_speed_table(results: Sequence[Result], copies: dict[int, float] | None = None) -> str:
    """The relative speed table for one payload kind and size: backends by completion, relative
    speed within one rank count and process model; a Test column for results from pytest."""
    copies = copies or {}
    rows = [r for r in results if median_of(r, "completion")]
    if not rows:
        return ""
    rows.sort(key=lambda r: (r.ranks, r.group, median_of(r, "completion") or math.inf))
    best: dict[tuple[int, str], float] = {}
    for r in rows:
        best.setdefault((r.ranks, r.group), median_of(r, "completion") or 1.0)
    tests = any(test_of(r) for r in rows)
    lines = []
    for r in rows:
        c = median_of(r, "completion") or math.inf
        top = best[(r.ranks, r.group)]
        rel = "baseline (1.00x)" if c == top else f"{c / top:.2f}x slower"
        eff = efficiency(r, copies)
        ver = r.verified
        p10, _, p90, p99 = percentiles_of(r, "completion") or (None,) * 4
        lines.append([
            r.backend, r.mode, r.delivery, str(r.ranks), process_model(r), format_time(median_of(r, "write")),
            format_time(median_of(r, "read_avg")), format_time(p10),
            format_time(c) + (" (wide)" if is_wide(r, "completion") else ""),
            format_time(p90), format_time(p99), format_time(median_of(r, "completion_touched")), rel,
            format_percent(eff),
            f"{ver.checked - ver.failed}/{ver.checked}" if ver else "-",
            *([test_of(r) or "-"] if tests else []),
        ])
    notes = [n for n in (wide_note(r, "completion", "completion") for r in rows) if n]
    mixed = mixed_models_note(rows)
    return table(
        ["Backend", "Mode", "Delivery", "Ranks", "Processes", "Median write", "Median read", "Completion p10", "p50",
         "p90", "p99", "Completion p50, touched", "Relative speed", "Copy eff.", "Verified",
         *(["Test"] if tests else [])],
        lines, "lllrl" + "r" * 10 + ("l" if tests else ""),
    ) + _notes(([mixed] if mixed else []) + notes)


def _notes(notes: Sequence[str]) -> str:
    """Sentences under a table, one per wide distribution."""
    return "".join(f"\n\n- {n}" for n in notes)


def _wide_cells(results: Sequence[Result], metric: str, what: str) -> str:
    """The notes of a by-size table whose cells show medians: every wide distribution in it."""
    notes = [n for n in (wide_note(r, metric, what) for r in results) if n]
    if not notes:
        return ""
    return (f"(wide): p90/p10 of at least {WIDE_SPREAD:g}x; the percentiles are in the tables of the summary "
            "and in the *_summary.csv files." + _notes(notes))


def _by_size_table(results: Sequence[Result], value: Callable[[Result], str]) -> str:
    """Rows: backend, mode, ranks, process model (and test, from pytest); columns: sizes."""
    sizes = sorted({r.size for r in results})
    rows: dict[tuple[str, str, int, str, str], dict[int, str]] = defaultdict(dict)
    for r in results:
        rows[(r.backend, r.mode, r.ranks, process_model(r), test_of(r))][r.size] = value(r)
    keys = sorted(rows, key=lambda k: (backend_order(k[0]), k[1], k[2], k[3], k[4]))
    labels = {r.size: size_of(r) for r in results}
    tests = any(k[4] for k in keys)
    return table(["Backend", "Mode", "Ranks", "Processes", *[labels[s] for s in sizes], *(["Test"] if tests else [])],
                  [[b, m, str(n), p, *[rows[(b, m, n, p, t)].get(s, "-") for s in sizes],
                    *([t or "-"] if tests else [])] for b, m, n, p, t in keys])


def headline(results: Sequence[Result]) -> str:
    """The summary printed at the end of a run: per payload kind, the relative speed table at
    the largest size."""
    copies = copy_bandwidth_by_size(results)
    bcast = by_scenario(results, "broadcast")
    parts = []
    for kind in sorted({r.payload for r in bcast}, key=kind_order):
        of_kind = [r for r in bcast if r.payload == kind]
        top = max(r.size for r in of_kind)
        at = [r for r in of_kind if r.size == top]
        ranks = sorted({r.ranks for r in at})
        parts.append(f"### Broadcast, {kind} payload, {size_of(at[0])}, {'/'.join(map(str, ranks))} ranks\n\n"
                     + relative_speed_table(at, copies))
    pp = [r for r in by_scenario(results, "pingpong") if median_of(r, "latency")]
    if pp:
        small = min(r.nbytes for r in pp)
        # by process model, fastest first within each
        at = sorted((r for r in pp if r.nbytes == small), key=lambda r: (r.group, median_of(r, "latency") or 0))
        mixed = mixed_models_note(at)
        parts.append(f"### Ping-pong latency at {format_bytes(small)} (round trip / 2)\n\n" + table(
            ["Backend", "Mode", "Processes", "Latency p10", "p50", "p90", "p99", "Mean"],
            [[r.backend, r.mode, process_model(r),
              *[format_time(v) for v in percentiles_of(r, "latency") or (None,) * 4],
              format_time(float(np.mean(r.samples["latency"])))] for r in at]) + _notes(([mixed] if mixed else [])
                                    + [n for n in (wide_note(r, "latency", "latency") for r in at) if n]))
    return "\n\n".join(parts)


def _idle_section(idle: Sequence[Result]) -> list[str]:
    """Latency after an idle gap (the ``idle`` scenario): a row per case, its percentiles."""
    if not idle:
        return []
    rows = [[r.backend, r.mode, format_bytes(r.nbytes), format_time(r.extra.get("gap_s")),
             *[format_time(v) for v in percentiles_of(r, "latency") or (None,) * 4],
             str(len(r.samples.get("latency", ())))]
            for r in sorted(idle, key=lambda r: (backend_order(r.backend), r.mode, r.size, r.extra.get("gap_s", 0.0)))]
    notes = [n for n in (wide_note(r, "latency", "latency") for r in idle) if n]
    return ["## Latency after an idle gap (one message after both ranks sat idle; round trip / 2)", "",
            "Both ranks idle for the gap, then one round trip is timed: how fast a waiting reader wakes.", "",
            table(["Backend", "Mode", "Size", "Gap", "Latency p10", "p50", "p90", "p99", "Samples"], rows, "llrrrrrrr")
            + _notes(notes), ""]


def markdown(rs: ResultSet, files: Sequence[Path] = ()) -> str:
    results = rs.results
    copies = copy_bandwidth_by_size(results)
    out = ["# pytest-ipcbench results", ""]
    if rs.env:
        out += [f"- {line}" for line in describe_env(rs.env)]
        out.append("")
    out.append(
        "How to read: *write* is the writer's `write()` (send-only for a channel); *read* is one reader's "
        "`read()` until it holds a usable object (for a store it starts after the write; for a channel it "
        "includes waiting for delivery); *completion* of a channel is delivery: from the writer's start "
        "of the write to the moment the last reader holds a usable object, on one clock (the run's "
        "`clock` field: one host's CLOCK_MONOTONIC, or offset-corrected across hosts); of a store, the "
        "write plus the slowest read; *touched* adds reading every cache line of it, "
        "so a zero-copy view does not win for free. A stream's *delivered* is per message, on the "
        "writer's clock, from its first send to the readers' acknowledgement of the window; a reader's "
        "*read* there starts when that reader leaves the barrier (late when it was asleep). Ping-pong "
        "and granularity are timed on rank 0 alone. Medians (p50) over the iterations, with p10/p90/p99 where "
        "shown; a cell marked (wide) has p90/p10 of 3x or more: its median alone hides the spread. Copy efficiency = "
        "bandwidth to a fully read object / numpy copy bandwidth measured in the same run."
    )
    out.append("")
    head = headline(results)
    if head:
        out += ["## Summary", "", head, ""]
    def by_kind(scenario: str, title: str, cell: Callable[[Result], str], wide: str | None = None) -> None:
        """A section of one by-size table per payload kind (``wide``: the metric whose spread is noted)."""
        of = by_scenario(results, scenario)
        if of:
            out.extend([title, ""])
        for kind in sorted({r.payload for r in of}, key=kind_order):
            of_kind = [r for r in of if r.payload == kind]
            out.extend([f"### {kind}", "", _by_size_table(of_kind, cell), ""]
                       + ([_wide_cells(of_kind, wide, wide), ""] if wide else []))

    def wide(text: str, r: Result, metric: str) -> str:
        return text + (" (wide)" if is_wide(r, metric) else "")

    def rate(r: Result) -> str:
        eff = efficiency(r, copies)
        return format_rate(r.bandwidth()) + (f" ({format_percent(eff)})" if eff is not None else "")

    def messages(r: Result) -> str:
        d, s = median_of(r, "delivered"), median_of(r, "send")
        return f"{1 / d:,.0f} ({1 / s:,.0f}) msg/s" if d and s else "-"

    by_kind("broadcast", "## Broadcast: completion time against size (max over readers)",
            lambda r: wide(format_time(median_of(r, "completion")), r, "completion"), "completion")
    by_kind("broadcast", "## Write time against size", lambda r: format_time(median_of(r, "write")))
    by_kind("broadcast", "## Read time against size (average over readers)",
            lambda r: format_time(median_of(r, "read_avg")))
    by_kind("broadcast", "## Throughput per reader to a fully read object (and fraction of copy bandwidth)", rate)
    by_kind("pingpong", "## Ping-pong latency (round trip / 2) and bandwidth",
            lambda r: wide(f"{format_time(median_of(r, 'latency'))} / {format_rate(r.throughput('latency'))}", r,
                           "latency"), "latency")
    out += _idle_section(by_scenario(results, "idle"))
    by_kind("stream", "## Stream: messages per second, delivered (send-only)", messages)
    gr = by_scenario(results, "granularity")
    if gr:
        works = sorted({r.extra.get("work_s", 0.0) for r in gr})
        rows: dict[tuple[str, str], dict[float, str]] = defaultdict(dict)
        for r in gr:
            over, rt, work = median_of(r, "overhead"), median_of(r, "roundtrip"), median_of(r, "work") or 0.0
            rows[(r.backend, r.mode)][r.extra.get("work_s", 0.0)] = (
                f"{format_time(over)} ({work / rt:.0%})" if rt else "-")
        out += ["## Granularity: overhead per round trip "
                "(efficiency = work / round trip; a 64-byte task with a fixed amount of work)", "",
                table(["Backend", "Mode", *[f"work {format_time(w) if w else '0'}" for w in works]],
                       [[b, m, *[rows[(b, m)].get(w, "-") for w in works]]
                        for b, m in sorted(rows, key=lambda k: (backend_order(k[0]), k[1]))]), ""]
    out += cost_section(results)  # report/counters.py
    if copies:
        out += ["## Copy bandwidth of this machine (numpy copy into a touched destination, same run)", "",
                table(["Size", "Bandwidth"],
                      [[format_bytes(n), format_rate(bw)] for n, bw in sorted(copies.items())], "lr"),
                ""]
    if any(r.scenario == "mpi-method" for r in results):
        out += ["## MPI transfer methods (1D and ragged 2D int32 data)", "",
                "See [mpi-methods.md](mpi-methods.md).", ""]
    s2 = sorted(by_scenario(results, "shared-array"), key=lambda r: median_of(r, r.primary) or 0)
    if s2:
        copy = next((median_of(r, r.primary) for r in s2 if r.backend == "copy"), None)
        out += [f"## Shared arrays: a {format_bytes(s2[0].nbytes)} array from one process to another", "",
                "From the put until the consumer holds the array (see shared-arrays.json).", "",
                table(["Path", "Median", "Samples", "x one copy"],
                       [[r.backend, format_time(median_of(r, r.primary)), len(r.samples[r.primary]),
                         f"{(median_of(r, r.primary) or 0) / copy:.2f}x" if copy else "-"] for r in s2], "lrrr"), ""]
    handle: dict[int, dict[str, float]] = {}
    for r in by_scenario(results, "shared-array-handle"):
        m = median_of(r, r.primary)
        if m:
            handle.setdefault(r.nbytes, {})[r.backend] = m
        if r.backend == "handle" and (r.extra or {}).get("release"):
            handle.setdefault(r.nbytes, {})["release"] = float(r.extra["release"])
    if handle:
        out += ["## Shared arrays: a shared array's handle against None through the same queue", "",
                "Round trip: put until the consumer acknowledged (it maps the segment or reuses its "
                "mapping, reads one element); every round sends each size's handle, each followed by "
                "None. Release: the consumer's drop of "
                "the array, after the clock stopped.", "",
                table(["Array", "handle", "None", "handle / None", "release"],
                      [[format_bytes(n), format_time(v["handle"]) if "handle" in v else "-",
                        format_time(v["ping"]) if "ping" in v else "-",
                        f"{v['handle'] / v['ping']:.2f}x" if "handle" in v and "ping" in v else "-",
                        format_time(v["release"]) if "release" in v else "-"]
                       for n, v in sorted(handle.items())], "lrrrr"), ""]
    refs = by_scenario(results, "reference")
    if refs:
        out += ["## In-run references (what `ipcbench compare` divides out across runs)", "",
                table(["Reference", "Size", "Median", "Samples"],
                      [[f"{r.backend} ping-pong (round trip / 2)" if r.primary == "latency" else r.backend,
                        format_bytes(r.nbytes), format_time(median_of(r, r.primary)), len(r.samples.get(r.primary, ()))]
                       for r in sorted(refs, key=lambda r: (r.backend, r.size))], "lrrr"), ""]
    other = sorted({r.scenario for r in results}
                   - {"broadcast", "pingpong", "idle", "stream", "granularity", "copy", "reference", "mpi-method",
                      "shared-array", "shared-array-handle"})
    if other:
        out += ["## Other results", "", f"Scenarios {', '.join(other)}: see all_results.csv.", ""]
    failures = rs.env.get("failures") if rs.env else None
    if failures:
        out += ["## Cases that failed", ""] + [f"- {f}" for f in failures] + [""]
    if files:
        out += ["## Files", ""] + [f"- [{p.name}]({p.name})" for p in files] + [""]
    return "\n".join(out)
