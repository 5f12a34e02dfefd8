"""An asv suite for another project: times the matrix it declares in ``[tool.ipcbench]``.

A project adopts it with one module in its asv ``benchmarks/`` folder (``ipcbench init-ci --asv``
writes it, and asv.conf.json)::

    # benchmarks/bench_ipcbench.py
    from pytest_ipcbench.runner.asv_suite import *  # noqa: F401,F403

docs/performance-history.md says what it runs and records. The parameters are the case keys as
the *current* pyproject.toml declares them; a commit that cannot run a case skips it. Which
pyproject.toml: ``$IPCBENCH_CONFIG``, else the one next to asv.conf.json (``$ASV_CONF_DIR``), else
the nearest one from the current folder.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

__all__ = ["Declared", "setup_cache", "declared_keys", "config_path"]

#: the counters asv tracks per case, as "role counter" (per message; the largest over readers)
TRACKED_COUNTERS = ("writer syscalls.data", "reader syscalls.data", "writer syscalls.total", "reader syscalls.total",
                    "writer pickle.dumps", "reader pickle.loads", "reader faults.minor", "reader alloc.peak_bytes")

RUN_TIMEOUT = 1800.0
DEFAULT_REPEATS = 3


def repeats() -> int:
    """Runs per commit: ``$IPCBENCH_ASV_REPEATS`` (1 to 20), default :data:`DEFAULT_REPEATS`."""
    text = os.environ.get("IPCBENCH_ASV_REPEATS", "").strip()
    try:
        value = int(text or DEFAULT_REPEATS)
    except ValueError:
        value = 0  # refused below, as a number out of range
    if not 1 <= value <= 20:
        raise ValueError(f"IPCBENCH_ASV_REPEATS={text!r}: expected an integer from 1 to 20")
    return value


def config_path() -> Path | None:
    explicit = os.environ.get("IPCBENCH_CONFIG")
    if explicit:
        return Path(explicit)
    conf_dir = os.environ.get("ASV_CONF_DIR")
    if conf_dir and (Path(conf_dir) / "pyproject.toml").is_file():
        return Path(conf_dir) / "pyproject.toml"
    from ..core.project import find_pyproject

    return find_pyproject()


def declared_keys(path: Path | None = None) -> list[str]:
    """The result keys of the declared matrix (what ``ipcbench run --config`` would record)."""
    from ..core.project import read_config
    from ..core.units import duration_label
    from ..harness.measure import PAIR_SCENARIOS
    from .job import RunOptions
    from .matrix import build_matrix

    path = path or config_path()
    config = read_config(path) if path is not None else None
    if config is None:
        return []
    opts = RunOptions(**config.options)
    cases = build_matrix(opts.level, opts.ranks, opts.backends, opts.modes, opts.kinds, opts.scenarios,
                         opts.sizes, opts.only)
    keys = []
    for c in cases:
        ranks = 2 if c.scenario in PAIR_SCENARIOS else c.ranks
        key = f"{c.scenario}/{c.backend}/{c.mode}/{c.payload_kind}/{c.size}/r{ranks}"
        if c.scenario == "granularity":
            key += f"/work={duration_label(c.work)}"
        keys.append(key)
    return keys


def tracked_counters(path: Path | None = None) -> list[str]:
    """The counters asv tracks for the declared matrix here: none when it does not count, no
    system call counter when this machine cannot count them (their reason is in the results)."""
    from ..core.project import read_config
    from ..core.syscalls import syscall_unavailable
    from .job import RunOptions

    path = path or config_path()
    config = read_config(path) if path is not None else None
    if config is None or RunOptions(**config.options).count is False:  # not given: on
        return []
    syscalls = syscall_unavailable() is None
    return [c for c in TRACKED_COUNTERS if syscalls or " syscalls." not in c]


def setup_cache() -> dict[str, Any]:
    """``repeats()`` runs of the declared matrix: {case key: [median seconds of each run], or "skip: why"};
    each case's counters from the first run (they are counts: exact ones do not move between runs)."""
    path = config_path()
    if path is None:
        return {"*": "skip: no pyproject.toml with a [tool.ipcbench] table"}
    cache: dict[str, Any] = {}
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    for i in range(repeats()):
        out = Path(f"ipcbench-asv-{i + 1}").resolve()
        cmd = [sys.executable, "-m", "pytest_ipcbench", "run", "--config", str(path), "--out", str(out),
               "--progress", "none", "--results-only"]
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=RUN_TIMEOUT)
        except subprocess.TimeoutExpired:
            return {"*": f"skip: ipcbench run took longer than {RUN_TIMEOUT:g} s"}
        results = out / "results.json"
        if not results.is_file():
            last = (proc.stderr.strip().splitlines() or proc.stdout.strip().splitlines() or ["?"])[-1]
            return {"*": f"skip: this commit cannot run the declared matrix: {last}"}
        data = json.loads(results.read_text())
        for r in data.get("results", []):
            stats = r.get("stats", {}).get(r.get("primary", "completion"))
            if stats and stats.get("median", 0) > 0:
                cache.setdefault(r["key"], []).append(float(stats["median"]))
            cache.setdefault(r["key"] + "#counters", _counters(r))
    return cache


