"""Reports of a results file: CSV summaries, PNG plots and markdown tables (seeds 000, 001, 004).

:func:`write_report` (also ``ipcbench report RESULTS.json --out DIR`` and ``pytest --ipc-report
DIR``) writes into one folder:

* ``summary.md``: the environment, then the tables people expect: per payload kind the backends
  ranked by broadcast completion with their relative speed (seed 000), write and read time
  against size (seed 001), ping-pong latency, stream and granularity tables, copy bandwidth;
* CSV: ``write_summary.csv``, ``read_summary.csv``, ``throughput_summary.csv`` (seed 001's
  benchmark_plots), ``latency_summary.csv``, ``stream_summary.csv``, ``granularity_summary.csv``,
  ``copy_bandwidth.csv`` and ``all_results.csv`` (every metric of every case);
* PNG (matplotlib, Agg, no display needed): ``write_performance.png``, ``read_performance.png``,
  ``completion.png``, ``throughput.png``, ``efficiency.png``, ``latency.png``, ``stream.png``,
  ``granularity.png``; log axes with units;
* seed 004's MPI method tables and plot (``mpi-methods.md`` / ``.png``) when the results hold
  ``mpi-method`` cases (:mod:`.mpi_methods_report`).

Units: times in seconds in the CSV (``_s`` columns), MB = 10**6 bytes, MB/s = 10**6 bytes/s.
"""

from __future__ import annotations

import argparse
import csv
import math
from collections import defaultdict
from pathlib import Path
from typing import Any, Callable, Iterable, Sequence

import numpy as np

from ..backends.base import backend_names
from ..core.envinfo import describe as describe_env
from ..core.payloads import format_size
from ..history.results import Result, ResultSet
from ..history.stats import summarize

KIND_ORDER = ("dict", "ndarray", "array1d", "ragged2d", "buffer", "tiny")
STAT_FIELDS = ("n", "median", "mean", "stddev", "min", "max", "q1", "q3")


# ------------------------------------------------------------------------------ formatting


def fmt_time(seconds: float | None) -> str:
    if seconds is None or not math.isfinite(seconds):
        return "-"
    if seconds >= 1:
        return f"{seconds:.2f} s"
    if seconds >= 1e-3:
        return f"{seconds * 1e3:.3g} ms"
    if seconds >= 1e-6:
        return f"{seconds * 1e6:.3g} µs"
    return f"{seconds * 1e9:.3g} ns"


def fmt_rate(bytes_per_s: float | None) -> str:
    if bytes_per_s is None or not math.isfinite(bytes_per_s):
        return "-"
    mbps = bytes_per_s / 1e6
    return f"{mbps:,.0f} MB/s" if mbps >= 100 else f"{mbps:.3g} MB/s"


def fmt_pct(fraction: float | None) -> str:
    if fraction is None or not math.isfinite(fraction):
        return "-"
    return f"{fraction:.0%}" if fraction >= 0.1 else f"{fraction * 100:.2g}%"


def fmt_size(nbytes: int) -> str:
    """Decimal label: 1000 -> 1 KB, 1048576 -> 1.05 MB (MB = 10**6)."""
    for unit, div in (("GB", 1e9), ("MB", 1e6), ("KB", 1e3)):
        if nbytes >= div:
            v = nbytes / div
            return f"{v:.3g} {unit}"
    return f"{nbytes} B"


def _label(r: Result) -> str:
    return f"{r.backend}/{r.mode}"


def _backend_order(name: str) -> tuple[int, str]:
    known = backend_names()
    return (known.index(name) if name in known else len(known), name)


def _kind_order(kind: str) -> tuple[int, str]:
    return (KIND_ORDER.index(kind) if kind in KIND_ORDER else len(KIND_ORDER), kind)


def _median(r: Result, metric: str) -> float | None:
    s = r.samples.get(metric)
    return float(np.median(s)) if s else None


def _size_label(r: Result) -> str:
    if r.payload == "dict":
        return f"{format_size(r.size)} ({r.nbytes // 100} entries)"
    return format_size(r.size)


