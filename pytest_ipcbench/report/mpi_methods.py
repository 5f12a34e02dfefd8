"""Report of the MPI method matrix (scenario ``mpi-method``): the C++ benchmark's tables, a plot,
a C++ comparison.

One cohesive thing: the MPI method matrix's report, whose tables and plot read the same rows (each
result's median ``transfer`` time; other scenarios ignored; no MPI needed).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..core.units import format_bytes, format_ratio, format_time
from ..mpi_methods.configs import CONFIG_ORDER, SCENARIO, SHAPE_OF_PAYLOAD, SHAPE_TITLES, config_of_size
from ..mpi_methods.methods import METHOD_NAMES, METHODS
from ..results.results import Result
from .common import table

# The C++ benchmark (README, "Credits"; its "Performance Results"): C++ with Google
# Benchmark, GCC -O3, 4 processes, average time per operation, converted here to microseconds.
# The C++ benchmark's size labels (11 KB .. 420 MB) are KiB/MiB of the same data (e.g. 440e6 B = 420 MiB).
CPP_SIZE_LABELS = {
    "Small": "11 KB",
    "Medium": "107 KB",
    "Large": "1.05 MB",
    "XLarge": "10.5 MB",
    "XXLarge": "105 MB",
    "XXXLarge": "420 MB",
}
CPP_FIGURES_US: dict[str, dict[str, dict[str, float]]] = {
    "2d": {
        "Small": {
            "Pack MPI": 7.5, "Raw MPI": 7.6, "RDMA MPI": 8.4, "Bcast MPI": 8.5,
            "Datatype MPI": 8.7, "Boost Packed MPI": 12.3, "Boost MPI": 20.8,
        },
        "Medium": {
            "Bcast MPI": 24.9, "Datatype MPI": 25.3, "Raw MPI": 27.2, "RDMA MPI": 42.2,
            "Pack MPI": 45.4, "Boost Packed MPI": 61.1, "Boost MPI": 103.0,
        },
        "Large": {
            "Datatype MPI": 188.0, "Bcast MPI": 193.0, "Pack MPI": 282.0, "RDMA MPI": 306.0,
            "Raw MPI": 510.0, "Boost Packed MPI": 542.0, "Boost MPI": 821.0,
        },
        "XLarge": {
            "Bcast MPI": 4_000.0, "Datatype MPI": 5_900.0, "Pack MPI": 6_200.0, "RDMA MPI": 6_300.0,
            "Raw MPI": 10_500.0, "Boost Packed MPI": 18_400.0, "Boost MPI": 25_400.0,
        },
        "XXLarge": {
            "Raw MPI": 85_000.0, "Bcast MPI": 86_000.0, "Datatype MPI": 99_000.0,
            "Pack MPI": 179_000.0, "RDMA MPI": 268_000.0, "Boost Packed MPI": 452_000.0,
            "Boost MPI": 705_000.0,
        },
        "XXXLarge": {
            "Bcast MPI": 496_000.0, "Raw MPI": 501_000.0, "Datatype MPI": 522_000.0,
            "Pack MPI": 829_000.0, "Boost Packed MPI": 2_162_000.0, "Boost MPI": 3_268_000.0,
            "RDMA MPI": 3_428_000.0,
        },
    },
    "1d": {
        "Small": {"Bcast MPI 1D": 4.2, "Raw MPI 1D": 4.2, "Boost MPI 1D": 7.2, "RDMA MPI 1D": 7.5},
        "Medium": {"Bcast MPI 1D": 26.7, "Raw MPI 1D": 26.9, "RDMA MPI 1D": 33.9, "Boost MPI 1D": 46.4},
        "Large": {"Bcast MPI 1D": 212.0, "RDMA MPI 1D": 219.0, "Raw MPI 1D": 256.0, "Boost MPI 1D": 329.0},
        "XLarge": {
            "Raw MPI 1D": 3_700.0, "RDMA MPI 1D": 4_500.0, "Bcast MPI 1D": 5_100.0, "Boost MPI 1D": 8_500.0,
        },
        "XXLarge": {
            "Raw MPI 1D": 52_800.0, "Bcast MPI 1D": 70_800.0, "Boost MPI 1D": 180_000.0,
            "RDMA MPI 1D": 211_000.0,
        },
        "XXXLarge": {
            "Raw MPI 1D": 205_000.0, "Bcast MPI 1D": 359_000.0, "Boost MPI 1D": 891_000.0,
            "RDMA MPI 1D": 3_050_000.0,
        },
    },
}
CPP_RANKS = 4

# Our method -> the C++ benchmark's method it corresponds to. pickle (lowercase comm.bcast) is the
# analogue of Boost.MPI's serialization; the C++ benchmark's RDMA used fences. ibcast, rma-lock and pkl5
# have no counterpart in the C++ benchmark's tables (its "Bcast MPI" row covers MPI_Bcast).
CPP_EQUIVALENT: dict[str, dict[str, str]] = {
    "2d": {
        "p2p": "Raw MPI",
        "bcast": "Bcast MPI",
        "pack": "Pack MPI",
        "datatype": "Datatype MPI",
        "rma-fence": "RDMA MPI",
        "pickle": "Boost MPI",
    },
    "1d": {
        "p2p": "Raw MPI 1D",
        "bcast": "Bcast MPI 1D",
        "rma-fence": "RDMA MPI 1D",
        "pickle": "Boost MPI 1D",
    },
}


# ------------------------------------------------------------------------------------ helpers


@dataclass(frozen=True)
class Row:
    """One case reduced to what the tables need."""

    config: str
    shape: str
    method: str
    ranks: int
    nbytes: int
    median: float  # seconds
    q1: float
    q3: float
    n: int


def _cpp_name(method: str) -> str:
    """The C++ benchmark's name for ``method`` (the shortest of its names there)."""
    return min((names[method] for names in CPP_EQUIVALENT.values() if method in names), key=len)


