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

import math
from dataclasses import dataclass, field, replace
from statistics import NormalDist
from typing import Sequence

import numpy as np

from ..core.errors import IpcbenchError
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
#: Verdicts in the order the table lists them; ``reference`` cases measure the machine (copy
#: bandwidth, a raw pipe ping-pong), never the code, and get no verdict.
STATUS_ORDER = ("slower", "faster", "unchanged", "undecided", "added", "removed", "reference")
#: Scenarios of in-run references (harness.measure.REFERENCE_SCENARIOS; not imported: no harness here).
REFERENCE_SCENARIOS = ("copy", "reference")
#: Between-run noise (log-scale standard deviation) assumed at least, and when too few cases
#: are compared to estimate it.
MIN_RUN_NOISE = 0.05
FALLBACK_RUN_NOISE = 0.15
MIN_CASES_FOR_NOISE = 8
#: A single-run case whose interval, once widened, could not show a slowdown this large gets no
#: verdict ("undecided": the runs are too noisy to compare); more than half such: not comparable.
MAX_RUN_FLOOR = 2.0
#: Load averages of the two runs further apart than this (and than a quarter of it): warned.
LOAD_GAP = 1.0


@dataclass(frozen=True)
class Decision:
    """How a comparison decides: tolerated slowdown, confidence, metric, family-wise or per case."""

    threshold: float = DEFAULT_THRESHOLD
    confidence: float = DEFAULT_CONFIDENCE
    metric: str | None = None
    family_wise: bool = True
    markdown: str | None = None  # also write the table as markdown here


class GateError(IpcbenchError):
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


@dataclass(frozen=True)
class RunDrift:
    """How two files from different runs were made comparable (docs/method.md rule 19).

    ``factor``: head / base of the in-run references (geometric median), divided out of every
    case. ``noise``: per group of cases (scenario and ranks), the between-run scatter (log-scale
    standard deviation) allowed on top of a single-run case's interval; ``z``: the normal
    quantile of the per-case confidence, so a case's interval is widened by ``exp(z * noise)`` on
    each side. A group so noisy that a slowdown of :data:`MAX_RUN_FLOOR` could not be seen gets no
    verdict.
    """

    factor: float
    references: int
    noise: dict[str, float]
    z: float

    def widen(self, group: str) -> float:
        return math.exp(self.z * self.noise.get(group, self.noise.get("*", FALLBACK_RUN_NOISE)))


@dataclass
class Comparison:
    cases: list[CaseVerdict]
    threshold: float
    confidence: float
    metric: str | None
    warnings: list[str] = field(default_factory=list)
    per_case_confidence: float = 0.0  # the confidence of each case's interval (family-wise: higher)
    paired: bool = True  # one interleaved experiment (the gate); False: two runs, see ``drift``
    drift: RunDrift | None = None

    def __repr__(self) -> str:  # short: a comparison holds every case's interval
        counts = ", ".join(f"{n} {s}" for s, n in self.counts().items() if n)
        how = "paired" if self.paired else (f"across runs, load factor {self.drift.factor:.3g}" if self.drift
                                            else "across runs")
        return (f"<Comparison {len(self.cases)} cases ({counts}); threshold {self.threshold:.0%}, "
                f"{_pct(self.confidence)}; {how}; exit {self.exit_code}>")

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


class NotComparable(IpcbenchError, ValueError):
    """Two files that cannot be compared honestly (exit 2); the text says why and what to do."""


def is_reference(result: Result) -> bool:
    return result.scenario in REFERENCE_SCENARIOS


def same_experiment(base: ResultSet, head: ResultSet) -> bool:
    """Were both sets made by one interleaved experiment (one gate job), or are they one run?"""
    for key in ("gate_job", "run_id"):
        a, b = base.env.get(key), head.env.get(key)
        if a is not None and a == b:
            return True
    return False


def _median_ratio(a: Sequence[float], b: Sequence[float]) -> float | None:
    ma, mb = float(np.median(a)), float(np.median(b))
    return ma / mb if ma > 0 and mb > 0 else None


def _reference_factor(old: dict[str, Result], new: dict[str, Result]) -> tuple[float, list[tuple[str, float]]]:
    """head / base of the in-run references both sets hold: their geometric median, and each."""
    ratios = []
    for key in sorted(old.keys() & new.keys()):
        if is_reference(old[key]) and is_reference(new[key]):
            m = new[key].primary
            a, b = new[key].samples.get(m), old[key].samples.get(m)
            r = _median_ratio(a, b) if a and b else None
            if r is not None:
                ratios.append((key, r))
    if not ratios:
        return 1.0, []
    return float(math.exp(np.median([math.log(r) for _, r in ratios]))), ratios