def _table(header: Sequence[str], rows: Iterable[Sequence[Any]], align: str | None = None) -> str:
    rows = [[str(c) for c in row] for row in rows]
    align = align or ("l" * 2 + "r" * (len(header) - 2))
    marks = {"l": ":---", "r": "---:", "c": ":---:"}
    out = ["| " + " | ".join(header) + " |", "|" + "|".join(marks[a] for a in align[: len(header)]) + "|"]
    out += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(out)


# ------------------------------------------------------------------------------- selection


def by_scenario(results: Iterable[Result], scenario: str) -> list[Result]:
    return [r for r in results if r.scenario == scenario]


def copy_bandwidth_by_size(results: Iterable[Result]) -> dict[int, float]:
    """Copy bandwidth (B/s) measured in the same run, by payload bytes."""
    return {r.nbytes: r.throughput() for r in results if r.scenario == "copy" and r.samples.get("copy")}


def _nearest(table: dict[int, float], nbytes: int) -> float | None:
    if not table:
        return None
    key = min(table, key=lambda k: abs(math.log(max(k, 1)) - math.log(max(nbytes, 1))))
    return table[key]


def bandwidth(r: Result) -> float | None:
    """Bytes/s to one reader: to a fully read object where measured (see measure.bandwidth_metric)."""
    metric = "completion_touched" if r.samples.get("completion_touched") else r.primary
    med = _median(r, metric)
    return r.nbytes / med if med and r.nbytes else None


def efficiency(r: Result, copy_table: dict[int, float]) -> float | None:
    if r.extra.get("efficiency") is not None:
        return float(r.extra["efficiency"])
    bw, ref = bandwidth(r), _nearest(copy_table, r.nbytes)
    return bw / ref if bw and ref else None


# ------------------------------------------------------------------------------------- CSV


def _stats(r: Result, metric: str, prefix: str = "") -> dict[str, Any]:
    s = r.samples.get(metric)
    if not s:
        return {f"{prefix}{k}{'' if k == 'n' else '_s'}": "" for k in STAT_FIELDS}
    d = summarize(s).as_dict()
    return {f"{prefix}{k}{'' if k == 'n' else '_s'}": d[k] for k in STAT_FIELDS}


def _case(r: Result) -> dict[str, Any]:
    return {
        "scenario": r.scenario,
        "backend": r.backend,
        "mode": r.mode,
        "payload": r.payload,
        "size": r.size,
        "nbytes": r.nbytes,
        "ranks": r.ranks,
        "variant": r.variant,
        "kind": r.extra.get("kind", ""),
        "group": r.extra.get("group", ""),
    }


def _write_csv(path: Path, rows: list[dict[str, Any]]) -> Path | None:
    if not rows:
        return None
    fields: list[str] = []
    for row in rows:
        fields.extend(k for k in row if k not in fields)
    with path.open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=fields)
        w.writeheader()
        for row in rows:
            w.writerow({k: _csv_value(v) for k, v in row.items()})
    return path


def _csv_value(v: Any) -> Any:
    if isinstance(v, float):
        return "" if not math.isfinite(v) else f"{v:.6g}"
    return "" if v is None else v


def _sorted(results: Iterable[Result]) -> list[Result]:
    return sorted(results, key=lambda r: (_kind_order(r.payload), r.size, _backend_order(r.backend), r.mode, r.variant))