def method_results(results: Iterable[Result]) -> list[Result]:
    return [r for r in results if r.scenario == SCENARIO]


def _config_of(r: Result) -> str:
    config = r.extra.get("config")
    return str(config) if config else config_of_size(r.size)


def _config_key(config: str) -> tuple[int, str]:
    return (CONFIG_ORDER.index(config), config) if config in CONFIG_ORDER else (len(CONFIG_ORDER), config)


def rows_of(results: Iterable[Result]) -> list[Row]:
    """One :class:`Row` per case; a later result with the same key replaces an earlier one."""
    latest = {r.key: r for r in method_results(results)}
    rows = []
    for r in latest.values():
        samples = np.asarray(r.samples.get(r.primary) or r.samples.get("completion") or [], dtype=float)
        if samples.size == 0:
            continue
        q1, med, q3 = np.percentile(samples, [25, 50, 75])
        rows.append(Row(_config_of(r), SHAPE_OF_PAYLOAD.get(r.payload, str(r.extra.get("shape", r.payload))),
                        r.backend, r.ranks, r.nbytes or r.size, float(med), float(q1), float(q3), int(samples.size)))
    return rows


def _group(rows: Iterable[Row]) -> dict[tuple[int, str, str], list[Row]]:
    """(ranks, shape, config) -> rows sorted fastest first."""
    out: dict[tuple[int, str, str], list[Row]] = defaultdict(list)
    for row in rows:
        out[(row.ranks, row.shape, row.config)].append(row)
    for key in out:
        out[key].sort(key=lambda r: (r.median, r.method))
    return dict(out)


def _size_label(config: str, nbytes: int) -> str:
    return f"{config}, {format_bytes(nbytes)}"


# ------------------------------------------------------------------------------------- tables


