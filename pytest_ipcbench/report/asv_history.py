"""The history an asv suite recorded, drawn with each commit's interval (asv's own site draws none).

Reads ``.asv/results/<machine>/*.json`` (asv 0.6's format) of one benchmark and draws a column per
scenario: each case's median per commit with its 99% interval on top, below its ratio to the case's
first commit (a step is a change). One line per case, one colour per backend.
"""

from __future__ import annotations

import itertools
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
            lows, highs, repeats = (list(cols.get(key) or []) + [None] * len(values)
                                    for key in ("stats_ci_99_a", "stats_ci_99_b", "stats_repeat"))
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
    return [tuple(v.strip("'") for v in combo) for combo in itertools.product(*params)] if params else []


def _parts(case: str) -> tuple[str, str]:
    """(panel, colour group) of a case: a key ``scenario/backend/...`` gives its scenario and
    backend; several parameters ``a / b / ...`` give one panel and the first parameter."""
    if " / " in case:
        return "all cases", case.split(" / ")[0]
    parts = case.split("/")
    return parts[0], parts[1] if len(parts) > 1 else parts[0]


def plot_history(history: dict[str, list[Point]], path: Path) -> Path:
    """The history's picture (see module). UsageError with nothing to draw."""
    if not history:
        raise UsageError("no asv results with intervals to plot (run `asv run` first; is the results folder right?)")
    from matplotlib import colormaps
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    from matplotlib.lines import Line2D
    from matplotlib.ticker import LogLocator

    commits: dict[str, int] = {}
    for points in history.values():
        for p in points:
            commits[p.commit] = min(p.date, commits.get(p.commit, p.date))
    order = sorted(commits, key=lambda c: (commits[c], c))
    x_of = {c: i for i, c in enumerate(order)}
    panels = sorted({_parts(c)[0] for c in history})
    groups = sorted({_parts(c)[1] for c in history})
    palette = colormaps["tab10" if len(groups) <= 10 else "tab20"]
    colour = {g: palette(i % palette.N) for i, g in enumerate(groups)}
    width = max(5.0, 1.0 + 0.45 * len(order))
    fig = Figure(figsize=(width * len(panels), 7.2), layout="constrained")
    axes = fig.subplots(2, len(panels), squeeze=False, sharex=True)
    for col, panel in enumerate(panels):
        top, bottom = axes[0][col], axes[1][col]
        cases = sorted(c for c in history if _parts(c)[0] == panel)
        for case in cases:
            points = history[case]
            x = [x_of[p.commit] for p in points]
            first = points[0].median
            kw = dict(color=colour[_parts(case)[1]], alpha=0.8, linewidth=1.2, markersize=3, capsize=2)
            top.errorbar(x, [p.median for p in points],
                         yerr=[[p.median - p.low for p in points], [p.high - p.median for p in points]], fmt="o-", **kw)
            if first > 0:  # the medians only: the intervals are above, here a step must read at a glance
                bottom.plot(x, [p.median / first for p in points], "o-", color=kw["color"], alpha=0.8,
                            linewidth=1.2, markersize=3)
        top.set_title(f"{panel} ({len(cases)} case{'s' if len(cases) != 1 else ''})", fontsize=10)
        top.set_yscale("log")
        top.yaxis.set_major_formatter(lambda v, _: format_time(v))
        top.yaxis.set_minor_formatter(lambda v, _: "")
        bottom.set_yscale("log")
        bottom.axhline(1.0, color="black", linewidth=0.8)
        bottom.yaxis.set_major_locator(LogLocator(subs=(1.0, 2.0, 5.0)))
        bottom.yaxis.set_major_formatter(lambda v, _: f"{v:g}x")
        bottom.yaxis.set_minor_formatter(lambda v, _: "")
        bottom.set_xticks(range(len(order)), [c[:7] for c in order], rotation=45, fontsize=8)
        bottom.set_xlabel("commit (oldest first)", fontsize=9)
        for ax in (top, bottom):
            ax.grid(alpha=0.3, which="both")
            ax.tick_params(axis="y", labelsize=8)
        if col == 0:
            top.set_ylabel("median per commit (99% interval)", fontsize=9)
            bottom.set_ylabel("ratio to the case's first commit", fontsize=9)
    handles = [Line2D([], [], color=colour[g], marker="o", markersize=4, label=g) for g in groups]
    fig.legend(handles=handles, loc="outside right upper", fontsize=8, title="backend", title_fontsize=8)
    FigureCanvasAgg(fig).print_png(str(path))
    return path
