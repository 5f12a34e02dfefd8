"""An asv suite for another project: times the matrix it declares in ``[tool.ipcbench]``.

A project adopts it with one module in its asv ``benchmarks/`` folder (``ipcbench init-ci --asv``
writes it, and asv.conf.json)::

    # benchmarks/bench_ipcbench.py
    from pytest_ipcbench.history.asv_suite import *  # noqa: F401,F403

``setup_cache`` runs ``python -m pytest_ipcbench run --config PYPROJECT`` once per commit (the
same harness, MPI launch and in-run references as ``ipcbench run``), and
``Declared.track_median`` gives each case's median of its primary metric (completion for a
broadcast, one-way latency for a ping-pong), in seconds. The parameters are the case keys of the
declared matrix as the *current* pyproject.toml declares it (asv's suite is fixed over history);
a commit that cannot run it (before the adoption, or without a backend) skips those cases.

Which pyproject.toml: ``$IPCBENCH_CONFIG``, else the one next to asv.conf.json (asv sets
``$ASV_CONF_DIR`` for benchmarks), else the nearest one from the current folder.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

__all__ = ["Declared", "setup_cache", "declared_keys", "config_path"]

RUN_TIMEOUT = 1800.0


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
    from ..harness.measure import PAIR_SCENARIOS
    from ..core.units import duration_label
    from ..core.project import read_config
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
        key = f"{c.scenario}/{c.backend}/{c.mode}/{c.kind}/{c.size}/r{ranks}"
        if c.scenario == "granularity":
            key += f"/work={duration_label(c.work)}"
        keys.append(key)
    return keys


def setup_cache() -> dict[str, Any]:
    """One ``ipcbench run`` of the declared matrix: {case key: median seconds, or "skip: why"}."""
    path = config_path()
    if path is None:
        return {"*": "skip: no pyproject.toml with a [tool.ipcbench] table"}
    out = Path("ipcbench-asv").resolve()
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    cmd = [sys.executable, "-m", "pytest_ipcbench", "run", "--config", str(path), "--out", str(out),
           "--progress", "none"]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=RUN_TIMEOUT)
    except subprocess.TimeoutExpired:
        return {"*": f"skip: ipcbench run took longer than {RUN_TIMEOUT:g} s"}
    results = out / "results.json"
    if not results.is_file():
        last = (proc.stderr.strip().splitlines() or proc.stdout.strip().splitlines() or ["?"])[-1]
        return {"*": f"skip: this commit cannot run the declared matrix: {last}"}
    data = json.loads(results.read_text())
    cache: dict[str, Any] = {}
    for r in data.get("results", []):
        stats = r.get("stats", {}).get(r.get("primary", "completion"))
        if stats and stats.get("median", 0) > 0:
            cache[r["key"]] = float(stats["median"])
    return cache


setup_cache.timeout = RUN_TIMEOUT + 60  # type: ignore[attr-defined]


class Declared:
    """Each case of the declared matrix: median of its primary metric, in seconds."""

    params = [declared_keys() or ["(no [tool.ipcbench] table)"]]
    param_names = ["case"]
    timeout = RUN_TIMEOUT + 60

    def setup(self, cache: dict[str, Any], case: str) -> None:
        self._value(cache, case)

    def track_median(self, cache: dict[str, Any], case: str) -> float:
        return self._value(cache, case)

    track_median.unit = "seconds"  # type: ignore[attr-defined]

    @staticmethod
    def _value(cache: dict[str, Any], case: str) -> float:
        value = cache.get(case, cache.get("*", "skip: not measured by this commit"))
        if isinstance(value, str):
            raise NotImplementedError(value)
        return float(value)