def ranking_tables(results: Iterable[Result], shapes: Sequence[str] = ("2d", "1d")) -> str:
    """The per-configuration tables: the methods ranked by median time, 2D then 1D."""
    groups = _group(rows_of(results))
    parts: list[str] = []
    for ranks in sorted({k[0] for k in groups}):
        for shape in shapes:
            configs = sorted({k[2] for k in groups if k[0] == ranks and k[1] == shape}, key=_config_key)
            if not configs:
                continue
            parts.append(f"### {SHAPE_TITLES.get(shape, shape)}, {ranks} ranks")
            for config in configs:
                rows = groups[(ranks, shape, config)]
                best = rows[0].median
                parts.append(
                    f"#### {_size_label(config, rows[0].nbytes)} (C++ benchmark: {CPP_SIZE_LABELS.get(config, '?')})"
                )
                parts.append(table(
                    ("Rank", "Method", "Time", "vs best", "IQR / median", "samples"),
                    [(i + 1, f"**{r.method}**" if i == 0 else r.method, format_time(r.median),
                      format_ratio(r.median / best) if best > 0 else "n/a",
                      f"{(r.q3 - r.q1) / r.median:.0%}" if r.median > 0 else "n/a", r.n) for i, r in enumerate(rows)],
                    "clrrrr"))
    return "\n\n".join(parts)


def pivot_table(results: Iterable[Result], ranks: int | None = None) -> str:
    """One row per configuration and shape, one column per method: median time, fastest in bold."""
    groups = _group(rows_of(results))
    keys = sorted(
        (k for k in groups if ranks is None or k[0] == ranks),
        key=lambda k: (k[0], k[1] != "2d", _config_key(k[2])),
    )
    if not keys:
        return "_No results._"
    methods = sorted({r.method for k in keys for r in groups[k]}, key=_method_key)
    rows = []
    for k in keys:
        by = {r.method: r for r in groups[k]}
        best = groups[k][0].method
        cells = []
        for m in methods:
            r = by.get(m)
            cells.append("" if r is None else f"**{format_time(r.median)}**" if m == best else format_time(r.median))
        rows.append([k[2], k[1].upper(), str(k[0])] + cells)
    return table(["Config", "Shape", "Ranks"] + methods, rows, "llr" + "r" * len(methods))


@dataclass(frozen=True)
class BestPair:
    ranks: int
    config: str
    nbytes: int
    best_2d: Row
    best_1d: Row

    @property
    def ratio(self) -> float:
        return self.best_2d.median / self.best_1d.median if self.best_1d.median > 0 else float("nan")


def best_pairs(results: Iterable[Result]) -> list[BestPair]:
    """Per (ranks, configuration) with both shapes measured: the fastest 2D and 1D methods."""
    groups = _group(rows_of(results))
    out = []
    for ranks, config in sorted({(k[0], k[2]) for k in groups}, key=lambda rc: (rc[0], _config_key(rc[1]))):
        two, one = groups.get((ranks, "2d", config)), groups.get((ranks, "1d", config))
        if two and one:
            out.append(BestPair(ranks, config, one[0].nbytes, two[0], one[0]))
    return out


def _cpp_best(shape: str, config: str) -> tuple[str, float] | None:
    table = CPP_FIGURES_US.get(shape, {}).get(config)
    if not table:
        return None
    name = min(table, key=lambda k: table[k])
    return name, table[name]


def comparison_1d_2d_table(results: Iterable[Result]) -> str:
    """The "1D vs 2D" table: best 2D method, best 1D method, 2D/1D ratio (+ the C++ benchmark's)."""
    rows = []
    for p in best_pairs(results):
        s2, s1 = _cpp_best("2d", p.config), _cpp_best("1d", p.config)
        cpp_ratio = format_ratio(s2[1] / s1[1]) if s2 and s1 else "n/a"
        rows.append((_size_label(p.config, p.nbytes), p.ranks, f"{p.best_2d.method} ({format_time(p.best_2d.median)})",
                     f"{p.best_1d.method} ({format_time(p.best_1d.median)})", format_ratio(p.ratio), cpp_ratio))
    if not rows:
        return "_No configuration has both 1D and 2D results._"
    return table(("Data size", "Ranks", "Best 2D method", "Best 1D method", "2D/1D ratio", "C++ 2D/1D"), rows, "lrllrr")


