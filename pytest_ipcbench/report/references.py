"""The reference checks' report: the terminal table, summary.md, references.csv, .json and .png
of ``ipcbench selfcheck`` (rows from :func:`~..harness.refcheck.run_refchecks`).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ..core.csvfile import write_csv
from ..core.units import format_count, format_time, size_label
from ..harness.refcheck import SCENARIOS, TARGET_FACTOR, TARGET_SLACK, RefRow
from .common import table as md_table

#: the counters of the counts table: (column, counter)
_COUNT_COLUMNS = (("syscalls", "syscalls.total"), ("data", "syscalls.data"), ("futex", "syscalls.sync"),
                  ("waiting", "syscalls.waiting"), ("dumps", "pickle.dumps"), ("loads", "pickle.loads"),
                  ("alloc B", "alloc.bytes"), ("faults", "faults.minor"))
#: words of a counter in count_words: the exact ones (the total, futex and waiting calls follow timing:
#: they are in the table, not in the words)
_NAMES = {"syscalls.data": "data system calls", "io.rchar": "B read", "io.wchar": "B written",
          "faults.minor": "minor faults", "pickle.dumps": "pickle dumps", "pickle.loads": "pickle loads",
          "alloc.bytes": "B allocated"}


def _count(x: float | None) -> str:
    return "-" if x is None else format_count(round(x, 1) if x < 100 else round(x))


def _pair(row: RefRow, side: str, name: str) -> str:
    """``writer/reader`` per message, ``-`` where a side did not count it."""
    roles = row.counts.get(side, {})
    return "/".join(_count(roles.get(role, {}).get(name)) for role in ("writer", "reader"))


def count_words(row: RefRow) -> str:
    """Where the backend's counts per message differ from its reference's, in words, e.g.
    ``writer: 2 data system calls (reference 1); reader: 1,000,112 B allocated (reference 0)``;
    "" when no counter differs or a side was not counted. Byte counters differ when by more than
    256 B and 1%; a count by at least 1 per message."""
    ours, ref = row.counts.get("ours", {}), row.counts.get("ref", {})
    parts = []
    for role in ("writer", "reader"):
        a, b = ours.get(role, {}), ref.get(role, {})
        diffs = []
        for name, words in _NAMES.items():
            x, y = a.get(name), b.get(name)
            if x is None or y is None:
                continue
            byte = name.startswith(("io.", "alloc."))
            if (abs(x - y) > max(256, 0.01 * max(x, y))) if byte else abs(x - y) >= 1:
                diffs.append(f"{_count(x)} {words} (reference {_count(y)})")
        if diffs:
            parts.append(f"{role}: {', '.join(diffs)}")
    return "; ".join(parts)


def counts_table(rows: Sequence[RefRow]) -> str:
    """Per message, ours against the reference: writer/reader of each counter (terminal)."""
    rows = [r for r in rows if r.counts.get("ours") and r.counts.get("ref")]
    if not rows:
        return ""
    cells = [[f"{_pair(r, 'ours', n)} | {_pair(r, 'ref', n)}" for _, n in _COUNT_COLUMNS] for r in rows]
    widths = [max(len(c), *(len(x[i]) for x in cells)) for i, (c, _) in enumerate(_COUNT_COLUMNS)]
    head = f"{'scenario':<8} {'backend':<10} {'mode':<6} {'size':>7}  " + "  ".join(
        f"{c:>{w}}" for (c, _), w in zip(_COUNT_COLUMNS, widths))
    lines = ["counts per message, ours | reference (writer/reader; harness/count.py)", head, "-" * len(head)]
    for r, row_cells in zip(rows, cells):
        lines.append(f"{r.scenario:<8} {r.backend:<10} {r.mode:<6} {size_label(r.size):>7}  "
                     + "  ".join(f"{c:>{w}}" for c, w in zip(row_cells, widths)))
    differ = [(r, count_words(r)) for r in rows]
    lines += [f"  {r.scenario} {r.backend} {r.mode} {size_label(r.size)}: {w}" for r, w in differ if w]
    return "\n".join(lines)


def _bw(row: RefRow, t: float) -> str:
    return f"{row.size / t / 1e6:,.0f}" if t > 0 and row.size >= 1024 else ""


def _ratio_cells(r: RefRow) -> str:
    if not r.has_reference:
        return f"{'-':>6} {'-':>13}"
    return f"{r.ratio:>5.2f}x {r.low:>5.2f}-{r.high:<5.2f}x"


def table(rows: Sequence[RefRow]) -> str:
    """The rows for a terminal: one line per case."""
    head = (f"{'scenario':<8} {'r':>1} {'backend':<10} {'mode':<6} {'size':>7} {'ours':>9} {'reference':>9} "
            f"{'ratio':>6} {'95% CI':>13} {'MB/s ours':>10} {'ref':>7} {'alloc':>6}  {'target':<7} reference")
    lines = [head, "-" * len(head)]
    for r in rows:
        alloc = f"{r.alloc:.2f}x" if r.alloc is not None else ""
        lines.append(
            f"{r.scenario:<8} {r.ranks:>1} {r.backend:<10} {r.mode:<6} {size_label(r.size):>7} "
            f"{format_time(r.ours):>9} {format_time(r.ref):>9} {_ratio_cells(r)} "
            f"{_bw(r, r.ours):>10} {_bw(r, r.ref):>7} {alloc:>6}  {r.verdict:<7} {r.reference or '(none)'}"
        )
    lines.append(
        f"ours / reference: the same harness, interleaved; r: ranks; pingpong: latency (round trip / 2), "
        f"stream: per delivered message; broadcast: completion (delivery to the last reader), checked against the "
        f"fast end of its fastest own ping-pong (physics); target: ours <= {TARGET_FACTOR:g} x reference (+ "
        f"{TARGET_SLACK * 1e6:g} us for pingpong); alloc: the reference with a fresh receive array per "
        f"message / with one reused buffer; MB = 10^6 bytes"
    )
    counts = counts_table(rows)
    return "\n".join(lines) + ("\n\n" + counts if counts else "")


def markdown(rows: Sequence[RefRow], env: dict[str, Any] | None = None) -> str:
    out = ["# Every backend against its reference", ""]
    if env:
        out += [", ".join(f"{k}: {v}" for k, v in env.items()), ""]
    out.append(md_table(
        ["scenario", "backend", "mode", "size", "ours", "reference", "overhead", "ratio (95% CI)", "alloc", "target",
         "reference"],
        [[r.scenario, r.backend, r.mode, size_label(r.size), format_time(r.ours), format_time(r.ref),
          format_time(r.overhead) if r.overhead >= 0 else "-" + format_time(-r.overhead),
          f"{r.ratio:.2f}x ({r.low:.2f}-{r.high:.2f})" if r.has_reference else "-",
          f"{r.alloc:.2f}x" if r.alloc is not None else "", r.verdict, r.reference or "(none)"] for r in rows],
        "lllrrrrlrll"))
    out += ["", f"Target: ours <= {TARGET_FACTOR:g} x reference (+ {TARGET_SLACK * 1e6:g} us for pingpong). "
            "overhead = what our wrapper adds per message; alloc = the reference with a fresh receive array "
            "per message / with one reused buffer (the cost of allocation). See docs/references.md.", ""]
    counted = [r for r in rows if r.counts.get("ours") and r.counts.get("ref")]
    if counted:
        out += ["## Counts per message, ours | reference", "",
                "writer/reader per message (the costliest reader), from each case's counting pass; "
                "futex and waiting calls follow timing, the rest is exact (docs/counters.md).", "",
                md_table(["scenario", "backend", "mode", "size", *(c for c, _ in _COUNT_COLUMNS), "differs"],
                      [[r.scenario, r.backend, r.mode, size_label(r.size),
                        *(f"{_pair(r, 'ours', n)} \\| {_pair(r, 'ref', n)}" for _, n in _COUNT_COLUMNS),
                        count_words(r)] for r in counted], "lllr" + "r" * len(_COUNT_COLUMNS) + "l"), ""]
    return "\n".join(out)


def plot(rows: Sequence[RefRow], path: Path) -> Path | None:
    """ours / reference against size, a panel per scenario, a line per backend and mode."""
    rows = [r for r in rows if r.has_reference]  # a backend timed alone has no ratio to draw
    if not rows:
        return None
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    scenarios = [s for s in SCENARIOS if any(r.scenario == s for r in rows)]
    fig = Figure(figsize=(6 * len(scenarios), 4.5))
    for i, scenario in enumerate(scenarios):
        ax = fig.add_subplot(1, len(scenarios), i + 1)
        lines: dict[tuple[str, str], list[RefRow]] = {}
        for r in rows:
            if r.scenario == scenario:
                lines.setdefault((r.backend, r.mode), []).append(r)
        for (backend, mode), rs in lines.items():
            rs.sort(key=lambda r: r.size)
            x = [max(r.size, 1) for r in rs]
            y = [r.ratio for r in rs]
            err = [[max(0.0, r.ratio - r.low) for r in rs], [max(0.0, r.high - r.ratio) for r in rs]]
            ax.errorbar(x, y, yerr=err, marker="o", capsize=3, linestyle="-" if mode == "native" else "--",
                        label=f"{backend} {mode}")
        ax.axhline(1.0, color="grey", linewidth=0.8)
        ax.axhline(TARGET_FACTOR, color="red", linewidth=0.8, linestyle=":", label=f"{TARGET_FACTOR:g}x")
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("message size (bytes)")
        ax.set_ylabel("backend / reference (time)")
        ax.set_title(f"{scenario}: our backend against its mechanism")
        ax.legend(fontsize=7)
    FigureCanvasAgg(fig)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    return path


def write_report(rows: Sequence[RefRow], out: Path, env: dict[str, Any] | None = None) -> list[Path]:
    """summary.md, references.csv, references.png and references.json in ``out``."""
    out.mkdir(parents=True, exist_ok=True)
    (out / "summary.md").write_text(markdown(rows, env))
    csv = write_csv(out / "references.csv", [{k: v for k, v in r.as_dict().items() if k not in ("extra", "counts")}
                                             for r in rows])
    (out / "references.json").write_text(json.dumps({"env": env or {}, "rows": [r.as_dict() for r in rows]}, indent=1))
    try:
        png = plot(rows, out / "references.png")
    except ImportError:
        png = None
    return [f for f in (out / "summary.md", csv, out / "references.json", png) if f]
