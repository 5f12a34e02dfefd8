"""PNG plots (matplotlib, Agg: no display needed), log axes with units; one file per figure."""

from __future__ import annotations

import functools
import math
from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

from ..core.outdir import atomic_output
from ..core.units import format_bytes, format_time
from ..results.results import Result
from .common import (
    backend_order,
    by_scenario,
    copy_bandwidth_by_size,
    efficiency,
    kind_order,
    median_of,
    percentiles_of,
    process_model,
)

Colours = dict[str, int]  # backend -> its place in the report's palette


def _mpl() -> tuple[Any, Any]:
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    return Figure, FigureCanvasAgg


# axis formatters: matplotlib takes a function of (value, position) as one
Formatter = Callable[[float, Any], str]


def _time_formatter(v: float, _: Any = None) -> str:
    return format_time(v).replace(".0 ", " ") if v > 0 else "0"


def _bytes_formatter(v: float, _: Any = None) -> str:
    return format_bytes(int(round(v))) if v >= 1 else f"{v:g} B"


def _plain_number(v: float, _: Any = None) -> str:
    return "0" if v <= 0 else f"{v:,.0f}" if v >= 1 else f"{v:.2g}"


def colour_order(results: Iterable[Result]) -> Colours:
    """Each backend of a report its own colour: by their order among the backends *in the report*."""
    names = sorted({r.backend for r in results}, key=backend_order)
    return {name: i for i, name in enumerate(names)}


def _palette() -> list[Any]:
    import matplotlib

    # 27 colours of three qualitative maps; beyond them the marker still tells the lines apart
    return [colour for name in ("tab10", "Dark2", "Set1") for colour in matplotlib.color_sequences[name]]


def series_label(backend: str, mode: str, group: str) -> str:
    """A line's legend entry: the backend, its mode and the processes it ran in."""
    return f"{backend} ({mode}, {process_model(group)})"


LEGEND_TITLE = "backend (mode, processes)"


def _style(backend: str, mode: str, colours: Colours | None = None) -> dict[str, Any]:
    colors = _palette()
    markers = "osD^vP*Xh<>p"
    i = colours[backend] if colours and backend in colours else backend_order(backend)[0]
    return {"color": colors[i % len(colors)], "marker": markers[i % len(markers)],
            "linestyle": "-" if mode == "native" else "--", "markersize": 5, "linewidth": 1.6}


