"""Compare two result sets case by case: slower, faster, unchanged or inconclusive.

Cases are matched by key. For each case in both, head / base of the medians gets an interval
whose width comes from what was measured: the within-run spread of both sides (a bootstrap;
two-level over rounds for results merged from interleaved rounds, :func:`merge_rounds`) and,
for files of different runs, the between-run noise of that case on this runner (a calibration
file of ``ipcbench calibrate``, :mod:`.calibration`; without one a conservative assumed noise),
plus the interval of the robust normalisation by the in-run references. A case is *slower* when
the whole interval lies above ``1 + threshold``, *faster* when below ``1 / (1 + threshold)``,
*unchanged* when it lies within both, and *inconclusive* when the noise cannot decide; every
case also shows the smallest slowdown it could have detected. A whole file is never refused
because some cases are noisy (docs/method.md rule 19). The exit code is 1 when a case is slower
with confidence or, both sides counted, an exact counter of a case grew (history/counters.py), 2
when the inputs cannot be compared (bad file, nothing in common), else 0.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from statistics import NormalDist
from typing import Sequence

import numpy as np

from ..core.errors import IpcbenchError
from ..core.units import format_ratio, format_time
from .counters import counter_verdict, regression_line
from .calibration import (UNCALIBRATED_NOISE, Calibration, Normalisation, case_group, is_reference,
                          reference_factor)
from .results import Result, ResultSet
from .stats import (DEFAULT_CONFIDENCE, DEFAULT_RESAMPLES, RatioInterval, moderated_halfwidths,
                    paired_round_log_ratios, ratio_interval, round_ratio_halfwidth,
                    rounds_ratio_interval)

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
STATUS_ORDER = ("slower", "faster", "inconclusive", "unchanged", "added", "removed", "reference")
#: Verdicts that decided something about the code.
DECIDED = ("slower", "faster", "unchanged")
#: Log-scale half-widths are capped here (a factor of e^30): wider says nothing more.
MAX_HALF_WIDTH = 30.0
#: Load averages of the two runs further apart than this (and than a quarter of it): warned.
LOAD_GAP = 1.0

__all__ = ["CaseVerdict", "Comparison", "Decision", "GateError", "NotComparable", "case_group", "compare_sets",
           "format_markdown", "format_table", "is_reference", "load_results", "merge_rounds"]


@dataclass(frozen=True)
class Decision:
    """How a comparison decides: tolerated slowdown, confidence, metric, family-wise or per case,
    and the calibration file (None: the default path if it exists; "none": no calibration)."""

    threshold: float = DEFAULT_THRESHOLD
    confidence: float = DEFAULT_CONFIDENCE
    metric: str | None = None
    family_wise: bool = True
    markdown: str | None = None  # also write the table as markdown here
    calibration: str | None = None


class GateError(IpcbenchError):
    """The gate cannot measure or compare (exit 2); the text says why and what to do."""


class NotComparable(IpcbenchError, ValueError):
    """Two files that cannot be compared at all (exit 2); the text says why and what to do."""


# ------------------------------------------------------------------------------------ compare


@dataclass(frozen=True)
class CaseVerdict:
    """One case: its status, the interval of head / base, the noise it saw and what it could detect.

    ``noise``: the log-scale half-width of the interval (what the case's measured spread allows);
    ``detectable``: the smallest true head / base this comparison would call slower;
    ``noise_source``: where the between-run part came from ("within-run", "rounds",
    "calibrated ...", "assumed"); ``explanations``: further lines shown beside the verdict (e.g.
    counter changes).
    """

    key: str
    status: str  # one of STATUS_ORDER
    metric: str = ""
    interval: RatioInterval | None = None
    n_base: int = 0
    n_head: int = 0
    note: str = ""
    noise: float = 0.0
    detectable: float | None = None
    noise_source: str = ""
    explanations: list[str] = field(default_factory=list)
    counter_changes: int | None = None  # counters that changed per message; None: not counted on both sides
    counter_regressions: list[str] = field(default_factory=list)  # exact counters that grew: exit 1


@dataclass
class Comparison:
    cases: list[CaseVerdict]
    threshold: float
    confidence: float
    metric: str | None
    warnings: list[str] = field(default_factory=list)
    per_case_confidence: float = 0.0  # the confidence of each case's interval (family-wise: higher)
    paired: bool = True  # one interleaved experiment (the gate); False: two runs, see ``normalisation``
    normalisation: Normalisation | None = None
    calibration: Calibration | None = None

    def __repr__(self) -> str:  # short: a comparison holds every case's interval
        counts = ", ".join(f"{n} {s}" for s, n in self.counts().items() if n)
        how = "paired" if self.paired else "across runs"
        if self.normalisation is not None and self.normalisation.used:
            how += f", load factor {self.normalisation.factor:.3g}"
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
        """Cases with an interval (slower, faster, unchanged or inconclusive on the noise)."""
        return sum(c.status in DECIDED or (c.status == "inconclusive" and c.interval is not None) for c in self.cases)

    @property
    def costlier(self) -> list[CaseVerdict]:
        """Cases whose exact counters grew (history/counters.py): a regression whatever the times say."""
        return [c for c in self.cases if c.counter_regressions]

    @property
    def exit_code(self) -> int:
        return EXIT_REGRESSION if self.regressions or self.costlier else EXIT_OK

    def counts(self) -> dict[str, int]:
        return {s: len(self.with_status(s)) for s in STATUS_ORDER}


def _metric_of(result: Result, metric: str | None) -> str:
    return metric or result.primary


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


def _load(rs: ResultSet) -> float | None:
    xs = [rs.env.get(k) for k in ("load_start", "load_end")]
    xs = [float(x) for x in xs if isinstance(x, (int, float))]
    return sum(xs) / len(xs) if xs else None


def _load_warning(base: ResultSet, head: ResultSet) -> str | None:
    a, b = _load(base), _load(head)
    if a is None or b is None:
        return None
    if abs(a - b) > max(LOAD_GAP, 0.25 * max(a, b)):
        cores = base.env.get("cores") or head.env.get("cores")
        on = f" on {cores} cores" if cores else ""
        return (f"the machine's load differed between the runs (1-minute load average: base {a:.1f}, head {b:.1f}{on}): "
                f"the in-run references divide out a uniform slow-down, not one that hits some cases more")
    return None


def decide(interval: RatioInterval, threshold: float) -> str:
    """slower / faster when the whole interval is past the threshold, unchanged when the whole
    interval is within it, else inconclusive (the noise cannot tell)."""
    if interval.low > 1 + threshold:
        return "slower"
    if interval.high < 1 / (1 + threshold):
        return "faster"
    if interval.low >= 1 / (1 + threshold) and interval.high <= 1 + threshold:
        return "unchanged"
    return "inconclusive"


def _rounds_of(result: Result, metric: str) -> int:
    split = round_split(result, metric)
    return len(split) if split else 1


def compare_sets(
    base: ResultSet,
    head: ResultSet,
    threshold: float = DEFAULT_THRESHOLD,
    confidence: float = DEFAULT_CONFIDENCE,
    metric: str | None = None,
    family_wise: bool = True,
    paired: bool | None = None,
    calibration: Calibration | None = None,
) -> Comparison:
    """Compare every case of ``head`` with the same case of ``base`` (``metric``: each case's primary).

    ``confidence`` is family-wise by default: with ``m`` cases compared, each case's interval is
    taken at ``1 - (1 - confidence) / m`` (Bonferroni), so that a report of 150 cases does not
    carry 7 false alarms at 95% each. ``family_wise=False`` uses ``confidence`` per case.

    ``paired``: the two sets come from one interleaved experiment (the gate's rounds). ``None``
    decides from the files (same ``gate_job`` or ``run_id``). ``paired=True`` for files that do
    not share one only drops the normalisation: the between-run noise still applies, since two
    runs are not a paired experiment (docs/method.md rule 19).

    Per case, the log-scale half-width of the interval is the root sum of squares of: the
    within-run bootstrap's, the between-run noise (files of different runs: ``calibration``'s
    bound for the case, else :data:`~.calibration.UNCALIBRATED_NOISE`; divided by the square root
    of the rounds a file holds), and the normalisation's. A paired experiment with rounds takes
    the wider of its rounds' bootstrap and the calibrated noise.

    Raises ValueError when the two sets have no case in common that can be compared: a gate that
    compared nothing must not pass.
    """
    if threshold < 0:
        raise ValueError(f"threshold must not be negative, got {threshold}")
    if not 0 < confidence < 1:
        raise ValueError(f"confidence must be between 0 and 1, got {confidence}")
    old, new = base.by_key(), head.by_key()
    one_experiment = same_experiment(base, head)
    if paired is None:
        paired = one_experiment
    across_runs = not one_experiment
    warnings = _env_warnings(base, head)
    norm = reference_factor(old, new) if not paired else None
    if paired and across_runs:
        warnings.append("--paired: the files do not come from one interleaved experiment (no shared gate job or "
                        "run id): they are not normalised, but the between-run noise still applies (docs/method.md rule 19)")
    cal_note = _calibration_warning(calibration, base, head)
    if cal_note:
        warnings.append(cal_note)
        calibration = None
    regime = _calibration_load_note(calibration, base, head)
    if regime:
        warnings.append(regime)
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
            cases.append(CaseVerdict(key, "inconclusive", m, None, n_base, n_head, f"no {m!r} samples in {side}"))
            continue
        if min(n_base, n_head) < MIN_SAMPLES:
            cases.append(
                CaseVerdict(key, "inconclusive", m, None, n_base, n_head,
                            f"too few samples to decide (base {n_base}, head {n_head}; need {MIN_SAMPLES})")
            )
            continue
        todo.append((key, m, a, b))
    per_case = 1 - (1 - confidence) / max(1, len(todo)) if family_wise else confidence
    z = NormalDist().inv_cdf(1 - (1 - per_case) / 2)
    resamples = DEFAULT_RESAMPLES if per_case <= 0.99 else 2 * DEFAULT_RESAMPLES
    factor = norm.factor if norm is not None and norm.used else 1.0
    h_norm = norm.half_width * z / NormalDist().inv_cdf(0.975) if norm is not None and norm.used else 0.0
    spread = _case_spread(old, new, todo) if across_runs else 0.0
    assumed = max(UNCALIBRATED_NOISE, spread)
    moderated = _moderated_round_halfwidths(old, new, todo, per_case)
    for key, m, a, b in todo:
        try:
            split_a, split_b = round_split(new[key], m), round_split(old[key], m)
            rounds = bool(split_a and split_b and (len(split_a) > 1 or len(split_b) > 1))
            h_rounds = None
            if rounds:
                interval = rounds_ratio_interval(_chunks(a, split_a), _chunks(b, split_b), per_case, resamples)
                h_rounds = moderated.get(key) or round_ratio_halfwidth(_chunks(a, split_a), _chunks(b, split_b),
                                                                       per_case)
            else:
                interval = ratio_interval(a, b, confidence=per_case, resamples=resamples)
        except ValueError as exc:  # zero or negative times: a broken measurement, say so
            cases.append(CaseVerdict(key, "inconclusive", m, None, len(b), len(a), str(exc)))
            continue
        ratio = interval.ratio / factor
        h_within = max(math.log(interval.ratio / interval.low), math.log(interval.high / interval.ratio), 0.0) \
            if interval.low > 0 else math.inf
        k = min(_rounds_of(new[key], m), _rounds_of(old[key], m))
        noise = calibration.noise(key) if calibration is not None else None
        if noise is not None:
            sigma, source = noise
        elif across_runs:
            sigma, source = assumed, "assumed, no calibration"
        elif rounds and h_rounds is not None:  # the rounds' own spread, t interval (few rounds: wide)
            sigma, source = 0.0, f"{k} rounds"
        else:
            sigma, source = 0.0, "within-run"
        h_between = z * sigma / math.sqrt(k)
        if h_rounds is not None and not across_runs:  # the rounds' spread; a calibration bounds it below
            h_between = max(h_between, h_rounds)
        if across_runs:
            h = math.sqrt(h_within ** 2 + h_between ** 2 + h_norm ** 2)
        else:  # one experiment: its rounds' bootstrap already holds their spread; the calibration bounds it below
            h = max(h_within, h_between)
        h = min(h, MAX_HALF_WIDTH)
        low, high = ratio * math.exp(-h), ratio * math.exp(h)
        if h == h_within and not across_runs:  # the bootstrap's own (asymmetric) interval
            low, high = interval.low / factor, interval.high / factor
        final = RatioInterval(ratio, low, high, per_case, interval.median_a, interval.median_b)
        status = decide(final, threshold)
        guessed = across_runs and noise is None and status != "inconclusive"
        if guessed:  # no measured between-run noise: two runs are no paired experiment (docs/method.md rule 19)
            looks = status
            status = "inconclusive"
        parts = []
        if norm is not None and norm.used:
            parts.append(f"/{factor:.3g} load")
        parts.append(f"noise ±{_growth(h)} ({source})")
        note = ", ".join(parts)
        if guessed:
            note = (note + "; " if note else "") + f"looks {looks}, but the between-run noise was not measured"
        elif status == "inconclusive":
            note = (note + "; " if note else "") + f"noise too large to decide at ±{threshold:.0%}"
        cases.append(CaseVerdict(key, status, m, final, len(b), len(a), note, h,
                                 (1 + threshold) * math.exp(h), source))
    cases = sorted((_with_counters(c, old, new) for c in cases), key=lambda c: c.key)
    comparison = Comparison(cases, threshold, confidence, metric, warnings, per_case, paired=paired,
                            normalisation=norm, calibration=calibration)
    if across_runs:
        comparison.warnings.append(_across_runs_note(norm, calibration, spread))
        load = _load_warning(base, head)
        if load:
            comparison.warnings.append(load)
    noisy = round_noise(old, new, metric)
    if noisy is not None and noisy > 1 + threshold:
        comparison.warnings.append(
            f"noisy machine: between its own rounds the same code moved by a median factor of {noisy:.2f} "
            f"(max / min of round medians, per case); verdicts at the {threshold:.0%} level are fragile here"
        )
    if not comparison.compared:
        undecided = [c for c in comparison.with_status("inconclusive")]
        why = f"; e.g. {undecided[0].key}: {undecided[0].note}" if undecided else ""
        raise ValueError(
            f"nothing to compare: base has {len(old)} cases, head {len(new)}, "
            f"{len(old.keys() & new.keys())} in common, none with enough samples{why}"
        )
    return comparison


def _growth(h: float) -> str:
    """A log-scale half-width as the percentage it spans: 0.0953 -> '10%'."""
    return "inf" if not math.isfinite(h) else f"{math.exp(h) - 1:.0%}"


def _calibration_warning(calibration: Calibration | None, base: ResultSet, head: ResultSet) -> str | None:
    """A calibration made on another machine (other cores or host) is ignored, with this warning."""
    if calibration is None:
        return None
    for key in ("cores", "host"):
        cal = calibration.env.get(key)
        ours = head.env.get(key) or base.env.get(key)
        if cal is not None and ours is not None and str(cal) != str(ours):
            return (f"the calibration {calibration.path or ''} was made with {key} {cal!r}, these runs with "
                    f"{ours!r}: it is ignored (calibrate on this runner with `ipcbench calibrate`)")
    return None


def _case_spread(old: dict[str, Result], new: dict[str, Result],
                 todo: Sequence[tuple[str, str, list[float], list[float]]]) -> float:
    """How far the cases' log ratios scatter around their own median (1.4826 x MAD): a spread,
    not a shift, so a slowdown of every case does not read as noise, while two runs whose cases
    each moved their own way do."""
    logs = []
    for key, _m, a, b in todo:
        r = _median_ratio(a, b)
        if r:
            logs.append(math.log(r))
    if len(logs) < 8:
        return 0.0
    x = np.asarray(logs)
    return float(1.4826 * np.median(np.abs(x - np.median(x))))


def _calibration_load_note(calibration: Calibration | None, base: ResultSet, head: ResultSet) -> str | None:
    """A warning when the runs met a load well outside the one the calibration was measured at."""
    if calibration is None:
        return None
    load = calibration.env.get("load")
    ours = [x for x in (_load(base), _load(head)) if x is not None]
    if not (isinstance(load, list) and len(load) == 2 and ours):
        return None
    lo, hi = float(load[0]), float(load[1])
    outside = [x for x in ours if x < lo / 1.5 - 0.5 or x > hi * 1.5 + 0.5]
    if not outside:
        return None
    return (f"the runs met a load of {', '.join(f'{x:.1f}' for x in ours)}, the calibration was measured at "
            f"{lo:.1f}-{hi:.1f}: the noise of a case can differ between loads (some cases switch between two "
            f"speeds); calibrate at the load the runs meet")


def _across_runs_note(norm: Normalisation | None, calibration: Calibration | None, spread: float) -> str:
    how = "not normalised (--paired)" if norm is None else norm.describe()
    if calibration is not None:
        noise = f"the between-run noise of each case is the one measured by the {calibration.describe()}"
    else:
        noise = (f"no calibration: the between-run noise of the cases was not measured, so no case is decided "
                 f"(every one is inconclusive; 'looks slower' / 'looks faster' in its notes, its interval assuming "
                 f"±{math.exp(max(UNCALIBRATED_NOISE, spread)) - 1:.0%} (1 sd, log scale), the larger of "
                 f"±{math.exp(UNCALIBRATED_NOISE) - 1:.0%} and the cases' own spread around their median ratio); "
                 f"`ipcbench calibrate` measures the noise on this runner, then compare decides")
    return f"base and head come from different runs (not one interleaved experiment): {how}; {noise}"


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


def pooling_group(key: str) -> str:
    """Cases whose rounds share how the machine disturbs them: a scenario and backend at a rank count."""
    parts = key.split("/")
    return f"{parts[0]}/{parts[1]}/{parts[-1]}" if len(parts) >= 3 else key


def _moderated_round_halfwidths(old: dict[str, Result], new: dict[str, Result],
                                todo: Sequence[tuple[str, str, list[float], list[float]]],
                                confidence: float) -> dict[str, float]:
    """Per case of a paired experiment with rounds: the half-width of its rounds' interval, its
    variance moderated by its group's (:func:`~.stats.moderated_halfwidths`)."""
    ratios: dict[str, np.ndarray] = {}
    for key, m, a, b in todo:
        split_a, split_b = round_split(new[key], m), round_split(old[key], m)
        if not split_a or not split_b:
            continue
        try:
            d = paired_round_log_ratios(_chunks(a, split_a), _chunks(b, split_b))
        except (ValueError, FloatingPointError):
            continue
        if d is not None and np.all(np.isfinite(d)):
            ratios[key] = d
    return moderated_halfwidths(ratios, {k: pooling_group(k) for k in ratios}, confidence)


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
    extra = "".join(f"; {e}" for e in case.explanations)
    if iv is None:
        return [case.key, "-", "-", "-", "-", case.status, "-", case.note + extra]
    return [
        case.key,
        format_time(iv.median_b),
        format_time(iv.median_a),
        f"{iv.ratio:.3f}x",
        f"{iv.low:.3f}-{iv.high:.3f}",
        case.status,
        _detect_text(case.detectable),
        f"n={case.n_base}/{case.n_head}" + (f" {case.note}" if case.note else "") + extra,
    ]


def _ordered(comparison: Comparison) -> list[CaseVerdict]:
    rank = {s: i for i, s in enumerate(STATUS_ORDER)}
    return sorted(comparison.cases, key=lambda c: (rank[c.status], c.key))


def _with_counters(case: CaseVerdict, old: dict[str, Result], new: dict[str, Result]) -> CaseVerdict:
    """The case with its counter changes beside its time verdict (history/counters.py), or "no
    counter moved" when both sides were counted and none did. Counts do not move with load, so a
    change says why a time moved (or that something changed that time could not show)."""
    base, head = old.get(case.key), new.get(case.key)
    if case.status == "reference" or base is None or head is None:
        return case
    verdict = counter_verdict(base, head)
    if verdict is None:  # not counted on both sides
        return case
    return replace(case, explanations=[*case.explanations, *verdict.lines], counter_changes=verdict.changes,
                   counter_regressions=verdict.regressions)


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
        inconclusive = comparison.with_status("inconclusive")
        if inconclusive:
            verdict_line += (f" ({len(inconclusive)} inconclusive: their noise hides a change of "
                             f"{_detect_text(_median_detectable(inconclusive))} (median); see 'detects')")
    changed = [c for c in comparison.cases if c.counter_changes]
    if changed:
        parts += f"; the cost per message changed in {len(changed)} case(s) (counters, see notes)"
    line = regression_line([(c.key, c.counter_regressions) for c in comparison.costlier])
    if line:
        verdict_line = f"{line}; {verdict_line}" if not comparison.regressions else f"{verdict_line}; {line}"
    return f"{parts}\n{verdict_line}"


def _detect_text(x: float | None) -> str:
    """The smallest detectable slowdown for people: beyond 1000x it only says how hopeless."""
    return ">1000x" if x is not None and x > 1000 else format_ratio(x)


def _median_detectable(cases: Sequence[CaseVerdict]) -> float | None:
    xs = [c.detectable for c in cases if c.detectable is not None and math.isfinite(c.detectable)]
    return float(np.median(xs)) if xs else None


def _ci_label(comparison: Comparison) -> str:
    return f"{_pct(comparison.per_case_confidence or comparison.confidence)} CI"


def _pct(x: float) -> str:
    """0.95 -> '95%', 0.99966 -> '99.97%'."""
    return f"{float(f'{x * 100:.4g}'):g}%"


def _decision_note(comparison: Comparison) -> str:
    pct = round(comparison.threshold * 100, 1)
    rule = (f"a case is slower only when its whole {_ci_label(comparison)} of head / base lies above "
            f"{1 + comparison.threshold:.3g} (+{pct:g}%), faster only when below {1 / (1 + comparison.threshold):.3g}, "
            f"unchanged when within both, else inconclusive; 'detects' is the smallest slowdown the case's "
            f"measured noise lets it call slower")
    if comparison.family_wise:
        rule += (f"; each case at {_pct(comparison.per_case_confidence)} so that all {comparison.compared} "
                 f"together hold at {_pct(comparison.confidence)} (Bonferroni)")
    return rule


def _columns(comparison: Comparison) -> list[str]:
    return ["case", "base median", "head median", "head/base", _ci_label(comparison), "verdict", "detects", "notes"]


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
    mark = ":x:" if comparison.exit_code else ":white_check_mark:"
    head, verdict_line = _headline(comparison).split("\n")
    out = [f"## {title}", "", f"{mark} **{verdict_line}**", "", f"Cases: {head}.", ""]
    out += [f"> warning: {w}" for w in comparison.warnings]
    cols = _columns(comparison)
    out.append("| " + " | ".join(cols) + " |")
    out.append("|" + "|".join(["---"] + ["---:"] * 4 + ["---", "---:", "---"]) + "|")
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
