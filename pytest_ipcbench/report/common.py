"""What every part of a report shares: the order of backends and kinds, medians, bandwidth and
efficiency of a result, a markdown table."""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np

from ..backends.base import backend_names
from ..core.units import format_time, size_label
from ..results.results import Result

KIND_ORDER = ("dict", "ndarray", "array1d", "ragged2d", "buffer", "tiny")
STAT_FIELDS = ("n", "median", "mean", "stddev", "min", "max", "q1", "q3", "p10", "p90", "p99")
#: p90 / p10 from which a distribution is called wide: its median alone would mislead
WIDE_SPREAD = 3.0
PERCENTILES = (10, 50, 90, 99)


#: the process model a case ran in (``Result.group``), as reports name it
PROCESS_MODELS = {"mpi": "MPI ranks", "local": "local workers"}


def process_model(r: Result | str) -> str:
    """``MPI ranks`` or ``local workers``: where a case ran (a result, or its ``group``); a rank
    with an MPI runtime in it is timed apart from a plain process: reports never rank them as one."""
    group = r if isinstance(r, str) else r.group
    return PROCESS_MODELS.get(group, group or "-")


def mixed_models_note(results: Sequence[Result]) -> str:
    """A sentence for a table whose rows ran in more than one process model ("" for one model)."""
    models = sorted({process_model(r) for r in results})
    if len(models) < 2:
        return ""
    return (f"These rows ran in different process models ({' and '.join(models)}): an MPI runtime in a "
            "process changes what it measures, so relative speed is given within each process model "
            "(column Processes), never across them.")


def backend_order(name: str) -> tuple[int, str]:
    known = backend_names()
    return (known.index(name) if name in known else len(known), name)


def kind_order(kind: str) -> tuple[int, str]:
    return (KIND_ORDER.index(kind) if kind in KIND_ORDER else len(KIND_ORDER), kind)


def median_of(r: Result, metric: str) -> float | None:
    s = r.samples.get(metric)
    return float(np.median(s)) if s else None


def percentiles_of(r: Result, metric: str) -> tuple[float, ...] | None:
    """(p10, p50, p90, p99) of a metric's samples, or None without samples."""
    s = r.samples.get(metric)
    return tuple(float(v) for v in np.percentile(s, PERCENTILES)) if s else None


def is_wide(r: Result, metric: str) -> bool:
    """p90 / p10 at least :data:`WIDE_SPREAD`: the samples spread too far for one number."""
    p = percentiles_of(r, metric)
    return p is not None and p[0] > 0 and p[2] / p[0] >= WIDE_SPREAD


def wide_note(r: Result, metric: str, what: str) -> str | None:
    """A sentence naming a wide distribution (None when it is not): where the median misleads."""
    if not is_wide(r, metric):
        return None
    p10, p50, p90, p99 = percentiles_of(r, metric) or (0.0,) * 4
    return (f"{r.backend}/{r.mode} {r.payload} {size_of(r)} r{r.ranks}: {what} p10 {format_time(p10)}, "
            f"p50 {format_time(p50)}, p90 {format_time(p90)}, p99 {format_time(p99)} "
            f"(p90/p10 = {p90 / p10:.0f}x): a wide distribution, the median alone hides it")


def size_of(r: Result) -> str:
    if r.payload == "dict":
        return f"{size_label(r.size)} ({r.nbytes // 100} entries)"
    return size_label(r.size)


def table(header: Sequence[str], rows: Iterable[Sequence[Any]], align: str | None = None) -> str:
    rows = [[str(c) for c in row] for row in rows]
    align = align or ("l" * 2 + "r" * (len(header) - 2))
    marks = {"l": ":---", "r": "---:", "c": ":---:"}
    out = ["| " + " | ".join(header) + " |", "|" + "|".join(marks[a] for a in align[: len(header)]) + "|"]
    out += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(out)


def by_scenario(results: Iterable[Result], scenario: str) -> list[Result]:
    return [r for r in results if r.scenario == scenario]


def copy_bandwidth_by_size(results: Iterable[Result]) -> dict[int, float]:
    """Copy bandwidth (B/s) measured in the same run, by payload bytes."""
    return {r.nbytes: r.throughput() for r in results if r.scenario == "copy" and r.samples.get("copy")}


def nearest(table: dict[int, float], nbytes: int) -> float | None:
    if not table:
        return None
    key = min(table, key=lambda k: abs(math.log(max(k, 1)) - math.log(max(nbytes, 1))))
    return table[key]


def efficiency(r: Result, copy_table: dict[int, float]) -> float | None:
    """The result's own efficiency (:meth:`Result.efficiency`), or, for a result recorded
    without a copy reference, against the run's copy measured nearest its size."""
    own = r.efficiency()
    if own is not None:
        return own
    bw, ref = r.bandwidth(), nearest(copy_table, r.nbytes)
    return bw / ref if bw and ref else None