def csv_rows(results: Sequence[Result]) -> dict[str, list[dict[str, Any]]]:
    """The rows of every CSV file, by file name."""
    bcast = _sorted(by_scenario(results, "broadcast"))
    copies = copy_bandwidth_by_size(results)
    out: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for r in bcast:
        out["write_summary.csv"].append({**_case(r), **_stats(r, "write", "write_")})
        row = {**_case(r)}
        for metric in ("read_avg", "read_min", "read_max", "touched_avg", "touched_max"):
            row[f"{metric}_median_s"] = _median(r, metric)
        row.update(_stats(r, "completion", "completion_"))
        row["completion_touched_median_s"] = _median(r, "completion_touched")
        med = _median(r, "read_avg")
        row["reads_per_s"] = 1 / med if med else None
        row["verified_checks"] = (r.extra.get("verified") or {}).get("checked")
        row["verified_failed"] = (r.extra.get("verified") or {}).get("failed")
        out["read_summary.csv"].append(row)
    for r in _sorted(x for x in results if x.scenario in ("broadcast", "pingpong", "stream")):
        metric = "completion_touched" if r.samples.get("completion_touched") else r.primary
        med = _median(r, metric)
        bw = bandwidth(r)
        readers = r.extra.get("readers", 1) if r.scenario != "pingpong" else 1
        ref = _nearest(copies, r.nbytes)
        out["throughput_summary.csv"].append({
            **_case(r),
            "metric": metric,
            "median_s": med,
            "MB_per_s": bw / 1e6 if bw else None,
            "aggregate_MB_per_s": bw * readers / 1e6 if bw else None,
            "ops_per_s": 1 / med if med else None,
            "copy_MB_per_s": (r.extra.get("copy_bandwidth_Bps") or ref or 0) / 1e6 or None,
            "efficiency": efficiency(r, copies),
        })
    for r in _sorted(by_scenario(results, "pingpong")):
        med = _median(r, "latency")
        out["latency_summary.csv"].append({
            **_case(r), **_stats(r, "latency", "latency_"),
            "bandwidth_MB_per_s": r.nbytes / med / 1e6 if med else None,
        })
    for r in _sorted(by_scenario(results, "stream")):
        send, deliv = _median(r, "send"), _median(r, "delivered")
        out["stream_summary.csv"].append({
            **_case(r), "window": r.extra.get("window"),
            "send_median_s": send, "delivered_median_s": deliv,
            "send_msgs_per_s": 1 / send if send else None,
            "delivered_msgs_per_s": 1 / deliv if deliv else None,
            "send_MB_per_s": r.nbytes / send / 1e6 if send else None,
            "delivered_MB_per_s": r.nbytes / deliv / 1e6 if deliv else None,
        })
    for r in sorted(by_scenario(results, "granularity"), key=lambda r: (_backend_order(r.backend), r.mode, r.extra.get("work_s", 0))):
        rt, work, over = _median(r, "roundtrip"), _median(r, "work"), _median(r, "overhead")
        out["granularity_summary.csv"].append({
            **_case(r), "work_s": r.extra.get("work_s"), "roundtrip_median_s": rt,
            "work_median_s": work, "overhead_median_s": over,
            "efficiency": (work / rt) if (work and rt) else (0.0 if rt else None),
            "tasks_per_s": 1 / rt if rt else None,
        })
    for r in sorted(by_scenario(results, "copy"), key=lambda r: r.nbytes):
        out["copy_bandwidth.csv"].append({**_case(r), **_stats(r, "copy", "copy_"), "MB_per_s": r.throughput() / 1e6})
    for r in _sorted(results):
        for metric in sorted(r.samples):
            if r.samples[metric]:
                out["all_results.csv"].append({"key": r.key, **_case(r), "metric": metric,
                                               "primary": metric == r.primary, **_stats(r, metric)})
    return out


# ---------------------------------------------------------------------------------- plots


def _mpl() -> tuple[Any, Any]:
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    return Figure, FigureCanvasAgg


def _time_formatter() -> Any:
    from matplotlib.ticker import FuncFormatter

    return FuncFormatter(lambda v, _: fmt_time(v).replace(".0 ", " ") if v > 0 else "0")


def _bytes_formatter() -> Any:
    from matplotlib.ticker import FuncFormatter

    return FuncFormatter(lambda v, _: fmt_size(int(round(v))) if v >= 1 else f"{v:g} B")


def _style(backend: str, mode: str) -> dict[str, Any]:
    import matplotlib

    colors = matplotlib.colormaps["tab10"].colors
    markers = "osD^vP*Xh"
    i = _backend_order(backend)[0]
    return {
        "color": colors[i % len(colors)],
        "marker": markers[i % len(markers)],
        "linestyle": "-" if mode == "native" else "--",
        "markersize": 5,
        "linewidth": 1.6,
    }


