"""Compare two result sets case by case, decided on a confidence interval of the ratio.

Cases are matched by key; for each case in both, the bootstrap confidence interval of
``median(head) / median(base)`` (:mod:`.stats`) decides. A case is *slower* only when the whole
interval lies above ``1 + threshold``, *faster* only when it lies below ``1 / (1 + threshold)``;
anything else is *unchanged*. The exit code is 1 when at least one case is slower, 0 otherwise,
2 when the inputs cannot be compared (bad file, nothing in common). Results merged from
interleaved rounds (:func:`merge_rounds`, by the gate) are decided on a two-level bootstrap
(:func:`.stats.rounds_ratio_interval`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Sequence

import numpy as np

from ..core.units import format_time
from .results import Result, ResultSet
from .stats import (DEFAULT_CONFIDENCE, DEFAULT_RESAMPLES, RatioInterval, ratio_interval, rounds_ratio_interval,
                    verdict)

EXIT_OK = 0
EXIT_REGRESSION = 1
EXIT_ERROR = 2

DEFAULT_THRESHOLD = 0.10
#: Fewer samples than this on either side: the interval would be a fiction, no verdict is given.
MIN_SAMPLES = 3
#: Where a merged result keeps how many samples each round gave, per metric (Result.extra).
ROUNDS_KEY = "gate_rounds"
#: Verdicts in the order the table lists them.
STATUS_ORDER = ("slower", "faster", "unchanged", "undecided", "added", "removed")


@dataclass(frozen=True)
class Decision:
    """How a comparison decides: tolerated slowdown, confidence, metric, family-wise or per case."""

    threshold: float = DEFAULT_THRESHOLD
    confidence: float = DEFAULT_CONFIDENCE
    metric: str | None = None
    family_wise: bool = True
    markdown: str | None = None  # also write the table as markdown here


class GateError(Exception):
    """The gate cannot measure or compare (exit 2); the text says why and what to do."""


# ------------------------------------------------------------------------------------ compare


@dataclass(frozen=True)
class CaseVerdict:
    """One case: its status and, when both sides had samples, the ratio interval head / base."""

    key: str
    status: str  # one of STATUS_ORDER
    metric: str = ""
    interval: RatioInterval | None = None
    n_base: int = 0
    n_head: int = 0
    note: str = ""


@dataclass
class Comparison:
    cases: list[CaseVerdict]
    threshold: float
    confidence: float
    metric: str | None
    warnings: list[str] = field(default_factory=list)
    per_case_confidence: float = 0.0  # the confidence of each case's interval (family-wise: higher)

    @property
    def family_wise(self) -> bool:
        return self.per_case_confidence > self.confidence

    def with_status(self, status: str) -> list[CaseVerdict]:
        return [c for c in self.cases if c.status == status]

    @property
    def regressions(self) -> list[CaseVerdict]:
        return self.with_status("slower")

    @property
    def compared(self) -> int:
        """Cases that got a verdict (slower, faster or unchanged)."""
        return sum(c.status in ("slower", "faster", "unchanged") for c in self.cases)

    @property
    def exit_code(self) -> int:
        return EXIT_REGRESSION if self.regressions else EXIT_OK

    def counts(self) -> dict[str, int]:
        return {s: len(self.with_status(s)) for s in STATUS_ORDER}


def _metric_of(result: Result, metric: str | None) -> str:
    return metric or result.primary


def compare_sets(
    base: ResultSet,
    head: ResultSet,
    threshold: float = DEFAULT_THRESHOLD,
    confidence: float = DEFAULT_CONFIDENCE,
    metric: str | None = None,
    family_wise: bool = True,
) -> Comparison:
    """Compare every case of ``head`` with the same case of ``base`` (``metric``: each case's primary).

    ``confidence`` is family-wise by default: with ``m`` cases decided, each case's interval is
    taken at ``1 - (1 - confidence) / m`` (Bonferroni), so that a report of 150 cases does not
    carry 7 false alarms at 95% each. ``family_wise=False`` uses ``confidence`` per case.

    Raises ValueError when the two sets have no case in common that can be compared: a gate that
    compared nothing must not pass.
    """
    if threshold < 0:
        raise ValueError(f"threshold must not be negative, got {threshold}")
    if not 0 < confidence < 1:
        raise ValueError(f"confidence must be between 0 and 1, got {confidence}")
    old, new = base.by_key(), head.by_key()
    cases: list[CaseVerdict] = []
    todo: list[tuple[str, str, list[float], list[float]]] = []
    for key in sorted(old.keys() | new.keys()):
        if key not in new:
            cases.append(CaseVerdict(key, "removed", note="only in base"))
            continue
        if key not in old:
            cases.append(CaseVerdict(key, "added", note="only in head"))
            continue
        m = _metric_of(new[key], metric)
        a, b = new[key].samples.get(m), old[key].samples.get(m)
        n_head, n_base = len(a or ()), len(b or ())
        if not a or not b:
            side = "either side" if not a and not b else ("head" if not a else "base")
            cases.append(CaseVerdict(key, "undecided", m, None, n_base, n_head, f"no {m!r} samples in {side}"))
            continue
        if min(n_base, n_head) < MIN_SAMPLES:
            cases.append(
                CaseVerdict(key, "undecided", m, None, n_base, n_head,
                            f"too few samples to decide (base {n_base}, head {n_head}; need {MIN_SAMPLES})")
            )
            continue
        todo.append((key, m, a, b))
    per_case = 1 - (1 - confidence) / max(1, len(todo)) if family_wise else confidence
    resamples = DEFAULT_RESAMPLES if per_case <= 0.99 else 2 * DEFAULT_RESAMPLES
    for key, m, a, b in todo:
        try:
            split_a, split_b = round_split(new[key], m), round_split(old[key], m)
            if split_a and split_b and (len(split_a) > 1 or len(split_b) > 1):
                interval = rounds_ratio_interval(_chunks(a, split_a), _chunks(b, split_b), per_case, resamples)
            else:
                interval = ratio_interval(a, b, confidence=per_case, resamples=resamples)
        except ValueError as exc:  # zero or negative times: a broken measurement, say so
            cases.append(CaseVerdict(key, "undecided", m, None, len(b), len(a), str(exc)))
            continue
        cases.append(CaseVerdict(key, verdict(interval, threshold), m, interval, len(b), len(a)))
    cases.sort(key=lambda c: c.key)
    comparison = Comparison(cases, threshold, confidence, metric, _env_warnings(base, head), per_case)
    noise = round_noise(old, new, metric)
    if noise is not None and noise > 1 + threshold:
        comparison.warnings.append(
            f"noisy machine: between its own rounds the same code moved by a median factor of {noise:.2f} "
            f"(max / min of round medians, per case); verdicts at the {threshold:.0%} level are fragile here"
        )
    if not comparison.compared:
        undecided = comparison.with_status("undecided")
        why = f"; e.g. {undecided[0].key}: {undecided[0].note}" if undecided else ""
        raise ValueError(
            f"nothing to compare: base has {len(old)} cases, head {len(new)}, "
            f"{len(old.keys() & new.keys())} in common, none with enough samples{why}"
        )
    return comparison


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
        for r in (old[key], new[key]):
            m = _metric_of(r, metric)
            split = round_split(r, m)
            if split and len(split) > 1:
                medians = [float(np.median(c)) for c in _chunks(r.samples[m], split) if c]
                if medians and min(medians) > 0:
                    spreads.append(max(medians) / min(medians))
    return float(np.median(spreads)) if spreads else None


def _chunks(samples: Sequence[float], counts: Sequence[int]) -> list[list[float]]:
    out, start = [], 0
    for n in counts:
        out.append(list(samples[start:start + n]))
        start += n
    return out


def _env_warnings(base: ResultSet, head: ResultSet) -> list[str]:
    """Differences of environment that make a ratio mean something else than the code's change."""
    warnings = []
    for key in ("host", "hostname", "cpu", "cores", "python", "mpi"):
        a, b = base.env.get(key), head.env.get(key)
        if a is not None and b is not None and a != b:
            shown = f"{str(a)[:60]!r} vs {str(b)[:60]!r}"
            warnings.append(f"base and head differ in {key} ({shown}): the ratio includes that difference")
    return warnings


# ------------------------------------------------------------------------------------ formats


def _row(case: CaseVerdict) -> list[str]:
    iv = case.interval
    if iv is None:
        return [case.key, "-", "-", "-", "-", case.status, case.note]
    return [
        case.key,
        format_time(iv.median_b),
        format_time(iv.median_a),
        f"{iv.ratio:.3f}x",
        f"{iv.low:.3f}-{iv.high:.3f}",
        case.status,
        f"n={case.n_base}/{case.n_head}" + (f" {case.note}" if case.note else ""),
    ]


def _ordered(comparison: Comparison) -> list[CaseVerdict]:
    rank = {s: i for i, s in enumerate(STATUS_ORDER)}
    return sorted(comparison.cases, key=lambda c: (rank[c.status], c.key))


def _headline(comparison: Comparison) -> str:
    counts = comparison.counts()
    parts = ", ".join(f"{n} {s}" for s, n in counts.items() if n)
    pct = round(comparison.threshold * 100, 1)
    conf = f"{round(comparison.confidence * 100, 1):g}%" + (" family-wise" if comparison.family_wise else "")
    if comparison.regressions:
        slow = ", ".join(c.key for c in comparison.regressions)
        verdict_line = (
            f"REGRESSION: {len(comparison.regressions)} case(s) slower than +{pct:g}% "
            f"with {conf} confidence: {slow}"
        )
    else:
        verdict_line = f"OK: no case slower than +{pct:g}% with {conf} confidence"
    return f"{parts}\n{verdict_line}"


def _ci_label(comparison: Comparison) -> str:
    return f"{_pct(comparison.per_case_confidence or comparison.confidence)} CI"


def _pct(x: float) -> str:
    """0.95 -> '95%', 0.99966 -> '99.97%'."""
    return f"{float(f'{x * 100:.4g}'):g}%"


def _decision_note(comparison: Comparison) -> str:
    pct = round(comparison.threshold * 100, 1)
    rule = (f"a case is slower only when its whole {_ci_label(comparison)} of head / base lies above "
            f"{1 + comparison.threshold:.3g} (+{pct:g}%), faster only when below {1 / (1 + comparison.threshold):.3g}")
    if comparison.family_wise:
        rule += (f"; each case at {_pct(comparison.per_case_confidence)} so that all {comparison.compared} "
                 f"together hold at {_pct(comparison.confidence)} (Bonferroni)")
    return rule


def _columns(comparison: Comparison) -> list[str]:
    return ["case", "base median", "head median", "head/base", _ci_label(comparison), "verdict", "notes"]


def format_table(comparison: Comparison) -> str:
    """Plain-text table of every case, then the counts and the verdict."""
    rows = [_columns(comparison)] + [_row(c) for c in _ordered(comparison)]
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]) - 1)]
    lines = ["  ".join(cell.ljust(w) for cell, w in zip(r, widths)) + "  " + r[-1] for r in rows]
    lines = [line.rstrip() for line in lines]
    lines.insert(1, "-" * max(len(line) for line in lines))
    metric = comparison.metric or "each case's primary metric (completion)"
    intro = f"head / base median time of {metric}; {_decision_note(comparison)}"
    out = [intro, *lines, "", *(f"warning: {w}" for w in comparison.warnings), _headline(comparison)]
    return "\n".join(out)