def _panels(kinds: Sequence[str]) -> tuple[int, int]:
    n = len(kinds)
    return (1, n) if n <= 2 else (2, (n + 1) // 2)


def _throughput(r: Result, metric: str) -> float | None:
    """Bytes per second of ``r``'s median ``metric`` time (None without one)."""
    t = median_of(r, metric)
    return r.nbytes / t if t else None


def _series(results: Iterable[Result], value: Callable[[Result], float | None]
            ) -> dict[tuple[str, str, str], list[tuple[int, float]]]:
    """(backend, mode, group) -> its points: a backend run in two process models is two lines."""
    lines: dict[tuple[str, str, str], list[tuple[int, float]]] = defaultdict(list)
    for r in results:
        v = value(r)
        if v is not None and math.isfinite(v) and v > 0:
            lines[(r.backend, r.mode, r.group)].append((max(r.nbytes, 1), v))
    return {k: sorted(v) for k, v in sorted(lines.items(), key=lambda kv: (backend_order(kv[0][0]), *kv[0][1:]))}


def _band(results: Iterable[Result], metric: str) -> list[tuple[int, float, float]]:
    """(bytes, p10, p90) of ``metric`` per result, by size: the shaded range of a line."""
    return sorted((max(r.nbytes, 1), p[0], p[2]) for r in results
                  if (p := percentiles_of(r, metric)) is not None and p[0] > 0)


def _save(fig: Any, canvas_cls: Any, path: Path) -> Path:
    canvas_cls(fig)
    with atomic_output(path, "plot") as tmp:  # a full disk: no half image, an error naming it
        fig.savefig(tmp, dpi=100)
    return path


def plot_by_kind(
    results: Sequence[Result],
    value: Callable[[Result], float | None],
    path: Path,
    title: str,
    ylabel: str,
    y: str = "time",
    reference: dict[int, float] | None = None,
    reference_label: str = "",
    subtitle: str = "",
    band: str | None = None,
    colours: Colours | None = None,
) -> Path | None:
    """One panel per payload kind: ``value`` against payload bytes, a line per backend/mode, the
    p10-p90 range of metric ``band`` shaded around it."""
    if band:
        subtitle = (subtitle + "; " if subtitle else "") + "line: median (p50); shaded: p10 to p90"
    kinds = sorted({r.payload for r in results}, key=kind_order)
    if not kinds or not any(value(r) for r in results):
        return None
    Figure, Canvas = _mpl()
    rows, cols = _panels(kinds)
    fig = Figure(figsize=(5.2 * cols + 2.4, 4.0 * rows + 0.4), layout="constrained")
    axes = fig.subplots(rows, cols, squeeze=False)
    handles: dict[str, Any] = {}
    for ax, kind in zip(axes.flat, kinds):
        scale = 1e-6 if y == "rate" else 1.0  # rates are drawn in MB/s
        for (backend, mode, group), pts in _series([r for r in results if r.payload == kind], value).items():
            xs, ys = zip(*pts)
            name = series_label(backend, mode, group)
            style = _style(backend, mode, colours or colour_order(results))
            if group == "local":
                style["markerfacecolor"] = "white"  # hollow: local workers; filled: MPI ranks
            (h,) = ax.plot(xs, [v * scale for v in ys], label=name, **style)
            handles.setdefault(name, h)
            if band:
                spread = _band([r for r in results if r.payload == kind
                                and (r.backend, r.mode, r.group) == (backend, mode, group)], band)
                if spread:
                    bx, band_lo, band_hi = zip(*spread)
                    ax.fill_between(bx, [v * scale for v in band_lo], [v * scale for v in band_hi], color=h.get_color(),
                                    alpha=0.15, linewidth=0)
        if reference:
            lo = min((r.nbytes for r in results if r.payload == kind), default=1)
            hi = max((r.nbytes for r in results if r.payload == kind), default=1)
            ref = sorted((k, v * scale) for k, v in reference.items() if lo / 2 <= k <= hi * 2)
            if ref:
                xs, ys = zip(*ref)
                (h,) = ax.plot(xs, ys, color="black", linestyle=":", linewidth=1.4, label=reference_label)
                handles.setdefault(reference_label, h)
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_title(f"payload: {kind}")
        ax.set_xlabel("payload size (MB = 10^6 B)")
        ax.set_ylabel(ylabel)
        ax.xaxis.set_major_formatter(_bytes_formatter)
        fmt: Formatter | None = {"time": _time_formatter, "rate": _plain_number,
                                 "ratio": lambda v, _: f"{v * 100:g}%"}.get(y)
        if fmt is not None:
            _log_labels(ax.yaxis, fmt, ax.get_ylim())
        _log_labels(ax.xaxis, _bytes_formatter, ax.get_xlim())
        ax.grid(True, which="major", alpha=0.35)
    for ax in list(axes.flat)[len(kinds):]:
        ax.set_visible(False)
    fig.suptitle(title + (f"\n{subtitle}" if subtitle else ""), fontsize=12)
    fig.legend(list(handles.values()), list(handles.keys()), loc="outside right center",
               fontsize=9, title=f"{LEGEND_TITLE}\nsolid native, dashed bytes\nfilled MPI ranks, hollow local workers",
               title_fontsize=9, frameon=False)
    return _save(fig, Canvas, path)


def plot_granularity(results: Sequence[Result], path: Path, colours: Colours | None = None) -> Path | None:
    res = [r for r in results if r.samples.get("overhead")]
    if not res:
        return None
    Figure, Canvas = _mpl()
    fig = Figure(figsize=(13.5, 4.4), layout="constrained")
    ax1, ax2 = fig.subplots(1, 2)
    groups: dict[tuple[str, str, str], list[Result]] = defaultdict(list)
    for r in res:
        groups[(r.backend, r.mode, r.group)].append(r)
    for (backend, mode, group), rs in sorted(groups.items(), key=lambda kv: (backend_order(kv[0][0]), *kv[0][1:])):
        rs.sort(key=lambda r: r.extra.get("work_s", 0))
        work = [max(r.extra.get("work_s", 0), 1e-6) for r in rs]
        over = [median_of(r, "overhead") for r in rs]
        eff = [(median_of(r, "work") or 0) / (median_of(r, "roundtrip") or 1) for r in rs]
        style = _style(backend, mode, colours or colour_order(res))
        ax1.plot(work, [max(o or 1e-9, 1e-9) for o in over], label=series_label(backend, mode, group), **style)
        ax2.plot(work, eff, label=series_label(backend, mode, group), **style)
    for ax in (ax1, ax2):
        ax.set_xscale("log")
        ax.set_xlabel("work per task (sleep; 0 drawn at 1 µs)")
        ax.xaxis.set_major_formatter(_time_formatter)
        ax.grid(True, alpha=0.35)
    ax1.set_yscale("log")
    _log_labels(ax1.yaxis, _time_formatter, ax1.get_ylim())
    ax1.set_ylabel("overhead per round trip (round trip - work)")
    ax1.set_title("overhead per task")
    ax2.set_ylim(0, 1.05)
    ax2.set_ylabel("efficiency = work / round trip")
    ax2.set_title("how small can a task be (64-byte tasks)")
    handles, labels = ax1.get_legend_handles_labels()
    fig.legend(handles, labels, loc="outside right center", fontsize=9, frameon=False,
               title=LEGEND_TITLE, title_fontsize=9)
    return _save(fig, Canvas, path)


def plot_stream(results: Sequence[Result], path: Path, colours: Colours | None = None) -> Path | None:
    res = [r for r in results if r.samples.get("delivered")]
    if not res:
        return None
    Figure, Canvas = _mpl()
    fig = Figure(figsize=(13.5, 4.4), layout="constrained")
    ax1, ax2 = fig.subplots(1, 2)
    for metric, ax, what in (("delivered", ax1, "delivered (acknowledged)"),
                             ("send", ax2, "send-only (write() returned)")):
        for (backend, mode, group), pts in _series(res, functools.partial(_throughput, metric=metric)).items():
            xs, ys = zip(*pts)
            style = _style(backend, mode, colours or colour_order(res))
            ax.plot(xs, ys, label=series_label(backend, mode, group), **style)
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_title(f"stream to every reader: {what}")
        ax.set_xlabel("message size (MB = 10^6 B)")
        ax.set_ylabel("MB/s per reader (10^6 B/s)")
        _log_labels(ax.xaxis, _bytes_formatter, ax.get_xlim())
        _log_labels(ax.yaxis, lambda v, _: _plain_number(v / 1e6), ax.get_ylim())  # B/s, in MB/s
        ax.grid(True, alpha=0.35)
    handles, labels = ax1.get_legend_handles_labels()
    fig.legend(handles, labels, loc="outside right center", fontsize=9, frameon=False,
               title=f"{LEGEND_TITLE}\nsolid native, dashed bytes", title_fontsize=9)
    return _save(fig, Canvas, path)


def _log_labels(axis: Any, formatter: Formatter, lim: tuple[float, float]) -> None:
    """Our labels on a log axis: major ticks, and minor ones too when it spans under a decade."""
    axis.set_major_formatter(formatter)
    lo, hi = sorted(lim)
    keep: tuple[int, ...] = ()  # the minor ticks labelled: none over 3 decades or more
    if lo > 0 and sum(lo <= 10**k <= hi for k in range(math.floor(math.log10(lo)), math.ceil(math.log10(hi)) + 1)) < 3:
        keep = (2, 5) if hi / lo > 4 else (2, 3, 4, 5, 6, 8)

    def minor(v: float, pos: Any) -> str:
        lead = round(v / 10 ** math.floor(math.log10(v) + 1e-9)) if v > 0 else 0
        return formatter(v, pos) if lead in keep else ""

    axis.set_minor_formatter(minor)




def write_plots(results: Sequence[Result], out: Path) -> list[Path]:
    bcast = by_scenario(results, "broadcast")
    copies = copy_bandwidth_by_size(results)
    readers = sorted({r.readers for r in bcast if r.readers})
    who = f"1 writer, {'/'.join(map(str, readers))} readers" if readers else "1 writer, N readers"
    colours = colour_order(results)  # one colour per backend across the report's figures
    made = [
        plot_by_kind(bcast, lambda r: median_of(r, "write"), out / "write_performance.png",
                     f"Broadcast write time ({who})", "median write time", subtitle="time of write() on the writer",
                     band="write", colours=colours),
        plot_by_kind(bcast, lambda r: median_of(r, "read_avg"), out / "read_performance.png",
                     f"Broadcast read time ({who})", "median read time (avg over readers)",
                     subtitle="read() until a usable object; a store's read starts after the write",
                     band="read_avg", colours=colours),
        plot_by_kind(bcast, lambda r: median_of(r, "completion"), out / "completion.png",
                     f"Broadcast completion ({who})", "median completion time",
                     subtitle="barrier exit until the last reader has a usable object (max over readers)",
                     band="completion", colours=colours),
        plot_by_kind(bcast, Result.bandwidth, out / "throughput.png", f"Broadcast throughput per reader ({who})",
                     "MB/s per reader (10^6 B/s)", y="rate", reference=copies,
                     reference_label="numpy copy (same run)",
                     subtitle="payload bytes / completion to a fully read object", colours=colours),
        plot_by_kind(bcast, lambda r: efficiency(r, copies), out / "efficiency.png",
                     "Broadcast efficiency: fraction of this machine's copy bandwidth", "bandwidth / copy bandwidth",
                     y="ratio", subtitle="100% = as fast as one numpy copy of the payload (to a fully read object)",
                     colours=colours),
        plot_by_kind(by_scenario(results, "pingpong"), lambda r: median_of(r, "latency"), out / "latency.png",
                     "Ping-pong latency (round trip / 2, 2 ranks)", "median latency", band="latency", colours=colours),
        plot_stream(by_scenario(results, "stream"), out / "stream.png", colours),
        plot_granularity(by_scenario(results, "granularity"), out / "granularity.png", colours),
    ]
    return [p for p in made if p is not None]