def _counters(record: dict[str, Any]) -> dict[str, Any]:
    """{"role counter": per-message value, or "skip: why"} of one results.json record."""
    counters = record.get("counters")
    if not counters:
        why = (record.get("extra") or {}).get("counting", "not counted by this commit")
        return {"*": f"skip: {why}"}
    out: dict[str, Any] = {}
    for tracked in TRACKED_COUNTERS:
        role, name = tracked.split()
        ranks = [x for x in counters.get("ranks", []) if x.get("role") == role]
        values = [x.get("per_message", {}).get(name) for x in ranks]
        if ranks and all(v is not None for v in values):
            out[tracked] = float(max(values))
        else:
            reasons = [x.get("absent", {}).get(name) for x in ranks if name in x.get("absent", {})]
            out[tracked] = f"skip: {reasons[0] if reasons else 'not counted'}"
    return out


setup_cache.timeout = (RUN_TIMEOUT + 60) * DEFAULT_REPEATS  # type: ignore[attr-defined]


class Declared:
    """Each case of the declared matrix: median of its primary metric, in seconds; each commit's
    point is the median over ``repeats()`` runs, with asv's interval over them."""

    params = [declared_keys() or ["(no [tool.ipcbench] table)"]]
    param_names = ["case"]
    timeout = (RUN_TIMEOUT + 60) * DEFAULT_REPEATS

    def setup(self, cache: dict[str, Any], case: str) -> None:
        self._value(cache, case)

    def track_median(self, cache: dict[str, Any], case: str) -> dict[str, Any]:
        """The case's median of each run, as asv's samples: asv records their median and interval
        (asv reads a result with ``samples`` and ``number`` as a timing's; ``number`` is unused)."""
        return {"samples": self._value(cache, case), "number": 1}

    track_median.unit = "seconds"  # type: ignore[attr-defined]

    @staticmethod
    def _value(cache: dict[str, Any], case: str) -> list[float]:
        value = cache.get(case, cache.get("*", "skip: not measured by this commit"))
        if isinstance(value, str):
            raise NotImplementedError(value)
        return [float(x) for x in (value if isinstance(value, list) else [value])]


_COUNTERS = tracked_counters()


class DeclaredCounters:
    """Each case's counters per message (harness/count.py): a step in the history is a changed cost.
    Exported only when :func:`tracked_counters` names some."""

    params = [Declared.params[0], _COUNTERS or list(TRACKED_COUNTERS)]
    param_names = ["case", "counter"]
    timeout = RUN_TIMEOUT + 60

    def setup(self, cache: dict[str, Any], case: str, counter: str) -> None:
        self._value(cache, case, counter)

    def track_count(self, cache: dict[str, Any], case: str, counter: str) -> float:
        return self._value(cache, case, counter)

    track_count.unit = "per message"  # type: ignore[attr-defined]

    @staticmethod
    def _value(cache: dict[str, Any], case: str, counter: str) -> float:
        if "*" in cache:
            raise NotImplementedError(cache["*"])
        counted = cache.get(case + "#counters", {"*": "skip: not measured by this commit"})
        value = counted.get(counter, counted.get("*", "skip: not counted"))
        if isinstance(value, str):
            raise NotImplementedError(value)
        return value


if _COUNTERS:
    __all__.append("DeclaredCounters")


def main(argv: list[str] | None = None) -> int:
    """``python -m pytest_ipcbench.runner.asv_suite plot [RESULTS] [--out PNG]``: every case's
    history with each commit's interval (report/asv_history.py)."""
    import argparse

    from ..core.errors import IpcbenchError
    from ..report.asv_history import load_history, plot_history

    parser = argparse.ArgumentParser(prog="python -m pytest_ipcbench.runner.asv_suite")
    sub = parser.add_subparsers(dest="command", required=True)
    plot = sub.add_parser("plot", help="draw each case's median per commit with its 99%% interval")
    plot.add_argument("results", nargs="?", default=".asv/results", help="asv's results folder (default .asv/results)")
    plot.add_argument("--out", default="asv-history.png", help="the PNG to write (default asv-history.png)")
    plot.add_argument("--benchmark", default="track_median",
                      help="the benchmarks drawn: those whose name ends so (default track_median, this suite's)")
    args = parser.parse_args(argv)
    try:
        history = load_history(Path(args.results), args.benchmark)
        path = plot_history(history, Path(args.out))
    except IpcbenchError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    commits = max(len(p) for p in history.values())
    print(f"{path}: {len(history)} cases, up to {commits} commits each")
    return 0


if __name__ == "__main__":
    sys.exit(main())