def _panels(kinds: Sequence[str]) -> tuple[int, int]:
    n = len(kinds)
    return (1, n) if n <= 2 else (2, (n + 1) // 2)


def _series(results: Iterable[Result], value: Callable[[Result], float | None]) -> dict[tuple[str, str], list[tuple[int, float]]]:
    lines: dict[tuple[str, str], list[tuple[int, float]]] = defaultdict(list)
    for r in results:
        v = value(r)
        if v is not None and math.isfinite(v) and v > 0:
            lines[(r.backend, r.mode)].append((max(r.nbytes, 1), v))
    return {k: sorted(v) for k, v in sorted(lines.items(), key=lambda kv: (_backend_order(kv[0][0]), kv[0][1]))}


def _save(fig: Any, canvas_cls: Any, path: Path) -> Path:
    canvas_cls(fig)
    fig.savefig(path, dpi=100)
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
) -> Path | None:
    """One panel per payload kind: ``value`` against payload bytes, a line per backend/mode."""
    kinds = sorted({r.payload for r in results}, key=_kind_order)
    if not kinds or not any(value(r) for r in results):
        return None
    Figure, Canvas = _mpl()
    rows, cols = _panels(kinds)
    fig = Figure(figsize=(5.2 * cols + 2.4, 4.0 * rows + 0.4), layout="constrained")
    axes = fig.subplots(rows, cols, squeeze=False)
    handles: dict[str, Any] = {}
    for ax, kind in zip(axes.flat, kinds):
        scale = 1e-6 if y == "rate" else 1.0  # rates are drawn in MB/s
        for (backend, mode), pts in _series([r for r in results if r.payload == kind], value).items():
            xs, ys = zip(*pts)
            (h,) = ax.plot(xs, [v * scale for v in ys], label=f"{backend} ({mode})", **_style(backend, mode))
            handles.setdefault(f"{backend} ({mode})", h)
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
        ax.xaxis.set_major_formatter(_bytes_formatter())
        fmt = {"time": _time_formatter, "rate": _number_formatter, "ratio": _percent_formatter}.get(y)
        if fmt is not None:
            _log_labels(ax.yaxis, fmt(), ax.get_ylim())
        _log_labels(ax.xaxis, _bytes_formatter(), ax.get_xlim())
        ax.grid(True, which="major", alpha=0.35)
    for ax in list(axes.flat)[len(kinds):]:
        ax.set_visible(False)
    fig.suptitle(title + (f"\n{subtitle}" if subtitle else ""), fontsize=12)
    fig.legend(list(handles.values()), list(handles.keys()), loc="outside right center",
               fontsize=9, title="backend (mode)\nsolid native, dashed bytes", title_fontsize=9, frameon=False)
    return _save(fig, Canvas, path)


def plot_granularity(results: Sequence[Result], path: Path) -> Path | None:
    res = [r for r in results if r.samples.get("overhead")]
    if not res:
        return None
    Figure, Canvas = _mpl()
    fig = Figure(figsize=(13.5, 4.4), layout="constrained")
    ax1, ax2 = fig.subplots(1, 2)
    groups: dict[tuple[str, str], list[Result]] = defaultdict(list)
    for r in res:
        groups[(r.backend, r.mode)].append(r)
    for (backend, mode), rs in sorted(groups.items(), key=lambda kv: (_backend_order(kv[0][0]), kv[0][1])):
        rs.sort(key=lambda r: r.extra.get("work_s", 0))
        work = [max(r.extra.get("work_s", 0), 1e-6) for r in rs]
        over = [_median(r, "overhead") for r in rs]
        eff = [(_median(r, "work") or 0) / (_median(r, "roundtrip") or 1) for r in rs]
        style = _style(backend, mode)
        ax1.plot(work, [max(o or 1e-9, 1e-9) for o in over], label=f"{backend} ({mode})", **style)
        ax2.plot(work, eff, label=f"{backend} ({mode})", **style)
    for ax in (ax1, ax2):
        ax.set_xscale("log")
        ax.set_xlabel("work per task (sleep; 0 drawn at 1 µs)")
        ax.xaxis.set_major_formatter(_time_formatter())
        ax.grid(True, alpha=0.35)
    ax1.set_yscale("log")
    _log_labels(ax1.yaxis, _time_formatter(), ax1.get_ylim())
    ax1.set_ylabel("overhead per round trip (round trip - work)")
    ax1.set_title("overhead per task")
    ax2.set_ylim(0, 1.05)
    ax2.set_ylabel("efficiency = work / round trip")
    ax2.set_title("how small can a task be (seed 003)")
    handles, labels = ax1.get_legend_handles_labels()
    fig.legend(handles, labels, loc="outside right center", fontsize=9, frameon=False,
               title="backend (mode)", title_fontsize=9)
    return _save(fig, Canvas, path)


