"""CSV summaries of a run (times in seconds, ``_s`` columns; MB/s = 10**6 B/s)."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence
from typing import Any

from ..results.results import Result
from ..results.stats import summarize
from .common import (
    STAT_FIELDS,
    backend_order,
    by_scenario,
    copy_bandwidth_by_size,
    efficiency,
    kind_order,
    median_of,
    nearest,
    process_model,
)
from .counters import counter_rows


def _stats(r: Result, metric: str, prefix: str = "") -> dict[str, Any]:
    s = r.samples.get(metric)
    d = summarize(s).as_dict() if s else {}
    return {f"{prefix}{k}{'' if k == 'n' else '_s'}": d.get(k, "") for k in STAT_FIELDS}


def _case(r: Result) -> dict[str, Any]:
    return {**{k: getattr(r, k) for k in ("scenario", "backend", "mode", "payload", "size", "nbytes", "ranks",
                                          "variant", "delivery", "group")},
            "processes": process_model(r),  # MPI ranks or local workers: never one population
            "nodes": r.nodes, "test": r.extra.get("test", "")}  # test: the pytest test that measured it


def sorted_results(results: Iterable[Result]) -> list[Result]:
    return sorted(results, key=lambda r: (kind_order(r.payload), r.size, backend_order(r.backend), r.mode, r.variant))


def csv_rows(results: Sequence[Result]) -> dict[str, list[dict[str, Any]]]:
    """The rows of every CSV file, by file name."""
    bcast = sorted_results(by_scenario(results, "broadcast"))
    copies = copy_bandwidth_by_size(results)
    out: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for r in bcast:
        out["write_summary.csv"].append({**_case(r), **_stats(r, "write", "write_")})
        row = {**_case(r)}
        for metric in ("read_avg", "read_min", "read_max", "touched_avg", "touched_max"):
            row[f"{metric}_median_s"] = median_of(r, metric)
        row.update(_stats(r, "completion", "completion_"))
        row["completion_touched_median_s"] = median_of(r, "completion_touched")
        med = median_of(r, "read_avg")
        row["reads_per_s"] = 1 / med if med else None
        row["verified_checks"], row["verified_failed"] = (r.verified.checked, r.verified.failed) if r.verified \
            else (None, None)
        out["read_summary.csv"].append(row)
    for r in sorted_results(x for x in results if x.scenario in ("broadcast", "pingpong", "stream")):
        metric = "completion_touched" if r.samples.get("completion_touched") else r.primary
        med = median_of(r, metric)
        bw = r.bandwidth()
        readers = (r.readers or 1) if r.scenario != "pingpong" else 1
        ref = nearest(copies, r.nbytes)
        out["throughput_summary.csv"].append({
            **_case(r), "metric": metric, "median_s": med, "MB_per_s": bw / 1e6 if bw else None,
            "aggregate_MB_per_s": bw * readers / 1e6 if bw else None, "ops_per_s": 1 / med if med else None,
            "copy_MB_per_s": (r.copy_bandwidth or ref or 0) / 1e6 or None, "efficiency": efficiency(r, copies)})
    for r in sorted_results(by_scenario(results, "pingpong")):
        med = median_of(r, "latency")
        out["latency_summary.csv"].append({
            **_case(r), **_stats(r, "latency", "latency_"),
            "bandwidth_MB_per_s": r.nbytes / med / 1e6 if med else None,
        })
    for r in sorted_results(by_scenario(results, "stream")):
        send, deliv = median_of(r, "send"), median_of(r, "delivered")
        out["stream_summary.csv"].append({
            **_case(r), "window": r.extra.get("window"),
            "send_median_s": send, "delivered_median_s": deliv,
            "send_msgs_per_s": 1 / send if send else None,
            "delivered_msgs_per_s": 1 / deliv if deliv else None,
            "send_MB_per_s": r.nbytes / send / 1e6 if send else None,
            "delivered_MB_per_s": r.nbytes / deliv / 1e6 if deliv else None,
        })
    for r in sorted(by_scenario(results, "granularity"),
                    key=lambda r: (backend_order(r.backend), r.mode, r.extra.get("work_s", 0))):
        rt, work, over = median_of(r, "roundtrip"), median_of(r, "work"), median_of(r, "overhead")
        out["granularity_summary.csv"].append({
            **_case(r), "work_s": r.extra.get("work_s"), "roundtrip_median_s": rt,
            "work_median_s": work, "overhead_median_s": over,
            "efficiency": (work / rt) if (work and rt) else (0.0 if rt else None),
            "tasks_per_s": 1 / rt if rt else None,
        })
    for r in sorted(by_scenario(results, "copy"), key=lambda r: r.nbytes):
        out["copy_bandwidth.csv"].append({**_case(r), **_stats(r, "copy", "copy_"), "MB_per_s": r.throughput() / 1e6})
    for r in sorted_results(results):
        for metric in sorted(r.samples):
            if r.samples[metric]:
                out["all_results.csv"].append({"key": r.key, **_case(r), "metric": metric,
                                               "primary": metric == r.primary, **_stats(r, metric)})
    counted = counter_rows(results)  # report/counters.py
    if counted:
        out["counters.csv"] = counted
    return out
