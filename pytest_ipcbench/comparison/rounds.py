"""Interleaved rounds: results merged round by round, and what their rounds' spread allows."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ..results.results import Result, ResultSet
from ..results.stats import moderated_halfwidths, paired_round_log_ratios
from .normalise import is_reference

#: Where a merged result keeps how many samples each round gave, per metric (Result.extra).
ROUNDS_KEY = "gate_rounds"


def metric_of(result: Result, metric: str | None) -> str:
    """The metric a comparison reads: ``metric``, else the case's primary."""
    return metric or result.primary


def round_split(result: Result, metric: str) -> list[int] | None:
    """Samples per round of ``metric`` when ``result`` was merged from rounds (and they add up)."""
    counts = (result.extra or {}).get(ROUNDS_KEY, {}).get(metric)
    if not counts or sum(counts) != len(result.samples.get(metric, ())) or min(counts) < 1:
        return None
    return [int(c) for c in counts]


def round_noise(old: dict[str, Result], new: dict[str, Result], metric: str | None = None) -> float | None:
    """Median over cases of max / min of one side's round medians: how much rounds alone move."""
    spreads = []
    for key in old.keys() & new.keys():
        if is_reference(old[key]):
            continue
        for r in (old[key], new[key]):
            m = metric_of(r, metric)
            split = round_split(r, m)
            if split and len(split) > 1:
                medians = [float(np.median(c)) for c in chunks(r.samples[m], split) if c]
                if medians and min(medians) > 0:
                    spreads.append(max(medians) / min(medians))
    return float(np.median(spreads)) if spreads else None


def pooling_group(key: str) -> str:
    """Cases whose rounds share how the machine disturbs them: a scenario and backend at a rank count."""
    parts = key.split("/")  # scenario/backend/mode/payload/size/rN[/work=...]
    return f"{parts[0]}/{parts[1]}/{parts[5]}" if len(parts) >= 6 else key


def moderated_round_halfwidths(old: dict[str, Result], new: dict[str, Result],
                                todo: Sequence[tuple[str, str, list[float], list[float]]],
                                confidence: float, quantile: float = 0.5) -> dict[str, float]:
    """Per case of a paired experiment with rounds: the half-width of its rounds' interval, its
    variance moderated by its group's (:func:`~.stats.moderated_halfwidths`)."""
    ratios: dict[str, np.ndarray] = {}
    for key, m, a, b in todo:
        split_a, split_b = round_split(new[key], m), round_split(old[key], m)
        if not split_a or not split_b:
            continue
        try:
            d = paired_round_log_ratios(chunks(a, split_a), chunks(b, split_b), quantile)
        except (ValueError, FloatingPointError):
            continue
        if d is not None and np.all(np.isfinite(d)):
            ratios[key] = d
    return moderated_halfwidths(ratios, {k: pooling_group(k) for k in ratios}, confidence)


def chunks(samples: Sequence[float], counts: Sequence[int]) -> list[list[float]]:
    out, start = [], 0
    for n in counts:
        out.append(list(samples[start:start + n]))
        start += n
    return out


def merge_rounds(sets: Sequence[ResultSet]) -> ResultSet:
    """One result set whose cases carry the samples of every round, metric by metric.

    Each case remembers how many samples each round gave (``extra["gate_rounds"]``), so that a
    later ``ipcbench compare`` of the merged files still knows the rounds apart.
    """
    if not sets:
        raise ValueError("no rounds to merge")
    merged: dict[str, Result] = {}
    for rs in sets:
        for r in rs.results:
            if r.key not in merged:
                merged[r.key] = Result.from_dict(
                    {**r.to_dict(), "samples": {}, "extra": {**(r.extra or {}), ROUNDS_KEY: {}}}
                )
            into = merged[r.key]
            for metric, samples in r.samples.items():
                if samples:
                    into.samples.setdefault(metric, []).extend(samples)
                    into.extra[ROUNDS_KEY].setdefault(metric, []).append(len(samples))
    env = dict(sets[0].env)
    env["gate_rounds"] = len(sets)
    for key in ("load_start", "load_end"):  # the merged side's load: the mean of its rounds', not the first's
        loads = [float(x) for rs in sets if isinstance(x := rs.env.get(key), (int, float))]
        if loads:
            env[key] = sum(loads) / len(loads)
    return ResultSet(env=env, results=list(merged.values()))