def plot_stream(results: Sequence[Result], path: Path) -> Path | None:
    res = [r for r in results if r.samples.get("delivered")]
    if not res:
        return None
    Figure, Canvas = _mpl()
    fig = Figure(figsize=(13.5, 4.4), layout="constrained")
    ax1, ax2 = fig.subplots(1, 2)
    for metric, ax, what in (("delivered", ax1, "delivered (acknowledged)"), ("send", ax2, "send-only (write() returned)")):
        for (backend, mode), pts in _series(res, lambda r, m=metric: (r.nbytes / _median(r, m)) if _median(r, m) else None).items():
            xs, ys = zip(*pts)
            ax.plot(xs, ys, label=f"{backend} ({mode})", **_style(backend, mode))
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_title(f"stream to every reader: {what}")
        ax.set_xlabel("message size (MB = 10^6 B)")
        ax.set_ylabel("MB/s per reader (10^6 B/s)")
        _log_labels(ax.xaxis, _bytes_formatter(), ax.get_xlim())
        _log_labels(ax.yaxis, _rate_formatter(), ax.get_ylim())
        ax.grid(True, alpha=0.35)
    handles, labels = ax1.get_legend_handles_labels()
    fig.legend(handles, labels, loc="outside right center", fontsize=9, frameon=False,
               title="backend (mode)\nsolid native, dashed bytes", title_fontsize=9)
    return _save(fig, Canvas, path)


def _log_labels(axis: Any, formatter: Any, lim: tuple[float, float]) -> None:
    """Our labels on a log axis: major ticks, and minor ones too when it spans under a decade."""
    from matplotlib.ticker import NullFormatter

    from matplotlib.ticker import FuncFormatter

    axis.set_major_formatter(formatter)
    lo, hi = sorted(lim)
    if lo <= 0:
        axis.set_minor_formatter(NullFormatter())
        return
    majors = sum(1 for k in range(math.floor(math.log10(lo)), math.ceil(math.log10(hi)) + 1) if lo <= 10**k <= hi)
    if majors >= 3:
        axis.set_minor_formatter(NullFormatter())
        return
    keep = (2, 5) if hi / lo > 4 else (2, 3, 4, 5, 6, 8)

    def minor(v: float, pos: Any) -> str:
        lead = round(v / 10 ** math.floor(math.log10(v) + 1e-9)) if v > 0 else 0
        return formatter(v, pos) if lead in keep else ""

    axis.set_minor_formatter(FuncFormatter(minor))


def _rate_formatter() -> Any:
    """Axis in B/s, labelled in MB/s."""
    from matplotlib.ticker import FuncFormatter

    return FuncFormatter(lambda v, _: _plain_number(v / 1e6))


def _number_formatter() -> Any:
    from matplotlib.ticker import FuncFormatter

    return FuncFormatter(lambda v, _: _plain_number(v))


def _percent_formatter() -> Any:
    from matplotlib.ticker import FuncFormatter

    return FuncFormatter(lambda v, _: f"{v * 100:g}%")


def _plain_number(v: float) -> str:
    if v <= 0:
        return "0"
    return f"{v:,.0f}" if v >= 1 else f"{v:.2g}"


