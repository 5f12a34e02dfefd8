"""The MPI method matrix: configurations x shapes x methods, each case timed by the harness.

Each case runs in ``rounds`` interleaved rounds (round ``r`` visits the methods rotated by ``r``,
one harness ``bench`` each), so that a burst of load hits every method alike; the rounds' samples
are pooled into one Result (``scenario="mpi-method"``), what ``report/mpi_methods.py`` reads.
"""

from __future__ import annotations

import gc
import resource
import time
from collections.abc import Callable, Iterable
from dataclasses import replace
from typing import Any

from ..backends.base import BackendSpec
from ..core.payloads import RAGGED_ROWS
from ..core.procs import load_average
from ..core.units import format_time
from ..harness.measure import BenchSettings, bench
from ..results.results import Result, Verified
from .backend import DEFAULT_SETTINGS, backend_name, group_of, with_transfer_metric
from .configs import DEFAULT_CONFIGS, MODE, SCENARIO, SHAPES, check_shape, config_base, parse_configs, payload_spec
from .methods import METHOD_NAMES, parse_methods

#: Interleaved rounds per case.
DEFAULT_ROUNDS = 3
#: Seconds of timed transfers per case (all rounds together).
DEFAULT_CASE_TIME = 1.5


#: Transfers per case and round at most: a fast warm-up then a loaded stretch must not make one
#: round last minutes (docs/method.md rule 2).
MAX_TRANSFERS = 1_000


def matrix_settings(case_time: float = DEFAULT_CASE_TIME, rounds: int = DEFAULT_ROUNDS,
                    **changes: Any) -> BenchSettings:
    """The harness settings of one round: ``case_time`` shared among the ``rounds``."""
    if case_time <= 0:
        raise ValueError(f"case_time must be positive, got {case_time}")
    changes.setdefault("max_iterations", MAX_TRANSFERS)
    return replace(DEFAULT_SETTINGS, time_budget=case_time / max(1, int(rounds)), **changes)


def _peak_rss_bytes() -> int:
    return int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss) * 1024  # Linux: KiB


def run_matrix(
    group: Any,
    configs: Iterable[str] = DEFAULT_CONFIGS,
    methods: Iterable[str] = METHOD_NAMES,
    shapes: Iterable[str] = SHAPES,
    progress: Callable[[str], None] | None = None,
    settings: BenchSettings | None = None,
    root: int = 0,
    rounds: int = DEFAULT_ROUNDS,
) -> list[Result]:
    """Collective over an MPIGroup or communicator: every configuration x shape x method, sent from
    ``root``; rank 0 gets the Results (``progress``: a line per case), the others []. ``settings``
    are one round's (default :func:`matrix_settings`)."""
    group = group_of(group)
    configs = parse_configs(list(configs))
    methods = parse_methods(list(methods))
    shapes = tuple(check_shape(s) for s in shapes)
    rounds = max(1, int(rounds))
    settings = settings or matrix_settings(rounds=rounds)
    out: list[Result] = []
    for config in configs:
        for shape in shapes:
            spec = payload_spec(config, shape)
            rounds_of: dict[str, list[Result | None]] = {name: [] for name in methods}
            wall = dict.fromkeys(methods, 0.0)
            loads: dict[str, list[float]] = {name: [] for name in methods}
            for rnd in range(rounds):
                shift = rnd % len(methods)
                for name in methods[shift:] + methods[:shift]:
                    t0 = time.perf_counter()
                    backend = BackendSpec(backend_name(name), MODE, root=root)
                    rounds_of[name].append(bench(group, backend, spec, "broadcast", settings))
                    gc.collect()
                    wall[name] += float(max(group.allgather(time.perf_counter() - t0)))
                    load = load_average()
                    loads[name].append(float("nan") if load is None else load)
            peak = max(group.allgather(_peak_rss_bytes()))
            if group.rank != 0:  # the harness builds the Results there
                continue
            for name in methods:
                result = _pooled(
                    rounds_of[name], name, config=config, base=config_base(config), shape=shape,
                    rows=1 if shape == "1d" else RAGGED_ROWS, elements=spec.size // 4, rounds=rounds,
                    metadata_timed=shape == "2d", wall_s=round(wall[name], 3), load1=round(max(loads[name]), 2),
                    peak_rss_max_rank=peak, waits="quiet" if settings.quiet_waits else "busy",  # docs/method.md rule 18
                )
                out.append(result)
                if progress is not None:
                    progress(case_line(result))
    return out


def _pooled(results: list[Result | None], method: str, **extra: Any) -> Result:
    """One Result of the rounds of a case (the root's): samples pooled, checks summed, ``extra``
    (what the matrix knows of the case) added."""
    got = [with_transfer_metric(r) for r in results if r is not None]
    first = got[0]
    samples: dict[str, list[float]] = {}
    for r in got:
        for metric, values in r.samples.items():
            samples.setdefault(metric, []).extend(values)
    timing = "harness broadcast: per transfer, max over every rank (root included)"
    return replace(first, scenario=SCENARIO, backend=method, samples=samples,
                   extra={**first.extra, "timing": timing, **extra},
                   verified=Verified(sum(r.verified.checked for r in got if r.verified),
                                     sum(r.verified.failed for r in got if r.verified)),
                   plan={"rounds": [r.plan for r in got]})


def case_line(r: Result) -> str:
    """One line per finished case: configuration, shape, method, median, rounds' iterations, load."""
    plans = (r.plan or {}).get("rounds") or []
    iterations = "/".join(str(p.get("iterations", "?")) for p in plans if p)
    return (f"{r.extra.get('config', '?'):>8} {r.extra.get('shape', '?')} {r.backend:<9} "
            f"{format_time(r.summary().median):>10}  (n={len(r.samples[r.primary])} [{iterations}], "
            f"{r.extra.get('wall_s', 0):.1f} s, load {r.extra.get('load1', float('nan')):.1f})")


__all__ = ["DEFAULT_CASE_TIME", "DEFAULT_ROUNDS", "MAX_TRANSFERS", "case_line", "matrix_settings", "run_matrix"]
