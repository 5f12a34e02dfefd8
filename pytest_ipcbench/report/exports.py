"""A results file in the formats other tools read (``ipcbench export``; docs/exports.md): Bencher
Metric Format (``bmf``, nanoseconds), github-action-benchmark's ``customSmallerIsBetter``
(microseconds, ``range`` the interval's larger half-width, the only form it reads) and
pytest-benchmark's JSON. Each case's median with its 95% interval, each counter per message an
entry; the in-run references measure the machine, not the code, and are not exported.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ..core.errors import UsageError
from ..core.outdir import write_output
from ..harness.inrun import REFERENCE_SCENARIOS
from ..results.results import Result, ResultSet
from ..results.stats import median_interval

CONFIDENCE = 0.95


def _cases(rs: ResultSet) -> list[Result]:
    return [r for r in rs.results if r.scenario not in REFERENCE_SCENARIOS and r.samples.get(r.primary)]


def _interval(r: Result) -> tuple[float, float, float]:
    samples = r.samples[r.primary]
    low, high = median_interval(samples, CONFIDENCE)
    return r.summary().median, low, high


def counters_per_message(r: Result) -> dict[str, int | float]:
    """{"role counter": per message} of the counters every rank of the role measured (the writer's,
    the largest over the readers); empty when the case was not counted."""
    counted = counter_info(r).get("counters", {})
    return {f"{role} {name}": v for role in ("writer", "reader") for name, v in counted.get(role, {}).items()}


def bmf(rs: ResultSet) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for r in _cases(rs):
        median, low, high = _interval(r)
        measures: dict[str, Any] = {"latency": {"value": median * 1e9, "lower_value": low * 1e9,
                                                "upper_value": high * 1e9}}
        for name, value in counters_per_message(r).items():
            measures[re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-")] = {"value": float(value)}
        out[r.key] = measures
    return out


def github_action_benchmark(rs: ResultSet) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for r in _cases(rs):
        median, low, high = _interval(r)
        us = 1e6
        out.append({"name": r.key, "unit": "us", "value": median * us,
                    "range": f"± {max(median - low, high - median) * us:.6g}",
                    "extra": f"median {r.primary} of {len(r.samples[r.primary])} samples; "
                             f"{CONFIDENCE:.0%} interval {low * us:.6g}-{high * us:.6g} us"})
        for name, value in counters_per_message(r).items():
            out.append({"name": f"{r.key} {name}", "unit": "per message", "value": float(value),
                        "extra": "counted per message (docs/counters.md)"})
    return out


def benchmark_info(result: Result) -> dict[str, Any]:
    """Our fields of a case for pytest-benchmark's ``extra_info`` (the plugin's and the export's)."""
    summary = result.summary()
    info: dict[str, Any] = {
        "key": result.key, "scenario": result.scenario, "backend": result.backend, "mode": result.mode,
        "payload": result.payload, "size": result.size, "nbytes": result.nbytes, "ranks": result.ranks,
        "metric": result.primary, "median_s": summary.median, "samples": summary.n, "plan": result.plan,
        "group": result.group,
    }
    if result.variant:
        info["variant"] = result.variant
    if result.nbytes and summary.median > 0:
        info["throughput_MBps"] = result.nbytes / summary.median / 1e6
    if result.copy_bandwidth:
        info["copy_bandwidth_Bps"] = result.copy_bandwidth
        info["efficiency"] = result.efficiency()
    if result.verified is not None:
        info["verified"] = {"checked": result.verified.checked, "failed": result.verified.failed}
    info.update(counter_info(result))
    return info


def counter_info(result: Result) -> dict[str, Any]:
    """The counters for ``extra_info``: per message, by role (``writer``, ``reader``: the largest
    over the readers), the names of the exact ones, and the absent ones with their reason."""
    c = result.counters
    if c is None:
        return {"counting": result.extra["counting"]} if "counting" in result.extra else {}
    out: dict[str, Any] = {"messages": c.messages, "repeats": c.repeats}
    for role in ("writer", "reader"):
        ranks = [r for r in c.ranks if r.role == role]
        if not ranks:
            continue
        names = [n for n in ranks[0].totals if all(r.has(n) for r in ranks)]
        out[role] = {n: c.cost(role, n) for n in names}
        out[f"{role}_exact"] = [n for n in names if c.exact(role, n)]
        absent = {k: v for r in ranks for k, v in r.absent.items()}
        if absent:
            out[f"{role}_absent"] = absent
    return {"counters": out}


def pytest_benchmark(rs: ResultSet) -> dict[str, Any]:
    import platform

    import pytest_benchmark as pb
    from pytest_benchmark.stats import Stats

    env = rs.env
    git = env.get("git") or {}
    benchmarks = []
    for r in _cases(rs):
        stats = Stats()
        for x in r.samples[r.primary]:
            stats.update(x)
        test = str(r.extra.get("test", ""))
        benchmarks.append({
            "group": r.scenario, "name": r.key, "fullname": f"{test}::{r.key}" if test else r.key,
            "params": {"backend": r.backend, "mode": r.mode, "payload": r.payload, "size": r.size, "ranks": r.ranks},
            "param": r.key, "extra_info": benchmark_info(r),
            "options": {"disable_gc": False, "timer": "ipcbench", "min_rounds": stats.rounds, "max_time": 0.0,
                        "min_time": 0.0, "warmup": False},
            "stats": {**stats.as_dict(), "data": list(stats.data), "iterations": 1},
        })
    system, _, release = str(env.get("platform", platform.platform())).partition("-")
    return {
        "machine_info": {"node": str(env.get("host", "")), "processor": str(env.get("cpu", "")),
                         "machine": platform.machine(),
                         "python_implementation": str(env.get("python", "")).split(" ")[0],
                         "python_version": str(env.get("python", "")).split(" ")[-1], "system": system,
                         "release": release, "cpu": {"brand_raw": str(env.get("cpu", "")), "count": env.get("cores")}},
        "commit_info": {"id": str(git.get("commit") or ""), "dirty": bool(git.get("dirty", False)), "project": "",
                        "branch": ""},
        "benchmarks": benchmarks,
        "datetime": rs.created,
        "version": pb.__version__,
    }


FORMATS: dict[str, Callable[[ResultSet], Any]] = {
    "bmf": bmf, "github-action-benchmark": github_action_benchmark, "pytest-benchmark": pytest_benchmark}


def export(rs: ResultSet, fmt: str) -> str:
    """The results in ``fmt`` (one of :data:`FORMATS`) as JSON text."""
    if fmt not in FORMATS:
        raise UsageError(f"unknown export format {fmt!r}; known: {', '.join(FORMATS)}")
    data = FORMATS[fmt](rs)
    if not data or (isinstance(data, dict) and fmt == "pytest-benchmark" and not data["benchmarks"]):
        raise UsageError("nothing to export: the results file has no case with samples (only references?)")
    return json.dumps(data, indent=2) + "\n"


def write_export(rs: ResultSet, fmt: str, out: Path) -> Path:
    """Write the export at ``out`` whole or not at all, checked as every output (core/outdir.py)."""
    return write_output(out, export(rs, fmt), "--out")