def write_plots(results: Sequence[Result], out: Path) -> list[Path]:
    bcast = by_scenario(results, "broadcast")
    copies = copy_bandwidth_by_size(results)
    readers = sorted({r.extra.get("readers") for r in bcast if r.extra.get("readers")})
    who = f"1 writer, {'/'.join(map(str, readers))} readers" if readers else "1 writer, N readers"
    made = [
        plot_by_kind(bcast, lambda r: _median(r, "write"), out / "write_performance.png",
                     f"Broadcast write time ({who})", "median write time", subtitle="time of write() on the writer"),
        plot_by_kind(bcast, lambda r: _median(r, "read_avg"), out / "read_performance.png",
                     f"Broadcast read time ({who})", "median read time (avg over readers)",
                     subtitle="read() until a usable object; a store's read starts after the write"),
        plot_by_kind(bcast, lambda r: _median(r, "completion"), out / "completion.png",
                     f"Broadcast completion ({who})", "median completion time",
                     subtitle="barrier exit until the last reader has a usable object (max over readers)"),
        plot_by_kind(bcast, bandwidth, out / "throughput.png", f"Broadcast throughput per reader ({who})",
                     "MB/s per reader (10^6 B/s)", y="rate", reference=copies,
                     reference_label="numpy copy (same run)",
                     subtitle="payload bytes / completion to a fully read object"),
        plot_by_kind(bcast, lambda r: efficiency(r, copies), out / "efficiency.png",
                     "Broadcast efficiency: fraction of this machine's copy bandwidth", "bandwidth / copy bandwidth",
                     y="ratio", subtitle="100% = as fast as one numpy copy of the payload (to a fully read object)"),
        plot_by_kind(by_scenario(results, "pingpong"), lambda r: _median(r, "latency"), out / "latency.png",
                     "Ping-pong latency (round trip / 2, 2 ranks)", "median latency"),
        plot_stream(by_scenario(results, "stream"), out / "stream.png"),
        plot_granularity(by_scenario(results, "granularity"), out / "granularity.png"),
    ]
    return [p for p in made if p is not None]


# -------------------------------------------------------------------------------- markdown


def relative_speed_table(results: Sequence[Result], copies: dict[int, float] | None = None) -> str:
    """Seed 000's table for one payload kind and size: backends by completion, relative speed."""
    copies = copies or {}
    rows = [r for r in results if _median(r, "completion")]
    if not rows:
        return ""
    rows.sort(key=lambda r: _median(r, "completion") or math.inf)
    best = _median(rows[0], "completion") or 1.0
    lines = []
    for i, r in enumerate(rows):
        c = _median(r, "completion") or math.inf
        rel = "baseline (1.00x)" if i == 0 else f"{c / best:.2f}x slower"
        eff = efficiency(r, copies)
        ver = r.extra.get("verified") or {}
        lines.append([
            r.backend, r.mode, r.extra.get("kind", ""), fmt_time(_median(r, "write")),
            fmt_time(_median(r, "read_avg")), fmt_time(c), fmt_time(_median(r, "completion_touched")), rel,
            fmt_pct(eff),
            f"{ver.get('checked', 0) - ver.get('failed', 0)}/{ver.get('checked', 0)}" if ver else "-",
        ])
    return _table(
        ["Backend", "Mode", "Kind", "Median write", "Median read", "Completion", "Completion, touched",
         "Relative speed", "Copy eff.", "Verified"],
        lines, "lll" + "r" * 7,
    )


def _by_size_table(results: Sequence[Result], value: Callable[[Result], str]) -> str:
    sizes = sorted({r.size for r in results})
    rows: dict[tuple[str, str], dict[int, str]] = defaultdict(dict)
    for r in results:
        rows[(r.backend, r.mode)][r.size] = value(r)
    keys = sorted(rows, key=lambda k: (_backend_order(k[0]), k[1]))
    labels = {r.size: _size_label(r) for r in results}
    return _table(["Backend", "Mode", *[labels[s] for s in sizes]],
                  [[b, m, *[rows[(b, m)].get(s, "-") for s in sizes]] for b, m in keys])