def _load_warning(base: ResultSet, head: ResultSet) -> str | None:
    def load(rs: ResultSet) -> float | None:
        xs = [rs.env.get(k) for k in ("load_start", "load_end")]
        xs = [float(x) for x in xs if isinstance(x, (int, float))]
        return sum(xs) / len(xs) if xs else None

    a, b = load(base), load(head)
    if a is None or b is None:
        return None
    if abs(a - b) > max(LOAD_GAP, 0.25 * max(a, b)):
        cores = base.env.get("cores") or head.env.get("cores")
        on = f" on {cores} cores" if cores else ""
        return (f"the machine's load differed between the runs (1-minute load average: base {a:.1f}, head {b:.1f}{on}): "
                f"the in-run references divide out a uniform slow-down, not one that hits some cases more")
    return None


def compare_sets(
    base: ResultSet,
    head: ResultSet,
    threshold: float = DEFAULT_THRESHOLD,
    confidence: float = DEFAULT_CONFIDENCE,
    metric: str | None = None,
    family_wise: bool = True,
    paired: bool | None = None,
) -> Comparison:
    """Compare every case of ``head`` with the same case of ``base`` (``metric``: each case's primary).

    ``confidence`` is family-wise by default: with ``m`` cases decided, each case's interval is
    taken at ``1 - (1 - confidence) / m`` (Bonferroni), so that a report of 150 cases does not
    carry 7 false alarms at 95% each. ``family_wise=False`` uses ``confidence`` per case.

    ``paired``: the two sets come from one interleaved experiment (the gate's rounds), so their
    ratio is the code's change. ``None`` decides from the files (same ``gate_job`` or ``run_id``).
    Two sets from different runs are not a paired experiment (docs/method.md rule 19): every case is
    divided by the load factor of the in-run references (copy bandwidth, pipe ping-pong; a
    :class:`NotComparable` error without them), and when a file holds a single run each interval
    is widened by the between-run scatter, estimated robustly from the cases themselves
    (:class:`RunDrift`).

    Raises ValueError when the two sets have no case in common that can be compared: a gate that
    compared nothing must not pass.
    """
    if threshold < 0:
        raise ValueError(f"threshold must not be negative, got {threshold}")
    if not 0 < confidence < 1:
        raise ValueError(f"confidence must be between 0 and 1, got {confidence}")
    old, new = base.by_key(), head.by_key()
    if paired is None:
        paired = same_experiment(base, head)
    factor, ref_ratios = 1.0, []
    if not paired:
        factor, ref_ratios = _reference_factor(old, new)
        if not ref_ratios:
            raise NotComparable(
                "the two files come from different runs and share no in-run reference (copy bandwidth, "
                "pipe ping-pong): a ratio of their medians would include whatever load each run met "
                "(docs/method.md rule 19). Make both with `ipcbench run` or `pytest --ipc-report` of this version "
                "(they record the references), or measure base and head in one job with `ipcbench gate`; "
                "--paired compares them anyway as if they were one interleaved experiment"
            )
    cases: list[CaseVerdict] = []
    todo: list[tuple[str, str, list[float], list[float]]] = []
    for key in sorted(old.keys() | new.keys()):
        if (key in old and is_reference(old[key])) or (key in new and is_reference(new[key])):
            r = next(x for x in (new.get(key), old.get(key)) if x is not None)
            a, b = (new[key].samples.get(r.primary) if key in new else None), \
                (old[key].samples.get(r.primary) if key in old else None)
            ratio = _median_ratio(a, b) if a and b else None
            note = f"in-run reference, head/base {ratio:.3f}x" if ratio else "in-run reference"
            cases.append(CaseVerdict(key, "reference", r.primary, None, len(b or ()), len(a or ()), note))
            continue
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
    intervals: list[tuple[str, str, list[float], list[float], RatioInterval, bool]] = []
    for key, m, a, b in todo:
        try:
            split_a, split_b = round_split(new[key], m), round_split(old[key], m)
            rounds = bool(split_a and split_b and (len(split_a) > 1 or len(split_b) > 1))
            if rounds:
                interval = rounds_ratio_interval(_chunks(a, split_a), _chunks(b, split_b), per_case, resamples)
            else:
                interval = ratio_interval(a, b, confidence=per_case, resamples=resamples)
        except ValueError as exc:  # zero or negative times: a broken measurement, say so
            cases.append(CaseVerdict(key, "undecided", m, None, len(b), len(a), str(exc)))
            continue
        intervals.append((key, m, a, b, interval, rounds))
    drift = None
    if not paired:
        drift = _run_drift(factor, len(ref_ratios), [(new[key], iv, rounds) for key, _, _, _, iv, rounds in intervals],
                           per_case)
    too_noisy: list[str] = []
    for key, m, a, b, interval, rounds in intervals:
        note = ""
        if drift is not None:
            widen = 1.0 if rounds else drift.widen(case_group(new[key]))
            interval = replace(interval, ratio=interval.ratio / drift.factor,
                               low=interval.low / drift.factor / widen, high=interval.high / drift.factor * widen)
            note = f"/{drift.factor:.3g} load" + (f", ±{widen:.2f}x runs" if widen > 1 else "")
            if (1 + threshold) * widen > MAX_RUN_FLOOR:
                too_noisy.append(key)
                cases.append(CaseVerdict(
                    key, "undecided", m, interval, len(b), len(a),
                    f"{note}: too noisy across runs ({case_group(new[key])} cases scatter so much that a "
                    f"{MAX_RUN_FLOOR:g}x slowdown could not be seen)"))
                continue
        cases.append(CaseVerdict(key, verdict(interval, threshold), m, interval, len(b), len(a), note))
    if drift is not None and too_noisy and len(too_noisy) * 2 > len(intervals):
        groups = sorted({case_group(new[k]) for k in too_noisy})
        raise NotComparable(
            f"these two runs are not comparable: {len(too_noisy)} of {len(intervals)} cases ({', '.join(groups)}) "
            f"scatter between runs of the same code by more than a {MAX_RUN_FLOOR:g}x slowdown would show "
            f"(between-run scatter per group: {_noise_text(drift)}; load factor of the references "
            f"{drift.factor:.3g}). Rerun both on a quiet machine, or measure base and head interleaved in one "
            f"job with `ipcbench gate`"
        )
    cases.sort(key=lambda c: c.key)
    comparison = Comparison(cases, threshold, confidence, metric, _env_warnings(base, head), per_case,
                            paired=paired, drift=drift)
    if drift is not None:
        single = any(not rounds for *_, rounds in intervals)
        comparison.warnings.extend(_drift_notes(drift, ref_ratios, threshold, single))
        load = _load_warning(base, head)
        if load:
            comparison.warnings.append(load)
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