def format_markdown(comparison: Comparison, title: str = "ipcbench performance comparison") -> str:
    """The same as :func:`format_table`, as GitHub markdown (for the job summary)."""
    mark = ":x:" if comparison.regressions else ":white_check_mark:"
    head, verdict_line = _headline(comparison).split("\n")
    out = [f"## {title}", "", f"{mark} **{verdict_line}**", "", f"Cases: {head}.", ""]
    out += [f"> warning: {w}" for w in comparison.warnings]
    cols = _columns(comparison)
    out.append("| " + " | ".join(cols) + " |")
    out.append("|" + "|".join(["---"] + ["---:"] * 4 + ["---", "---"]) + "|")
    for case in _ordered(comparison):
        cells = [c.replace("|", "\\|") for c in _row(case)]
        if case.status == "slower":
            cells[5] = "**slower**"
        out.append("| " + " | ".join(f"`{cells[0]}`" if i == 0 else c for i, c in enumerate(cells)) + " |")
    note = _decision_note(comparison)
    out += ["", note[0].upper() + note[1:] + " (bootstrap of the ratio of medians).", ""]
    return "\n".join(out)


# ------------------------------------------------------------------------------ option parsing


def load_results(path: str, side: str) -> ResultSet:
    """A results file for one side of a comparison; a bad one is a GateError naming it."""
    try:
        return ResultSet.load(path)
    except (ValueError, FileNotFoundError) as exc:
        raise GateError(f"{side}: {exc}") from None
    except (KeyError, TypeError) as exc:  # a results file whose records lack fields
        raise GateError(f"{side}: {path} has malformed result records ({exc})") from None


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
    return ResultSet(env=env, results=list(merged.values()))