@dataclass(frozen=True)
class CppComparison:
    config: str
    shape: str
    method: str
    cpp_method: str
    ranks: int
    python: float  # seconds
    cpp: float  # seconds

    @property
    def ratio(self) -> float:
        return self.python / self.cpp


def cpp_comparisons(results: Iterable[Result], ranks: int | None = CPP_RANKS) -> list[CppComparison]:
    """Every measured case with a counterpart in the original C++ benchmark's tables; by default only the runs
    with as many ranks as the C++ benchmark's (4), since its numbers are for 4 processes."""
    out = []
    for row in rows_of(results):
        if ranks is not None and row.ranks != ranks:
            continue
        cpp_name = CPP_EQUIVALENT.get(row.shape, {}).get(row.method)
        cpp_us = CPP_FIGURES_US.get(row.shape, {}).get(row.config, {}).get(cpp_name or "")
        if cpp_name and cpp_us:
            out.append(CppComparison(row.config, row.shape, row.method, cpp_name, row.ranks, row.median, cpp_us * 1e-6))
    out.sort(key=lambda c: (c.ranks, c.shape != "2d", _config_key(c.config), _method_key(c.method)))
    return out


def cpp_comparison_table(results: Iterable[Result], ranks: int | None = CPP_RANKS) -> str:
    """Python against the C++ benchmark's C++: one row per configuration and shape, one column per method
    with a counterpart; each cell is the Python median and the ratio Python/C++."""
    comps = cpp_comparisons(results, ranks)
    if not comps:
        return "_No measured case has a counterpart in the C++ benchmark's tables._"
    methods = sorted({c.method for c in comps}, key=_method_key)
    cells: dict[tuple[int, str, str], dict[str, CppComparison]] = defaultdict(dict)
    for c in comps:
        cells[(c.ranks, c.shape, c.config)][c.method] = c
    header = ["Config", "Shape", "Ranks"] + [f"{m} (C++ {_cpp_name(m)})" for m in methods]
    rows = []
    for (r, shape, config), by_method in cells.items():
        row = [config, shape.upper(), str(r)]
        for m in methods:
            pair = by_method.get(m)
            row.append(f"{format_time(pair.python)} vs {format_time(pair.cpp)}: **{format_ratio(pair.ratio)}**"
                       if pair else "")
        rows.append(row)
    return table(header, rows, "llr" + "r" * len(methods))


def winners_table(results: Iterable[Result]) -> str:
    """Per configuration and shape: our fastest method against the C++ benchmark's fastest."""
    groups = _group(rows_of(results))
    rows = []
    for (ranks, shape, config) in sorted(groups, key=lambda k: (k[0], k[1] != "2d", _config_key(k[2]))):
        ours = groups[(ranks, shape, config)]
        runner = ours[1] if len(ours) > 1 else None
        cpp = _cpp_best(shape, config)
        rows.append((config, shape.upper(), ranks, f"{ours[0].method} ({format_time(ours[0].median)})",
                     f"{runner.method} ({format_time(runner.median)})" if runner else "",
                     f"{cpp[0]} ({format_time(cpp[1] * 1e-6)})" if cpp else "n/a"))
    return table(("Config", "Shape", "Ranks", "Fastest (Python)", "Runner-up", "C++ benchmark's fastest (4 processes)"),
                 rows, "llrlll")


# --------------------------------------------------------------------------------------- plot


