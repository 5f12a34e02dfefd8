"""The history an asv suite recorded, drawn with each commit's interval (asv's own site draws none).

Reads ``.asv/results/<machine>/*.json`` (asv 0.6's format: one file per commit and environment,
``result_columns`` naming each benchmark's columns) and draws one panel per case of one
benchmark (by default ``track_median`` of :mod:`..runner.asv_suite`): each commit's median, its
99% interval (asv's ``ci_99``) as an error bar, commits in date order.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path

from ..core.errors import UsageError
from ..core.units import format_time


@dataclass(frozen=True)
class Point:
    commit: str
    date: int  # the commit's date, ms since the epoch (asv's)
    median: float
    low: float  # asv's 99% interval, or the median itself when asv recorded none
    high: float
    repeat: int  # samples behind it (runs of the matrix), 0 when unknown


def load_history(results: Path, benchmark: str = "track_median") -> dict[str, list[Point]]:
    """{case: [Point per commit, oldest first]} of every benchmark whose name ends in ``benchmark``."""
    files = [f for f in sorted(Path(results).rglob("*.json"))
             if f.name not in ("benchmarks.json", "machine.json")]
    history: dict[str, list[Point]] = {}
    for f in files:
        data = json.loads(f.read_text())
        columns, date = data.get("result_columns"), int(data.get("date") or 0)
        if not columns or "results" not in data:
            continue
        for name, row in data["results"].items():
            if not name.endswith(benchmark):
                continue
            cols = dict(zip(columns, row))
            values, params = cols.get("result") or [], cols.get("params") or [[]]
            labels = [" / ".join(p) for p in _product(params)] or [name]

            def column(key: str) -> list:
                return list(cols.get(key) or []) + [None] * len(values)

            lows, highs, repeats = column("stats_ci_99_a"), column("stats_ci_99_b"), column("stats_repeat")
            for i, (label, value) in enumerate(zip(labels, values)):
                if value is None or not isinstance(value, (int, float)) or math.isnan(value):
                    continue
                low = lows[i] if lows[i] is not None and math.isfinite(lows[i]) else value
                high = highs[i] if highs[i] is not None and math.isfinite(highs[i]) else value
                history.setdefault(label.strip("'"), []).append(
                    Point(data.get("commit_hash", f.stem)[:8], date, float(value), float(low), float(high),
                          int(repeats[i] or 0)))
    for points in history.values():
        points.sort(key=lambda p: p.date)
    return history


def _product(params: list[list[str]]) -> list[tuple[str, ...]]:
    out: list[tuple[str, ...]] = [()]
    for values in params:
        out = [p + (v.strip("'"),) for p in out for v in values]
    return out if params else []


def plot_history(history: dict[str, list[Point]], path: Path, columns: int = 3) -> Path:
    """One panel per case: median per commit with its interval. UsageError with nothing to draw."""
    if not history:
        raise UsageError("no asv results with intervals to plot (run `asv run` first; is the results folder right?)")
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    cases = sorted(history)
    rows = -(-len(cases) // columns)
    fig = Figure(figsize=(4.2 * min(columns, len(cases)), 2.6 * rows))
    axes = fig.subplots(rows, min(columns, len(cases)), squeeze=False)
    for ax, case in zip(axes.flat, cases):
        points = history[case]
        x = range(len(points))
        ax.errorbar(x, [p.median for p in points],
                    yerr=[[p.median - p.low for p in points], [p.high - p.median for p in points]],
                    fmt="o-", capsize=3, markersize=4)
        ax.set_title(case, fontsize=8)
        ax.set_xticks(list(x), [p.commit[:7] for p in points], rotation=45, fontsize=7)
        ax.yaxis.set_major_formatter(lambda v, _: format_time(v))
        ax.tick_params(axis="y", labelsize=7)
        ax.set_yscale("log")  # intervals of 3-5 runs on a busy machine span decades
        ax.grid(alpha=0.3)
    for ax in list(axes.flat)[len(cases):]:
        ax.set_visible(False)
    fig.suptitle("median over the runs of each commit, with its 99% interval (asv ci_99)", fontsize=9)
    fig.tight_layout()
    FigureCanvasAgg(fig).print_png(str(path))
    return path