def headline(results: Sequence[Result]) -> str:
    """The summary printed at the end of a run: per payload kind, the relative speed table at
    the largest size."""
    copies = copy_bandwidth_by_size(results)
    bcast = by_scenario(results, "broadcast")
    parts = []
    for kind in sorted({r.payload for r in bcast}, key=_kind_order):
        of_kind = [r for r in bcast if r.payload == kind]
        top = max(r.size for r in of_kind)
        at = [r for r in of_kind if r.size == top]
        ranks = sorted({r.ranks for r in at})
        parts.append(f"### Broadcast, {kind} payload, {_size_label(at[0])}, {'/'.join(map(str, ranks))} ranks\n\n"
                     + relative_speed_table(at, copies))
    pp = [r for r in by_scenario(results, "pingpong") if _median(r, "latency")]
    if pp:
        small = min(r.nbytes for r in pp)
        at = sorted((r for r in pp if r.nbytes == small), key=lambda r: _median(r, "latency") or 0)
        parts.append(f"### Ping-pong latency at {fmt_size(small)} (round trip / 2)\n\n" + _table(
            ["Backend", "Mode", "Median latency", "Mean latency"],
            [[r.backend, r.mode, fmt_time(_median(r, "latency")), fmt_time(float(np.mean(r.samples["latency"])))]
             for r in at]))
    return "\n\n".join(parts)


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
        "includes waiting for delivery); *completion* is from the common barrier to the moment the last "
        "reader holds a usable object (max over readers); *touched* adds reading every cache line of it, "
        "so a zero-copy view does not win for free. Medians over the iterations; copy efficiency = "
        "bandwidth to a fully read object / numpy copy bandwidth measured in the same run."
    )
    out.append("")
    head = headline(results)
    if head:
        out += ["## Summary", "", head, ""]
    bcast = by_scenario(results, "broadcast")
    if bcast:
        out += ["## Broadcast: completion time against size (max over readers)", ""]
        for kind in sorted({r.payload for r in bcast}, key=_kind_order):
            of_kind = [r for r in bcast if r.payload == kind]
            out += [f"### {kind}", "", _by_size_table(of_kind, lambda r: fmt_time(_median(r, "completion"))), ""]
        out += ["## Write time against size (seed 001)", ""]
        for kind in sorted({r.payload for r in bcast}, key=_kind_order):
            of_kind = [r for r in bcast if r.payload == kind]
            out += [f"### {kind}", "", _by_size_table(of_kind, lambda r: fmt_time(_median(r, "write"))), ""]
        out += ["## Read time against size (average over readers; seed 001)", ""]
        for kind in sorted({r.payload for r in bcast}, key=_kind_order):
            of_kind = [r for r in bcast if r.payload == kind]
            out += [f"### {kind}", "", _by_size_table(of_kind, lambda r: fmt_time(_median(r, "read_avg"))), ""]
        out += ["## Throughput per reader to a fully read object (and fraction of copy bandwidth)", ""]
        for kind in sorted({r.payload for r in bcast}, key=_kind_order):
            of_kind = [r for r in bcast if r.payload == kind]

            def cell(r: Result) -> str:
                eff = efficiency(r, copies)
                return f"{fmt_rate(bandwidth(r))} ({fmt_pct(eff)})" if eff is not None else fmt_rate(bandwidth(r))

            out += [f"### {kind}", "", _by_size_table(of_kind, cell), ""]
    pp = by_scenario(results, "pingpong")
    if pp:
        out += ["## Ping-pong latency (round trip / 2) and bandwidth", ""]
        for kind in sorted({r.payload for r in pp}, key=_kind_order):
            of_kind = [r for r in pp if r.payload == kind]
            out += [f"### {kind}", "", _by_size_table(
                of_kind, lambda r: f"{fmt_time(_median(r, 'latency'))} / {fmt_rate(r.throughput('latency'))}"), ""]
    st = by_scenario(results, "stream")
    if st:
        out += ["## Stream: messages per second, delivered (send-only)", ""]
        for kind in sorted({r.payload for r in st}, key=_kind_order):
            of_kind = [r for r in st if r.payload == kind]

            def scell(r: Result) -> str:
                d, s = _median(r, "delivered"), _median(r, "send")
                return f"{1 / d:,.0f} ({1 / s:,.0f}) msg/s" if d and s else "-"

            out += [f"### {kind}", "", _by_size_table(of_kind, scell), ""]
    gr = by_scenario(results, "granularity")
    if gr:
        works = sorted({r.extra.get("work_s", 0.0) for r in gr})
        rows: dict[tuple[str, str], dict[float, str]] = defaultdict(dict)
        for r in gr:
            over, rt, work = _median(r, "overhead"), _median(r, "roundtrip"), _median(r, "work") or 0.0
            rows[(r.backend, r.mode)][r.extra.get("work_s", 0.0)] = (
                f"{fmt_time(over)} ({work / rt:.0%})" if rt else "-")
        out += ["## Granularity: overhead per round trip (efficiency = work / round trip; seed 003)", "",
                _table(["Backend", "Mode", *[f"work {fmt_time(w) if w else '0'}" for w in works]],
                       [[b, m, *[rows[(b, m)].get(w, "-") for w in works]]
                        for b, m in sorted(rows, key=lambda k: (_backend_order(k[0]), k[1]))]), ""]
    if copies:
        out += ["## Copy bandwidth of this machine (numpy copy into a touched destination, same run)", "",
                _table(["Size", "Bandwidth"], [[fmt_size(n), fmt_rate(bw)] for n, bw in sorted(copies.items())], "lr"),
                ""]
    if any(r.scenario == "mpi-method" for r in results):
        out += ["## MPI methods (seed 004)", "", "See [mpi-methods.md](mpi-methods.md).", ""]
    s2 = sorted(by_scenario(results, "seed002"), key=lambda r: _median(r, r.primary) or 0)
    if s2:
        copy = next((_median(r, r.primary) for r in s2 if r.backend == "copy"), None)
        out += [f"## Seed 002: a {fmt_size(s2[0].nbytes)} array from one process to another", "",
                "From the put until the consumer holds the array (see seed002.json).", "",
                _table(["Path", "Median", "Samples", "x one copy"],
                       [[r.backend, fmt_time(_median(r, r.primary)), len(r.samples[r.primary]),
                         f"{(_median(r, r.primary) or 0) / copy:.2f}x" if copy else "-"] for r in s2], "lrrr"), ""]
    other = sorted({r.scenario for r in results}
                   - {"broadcast", "pingpong", "stream", "granularity", "copy", "mpi-method", "seed002"})
    if other:
        out += ["## Other results", "", f"Scenarios {', '.join(other)}: see all_results.csv.", ""]
    failures = rs.env.get("failures") if rs.env else None
    if failures:
        out += ["## Cases that failed", ""] + [f"- {f}" for f in failures] + [""]
    if files:
        out += ["## Files", ""] + [f"- [{p.name}]({p.name})" for p in files] + [""]
    return "\n".join(out)