def plot_time_vs_size(results: Iterable[Result], path: str | Path) -> Path | None:
    """Log-log plot of median time against size, one line per method, a panel per shape, the C++
    benchmark's fastest method per size a dashed grey line. The PNG path, or None with nothing to plot."""
    rows = rows_of(results)
    if not rows:
        return None
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ranks_list = sorted({r.ranks for r in rows})
    shapes = [s for s in ("1d", "2d") if any(r.shape == s for r in rows)]
    methods = sorted({r.method for r in rows}, key=_method_key)
    cmap = plt.get_cmap("tab10")
    colors = {m: cmap(i % 10) for i, m in enumerate(methods)}
    fig, axes = plt.subplots(
        len(ranks_list), len(shapes), figsize=(6.2 * len(shapes), 4.6 * len(ranks_list)), squeeze=False
    )
    for i, ranks in enumerate(ranks_list):
        for j, shape in enumerate(shapes):
            ax = axes[i][j]
            for m in methods:
                pts = sorted(
                    (r.nbytes, r.median) for r in rows if r.ranks == ranks and r.shape == shape and r.method == m
                )
                if pts:
                    x, y = zip(*pts)
                    ax.plot(x, y, marker="o", ms=3.5, lw=1.4, label=m, color=colors[m])
            sizes = {r.config: r.nbytes for r in rows if r.ranks == ranks and r.shape == shape}
            cpp_pts = [(size, best[1] * 1e-6) for config, size in sizes.items() if (best := _cpp_best(shape, config))]
            if cpp_pts:
                x, y = zip(*sorted(cpp_pts))
                ax.plot(x, y, ls="--", color="0.45", lw=1.2, label="C++ benchmark, fastest (4 procs)")
            ax.set_xscale("log")
            ax.set_yscale("log")
            ax.set_xlabel("payload size (bytes)")
            ax.set_ylabel("time per transfer (s, max over ranks)")
            ax.set_title(f"{SHAPE_TITLES.get(shape, shape)}, {ranks} ranks")
            ax.grid(True, which="both", alpha=0.25)
            ax.legend(fontsize=7.5, ncol=2)
    fig.suptitle("MPI transfer methods (median time per transfer)")
    fig.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def _method_key(name: str) -> tuple[int, str]:
    return (METHOD_NAMES.index(name), name) if name in METHOD_NAMES else (len(METHOD_NAMES), name)


def methods_table() -> str:
    """What each method does for 1D and for 2D (from the method classes)."""
    return table(("Method", "1D", "2D (ragged rows)"),
                 [(name, cls.notes_1d, cls.notes_2d) for name, cls in METHODS.items()], "lll")


# ------------------------------------------------------------------------------------- report


def report_markdown(results: Iterable[Result], plot_name: str | None = "mpi-methods.png") -> str:
    results = method_results(results)
    parts = [
        "# MPI transfer methods: 1D and ragged 2D int32 data",
        "Median time per transfer from rank 0 to every rank; each sample is one transfer timed by "
        "the harness after a barrier, the max over every rank (the root included). MB = 10^6 bytes. "
        f"C++ figures: the C++ MPI benchmark these methods come from, {CPP_RANKS} processes.",
    ]
    if plot_name:
        parts.append(f"![time vs size]({plot_name})")
    parts += [
        "## Median time per method",
        pivot_table(results),
        "## Fastest method per size",
        winners_table(results),
        "## 1D vs 2D",
        comparison_1d_2d_table(results),
        "## Python against the C++ benchmark",
        cpp_comparison_table(results),
        "## Methods ranked, per configuration",
        ranking_tables(results),
        "## What each method does",
        "Receivers know the dtype, the 1D length and the number of 2D rows beforehand; the 2D row "
        "lengths are sent inside every timed transfer.",
        methods_table(),
    ]
    return "\n\n".join(parts) + "\n"


def write_mpi_method_report(results: Iterable[Result], out_dir: str | Path) -> list[Path]:
    """Write ``mpi-methods.md`` and ``mpi-methods.png`` into ``out_dir``; return the paths written."""
    results = method_results(results)
    if not results:
        return []
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    png = plot_time_vs_size(results, out / "mpi-methods.png")
    md = out / "mpi-methods.md"
    md.write_text(report_markdown(results, plot_name=png.name if png else None))
    return [md, png] if png else [md]