def case_group(result: Result) -> str:
    """Cases that share their between-run scatter: a scenario at a rank count."""
    return f"{result.scenario} r{result.ranks}"


def _run_drift(factor: float, references: int, intervals: Sequence[tuple[Result, RatioInterval, bool]],
               per_case: float) -> RunDrift:
    """The load factor, and the between-run scatter allowed to single-run cases, per group.

    The scatter is estimated from the cases themselves: 1.4826 x the median of |log(ratio /
    factor)| over a group (a standard deviation that a few truly changed cases do not move, and
    that grows when the references missed part of the drift); a group of fewer than
    :data:`MIN_CASES_FOR_NOISE` cases takes the estimate over all cases ("*").
    """
    logs: dict[str, list[float]] = {}
    for result, iv, _ in intervals:
        if iv.ratio > 0:
            logs.setdefault(case_group(result), []).append(abs(math.log(iv.ratio / factor)))
    everything = [x for xs in logs.values() for x in xs]

    def scatter(xs: list[float]) -> float:
        return max(MIN_RUN_NOISE, 1.4826 * float(np.median(xs)))

    noise = {"*": scatter(everything) if len(everything) >= MIN_CASES_FOR_NOISE else FALLBACK_RUN_NOISE}
    for group, xs in logs.items():
        noise[group] = scatter(xs) if len(xs) >= MIN_CASES_FOR_NOISE else noise["*"]
    z = NormalDist().inv_cdf(1 - (1 - per_case) / 2)
    return RunDrift(factor, references, noise, z)


def _noise_text(drift: RunDrift) -> str:
    return ", ".join(f"{g} {math.exp(s) - 1:.0%}" for g, s in sorted(drift.noise.items()) if g != "*")


def _drift_notes(drift: RunDrift, ref_ratios: Sequence[tuple[str, float]], threshold: float,
                 single_run: bool) -> list[str]:
    shown = ", ".join(f"{k.split('/')[0]}/{k.split('/')[1]} {k.split('/')[4]} B {r:.2f}x" for k, r in ref_ratios[:6])
    more = f", ... ({len(ref_ratios)} in all)" if len(ref_ratios) > 6 else ""
    notes = [f"base and head come from different runs (not one interleaved experiment): every ratio is divided "
             f"by {drift.factor:.3f}, the geometric median of head/base of the in-run references ({shown}{more})"]
    if single_run:
        notes.append(f"a file holds a single run: each interval is widened on each side by exp({drift.z:.2f} x the "
                     f"between-run scatter of its group of cases), estimated from the cases themselves: "
                     f"{_noise_text(drift)}; a slowdown smaller than that cannot be told from drift here "
                     f"(measure base and head interleaved with `ipcbench gate` to see smaller ones)")
    return notes


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