# ------------------------------------------------------------------------------------- API


def write_report(resultset: ResultSet, out_dir: str | Path, plots: bool = True) -> Path:
    """Write CSVs, PNGs (unless ``plots`` is False), summary.md (and seed 004's report if there
    are MPI method cases) into ``out_dir``; return the path of summary.md."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    results = list(resultset.results)
    files: list[Path] = []
    for name, rows in csv_rows(results).items():
        p = _write_csv(out / name, rows)
        if p:
            files.append(p)
    if plots:
        files.extend(write_plots(results, out))
    if plots and any(r.scenario == "mpi-method" for r in results):
        try:
            from .seed004 import write_mpi_method_report
        except ImportError:
            pass
        else:
            files.extend(Path(p) for p in write_mpi_method_report(results, out))
    summary = out / "summary.md"
    summary.write_text(markdown(resultset, sorted(set(files), key=lambda p: (p.suffix, p.name))) + "\n")
    return summary


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("results", help="a results JSON file (ipcbench run, pytest --ipc-report)")
    parser.add_argument("--out", help="folder for the report (default: beside the results file)")
    parser.add_argument("--no-plots", action="store_true", help="tables and CSV only (no matplotlib)")


def run(args: argparse.Namespace) -> int:
    rs = ResultSet.load(args.results)
    out = Path(args.out) if args.out else Path(args.results).resolve().parent
    summary = write_report(rs, out, plots=not args.no_plots)
    print(headline(rs.results) or "(no broadcast or ping-pong results)")
    print(f"\nreport: {summary}")
    return 0


COMMANDS = {"report": ("write CSV, PNG plots and markdown tables from a results JSON file", configure, run)}
