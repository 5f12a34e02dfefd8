"""Compare two result sets case by case: slower, faster, unchanged or inconclusive.

Cases are matched by key. For each case in both, head / base of the medians gets an interval
whose width comes from what was measured: the within-run spread of both sides (a bootstrap;
two-level over rounds for results merged from interleaved rounds, :func:`merge_rounds`) and,
for files of different runs, the between-run noise of that case on this runner (a calibration
file of ``ipcbench calibrate``, :mod:`.calibration`; without one a conservative assumed noise),
plus the interval of the robust normalisation by the in-run references; sides of several alternated
runs bound that noise by their own spread. Such sides, and a gate's rounds, are judged by their
medians and by their fast tails. A case is *slower* when the whole interval lies above
``1 + threshold``, *faster* when below ``1 / (1 + threshold)``,
*unchanged* when it lies within both, and *inconclusive* when the noise cannot decide; every
case also shows the smallest slowdown it could have detected. A whole file is never refused
because some cases are noisy (docs/method.md rule 19). The exit code is 1 when a case is slower
with confidence or, both sides counted, an exact counter of a case grew (comparison/counters.py), 2
when the inputs cannot be compared (bad file, nothing in common), else 0.
"""

from __future__ import annotations

import math
from dataclasses import replace
from statistics import NormalDist
from typing import Sequence

import numpy as np

from ..core.case_rules import CaseRules
from .calibration import SHARED_RUN, UNCALIBRATED_NOISE, Calibration, busier_than_calibrated, others_share
from .calibration_summary import JUDGEMENTS, rounds_to_detect
from .normalise import is_reference, reference_factor
from .counters import counter_verdict
from .compare_notes import (across_runs_note, calibration_load_note, calibration_warning, env_warnings,
                            load_warning, spell_warning)
from ..results.results import Result, ResultSet
from .run_sets import MIN_RUNS, RUN_QUANTILE, overlap_problem, runs_of, shared_runs
from .rounds import chunks, metric_of, moderated_round_halfwidths, round_noise, round_split
from ..results.stats import (DEFAULT_CONFIDENCE, DEFAULT_RESAMPLES, RatioInterval, ratio_interval, round_ratio_halfwidth,
                    rounds_ratio_interval)
from .verdict import DEFAULT_THRESHOLD, MAX_HALF_WIDTH, MIN_SAMPLES, CaseVerdict, Comparison

#: The slowdown whose runs a side an inconclusive case reports (as calibrate's "rounds for 1.5x").
DECIDE_EFFECT = 1.5


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


def from_gate_rounds(base: ResultSet, head: ResultSet) -> bool:
    """Were both sets merged from the rounds of one gate (:func:`~.rounds.merge_rounds`)?"""
    return same_experiment(base, head) and all(isinstance(rs.env.get("gate_rounds"), int) for rs in (base, head))


def compare_sets(
    base: ResultSet,
    head: ResultSet,
    threshold: float = DEFAULT_THRESHOLD,
    confidence: float = DEFAULT_CONFIDENCE,
    metric: str | None = None,
    family_wise: bool = True,
    paired: bool | None = None,
    calibration: Calibration | None = None,
    fast_tail: float | None = RUN_QUANTILE,
    rules: CaseRules | None = None,
) -> Comparison:
    """Compare every case of ``head`` with the same case of ``base`` (``metric``: each case's primary).

    Sides of several alternated runs (:func:`~.run_sets.overlap_problem`) and a gate's rounds are
    judged twice, each time at half the error rate: by their runs' (rounds') medians and by their
    fast tails, the ``fast_tail`` quantile of each (:data:`~.run_sets.RUN_QUANTILE`; None: medians
    alone), which other jobs move least; a case takes the verdict that decides, and is
    inconclusive when both decide, differently. Otherwise see :func:`_compare_sets`.
    """
    args = (base, head, threshold, confidence, metric, family_wise, paired, calibration, rules)
    gate = from_gate_rounds(base, head) and min(base.env["gate_rounds"], head.env["gate_rounds"]) > 1
    runs = not same_experiment(base, head) and overlap_problem(base, head) is None
    if fast_tail is None or not (gate or runs):
        return _compare_sets(*args)
    what = "rounds" if gate else "runs"
    by_median = _compare_sets(*args, quantile=0.5, tests=JUDGEMENTS)
    by_tail = _compare_sets(*args, quantile=fast_tail, tests=JUDGEMENTS)
    cases = [_either(m, t, what) for m, t in zip(by_median.cases, by_tail.cases)]
    warnings = [*by_median.warnings, f"each case is judged by its {what}' medians and by their {fast_tail:.0%} "
                f"quantiles (other jobs move a {what[:-1]}'s fast tail least), each at half the error rate: a case "
                f"takes the verdict that decides, and is inconclusive when both decide, differently"]
    return replace(by_median, cases=cases, warnings=warnings)


def _either(by_median: CaseVerdict, by_tail: CaseVerdict, what: str = "runs") -> CaseVerdict:
    """One case's verdict from its runs' (rounds') medians and from their fast tails (each at half
    the error rate): the one that decides when the other cannot; none when both decide, differently."""
    if by_median.key != by_tail.key or by_median.status == by_tail.status or by_tail.status == "inconclusive":
        return by_median
    if by_median.status == "inconclusive":
        return by_tail
    return replace(by_median, status="inconclusive",
                   note=f"{by_median.note}; the {what}' medians say {by_median.status}, their fast tails {by_tail.status}")


def _compare_sets(
    base: ResultSet,
    head: ResultSet,
    threshold: float = DEFAULT_THRESHOLD,
    confidence: float = DEFAULT_CONFIDENCE,
    metric: str | None = None,
    family_wise: bool = True,
    paired: bool | None = None,
    calibration: Calibration | None = None,
    rules: CaseRules | None = None,
    quantile: float = 0.5,
    tests: int = 1,
) -> Comparison:
    """Compare every case of ``head`` with the same case of ``base``, each case's runs or rounds
    summarised by ``quantile`` of their samples (the wrapper :func:`compare_sets` passes another
    than the median only for sides of several runs and a gate's rounds), at an error rate divided
    by ``tests`` (the number of ways each case is judged).

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
    the wider of its rounds' bootstrap and the calibrated noise. A gate's case with one round on a
    side is judged as two runs are (calibrated noise, else no time verdict), but not normalised.

    ``rules`` ([tool.ipcbench], core/case_rules.py): a case's own threshold; its waiver, carried.

    Raises ValueError when the two sets have no case in common that can be compared: a gate that
    compared nothing must not pass.
    """
    if threshold < 0:
        raise ValueError(f"threshold must not be negative, got {threshold}")
    if not 0 < confidence < 1:
        raise ValueError(f"confidence must be between 0 and 1, got {confidence}")
    rules = rules or CaseRules()
    old, new = base.by_key(), head.by_key()
    one_experiment = same_experiment(base, head)
    if paired is None:
        paired = one_experiment
    across_runs = not one_experiment
    from_gate = from_gate_rounds(base, head)
    one_round_cases = 0
    warnings = env_warnings(base, head)
    # sides of several separate runs that alternated: their own spread bounds the between-run noise
    why_not_runs = overlap_problem(base, head) if across_runs else "one experiment"
    runs_a_side = why_not_runs is None
    if across_runs and not runs_a_side and (runs_of(base) or runs_of(head)):
        warnings.append(f"the sides' runs are judged as single runs are (the calibration's rule): {why_not_runs}")
    busy = [*shared_runs(base, "base", SHARED_RUN), *shared_runs(head, "head", SHARED_RUN)] if runs_a_side else []
    if busy:  # one such run widens its cases' intervals (MPI cases here ran 5-8x slower beside a nice-19 job)
        warnings.append(f"other processes took a share of the CPUs while some runs ran ({'; '.join(busy)}): their "
                        f"spread widens the intervals of every case they slowed; rerun them on a quieter machine")
    norm = reference_factor(old, new) if not paired else None
    if paired and across_runs:
        warnings.append("--paired: the files do not come from one interleaved experiment (no shared gate job or "
                        "run id): they are not normalised, but the between-run noise still applies (docs/method.md rule 19)")
    cal_note = calibration_warning(calibration, base, head)
    if cal_note:
        warnings.append(cal_note)
        calibration = None
    regime = calibration_load_note(calibration, base, head)
    if regime:
        warnings.append(regime)
    held_out = calibration.held_out_note() if calibration is not None and across_runs and not runs_a_side else None
    if held_out:
        warnings.append(held_out)
    # a run that shared the machine more than any calibration run did: its noise is not the measured one
    shared = None
    if across_runs and calibration is not None and not runs_a_side:  # several runs a side show their own spread
        why = [f"{side}: {w}" for side, rs in (("base", base), ("head", head))
               if (w := busier_than_calibrated(calibration, others_share(rs)))]
        if why:
            shared = "; ".join(why)
            warnings.append(f"{shared}: no time verdict is given ('looks slower' / 'looks faster' in the notes); "
                            f"rerun it on a quieter machine, or calibrate at the load it meets")
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
        m = metric_of(new[key], metric)
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
    per_case = 1 - (1 - confidence) / max(1, len(todo)) / tests if family_wise else 1 - (1 - confidence) / tests
    z = NormalDist().inv_cdf(1 - (1 - per_case) / 2)
    resamples = DEFAULT_RESAMPLES if per_case <= 0.99 else 2 * DEFAULT_RESAMPLES
    factor = norm.factor if norm is not None and norm.used else 1.0
    h_norm = norm.half_width * z / NormalDist().inv_cdf(0.975) if norm is not None and norm.used else 0.0
    spread = _case_spread(old, new, todo) if across_runs else 0.0
    assumed = max(UNCALIBRATED_NOISE, spread)
    moderated = moderated_round_halfwidths(old, new, todo, per_case, quantile)
    for key, m, a, b in todo:
        try:
            split_a, split_b = round_split(new[key], m), round_split(old[key], m)
            rounds = bool(split_a and split_b and (len(split_a) > 1 or len(split_b) > 1))
            h_rounds = None
            if rounds:
                interval = rounds_ratio_interval(chunks(a, split_a), chunks(b, split_b), per_case, resamples,
                                                 quantile=quantile)
                h_rounds = moderated.get(key) or round_ratio_halfwidth(chunks(a, split_a), chunks(b, split_b),
                                                                       per_case, quantile)
            else:
                interval = ratio_interval(a, b, confidence=per_case, resamples=resamples)
        except ValueError as exc:  # zero or negative times: a broken measurement, say so
            cases.append(CaseVerdict(key, "inconclusive", m, None, len(b), len(a), str(exc)))
            continue
        # a gate's case with one round on a side: one round cannot show how much rounds move, and
        # its within-round interval is no verdict's (one round called identical code 5x faster)
        one_round = from_gate and not rounds
        one_round_cases += one_round
        ratio = interval.ratio / factor
        h_within = max(math.log(interval.ratio / interval.low), math.log(interval.high / interval.ratio), 0.0) \
            if interval.low > 0 else math.inf
        k = min(_rounds_of(new[key], m), _rounds_of(old[key], m))
        noise = calibration.noise(key) if calibration is not None else None
        own_spread = runs_a_side and h_rounds is not None
        if own_spread:  # several alternated runs a side: how far they moved, at least the calibrated noise
            floor = z * noise[0] / math.sqrt(k) if noise is not None else 0.0
            h_between = max(h_rounds, floor)  # type: ignore[arg-type]
            source = (f"spread of {_rounds_of(old[key], m)} base and {_rounds_of(new[key], m)} head runs' "
                      + ("medians" if quantile == 0.5 else f"{quantile:.0%} quantiles")
                      + ("; calibrated floor" if floor > h_rounds else ""))  # type: ignore[operator]
        elif noise is not None and (across_runs or one_round):
            # separate runs: the calibration's rule, its group's largest A/A jump a floor (rounds bound their own)
            h_between, source = calibration.between_runs(key, z, k)  # type: ignore[union-attr,misc]
        else:
            if noise is not None:
                sigma, source = noise
            elif across_runs or one_round:
                sigma, source = assumed, "assumed, no calibration"
            elif rounds and h_rounds is not None:  # the rounds' own spread, t interval (few rounds: wide)
                sigma, source = 0.0, f"{k} rounds" + ("" if quantile == 0.5 else f"' {quantile:.0%} quantiles")
            else:
                sigma, source = 0.0, "within-run"
            h_between = z * sigma / math.sqrt(k)
        if h_rounds is not None and not across_runs:  # the rounds' spread; a calibration bounds it below
            h_between = max(h_between, h_rounds)
        if own_spread:  # the runs' medians already hold each run's own sampling noise
            h = max(h_within, math.sqrt(h_between ** 2 + h_norm ** 2))
        elif across_runs or one_round:
            h = math.sqrt(h_within ** 2 + h_between ** 2 + h_norm ** 2)
        else:  # one experiment: its rounds' bootstrap already holds their spread; the calibration bounds it below
            h = max(h_within, h_between)
        h = min(h, MAX_HALF_WIDTH)
        low, high = ratio * math.exp(-h), ratio * math.exp(h)
        if h == h_within and not across_runs:  # the bootstrap's own (asymmetric) interval
            low, high = interval.low / factor, interval.high / factor
        final = RatioInterval(ratio, low, high, per_case, interval.median_a, interval.median_b)
        t = rules.threshold_for(key, threshold)
        status = decide(final, t)
        guessed = (across_runs or one_round) and not own_spread and (noise is None or shared is not None) \
            and status != "inconclusive"
        if guessed:  # no measured between-run noise: two runs are no paired experiment (docs/method.md rule 19)
            looks = status
            status = "inconclusive"
        parts = []
        if norm is not None and norm.used:
            parts.append(f"/{factor:.3g} load")
        parts.append(f"noise ±{_growth(h)} ({source})")
        note = ", ".join(parts)
        if guessed:
            unmeasured = ("how much a round moves" if one_round else "the between-run noise" if shared is None
                          else "the noise of a run that shared the machine")
            note = (note + "; " if note else "") + f"looks {looks}, but {unmeasured} was not measured"
        elif status == "inconclusive":
            note = (note + "; " if note else "") + f"noise too large to decide at ±{t:.0%}"
            if own_spread:  # how many runs would: the half-width shrinks as 1 / sqrt(runs)
                need = rounds_to_detect(h * math.sqrt(k), DECIDE_EFFECT, t, 1.0)
                if need is not None:
                    note += f"; {DECIDE_EFFECT:g}x would need about {max(need, MIN_RUNS)} runs a side"
        cases.append(CaseVerdict(key, status, m, final, len(b), len(a), note, h,
                                 (1 + t) * math.exp(h), source))
    cases = sorted((replace(_with_counters(c, old, new), threshold=rules.threshold_for(c.key, threshold),
                            waiver=rules.waiver_for(c.key)) for c in cases), key=lambda c: c.key)
    comparison = Comparison(cases, threshold, confidence, metric, warnings, per_case, paired=paired,
                            normalisation=norm, calibration=calibration)
    if one_round_cases:
        comparison.warnings.append(
            f"{one_round_cases} case(s) ran one round on a side: nothing measured how much a round of identical code "
            "moves, so their "
            + (f"between-round noise is the one measured by the {calibration.describe()}" if calibration is not None
               else "intervals assume the uncalibrated between-run noise and get no time verdict "
                    "('looks slower' / 'looks faster' in their notes); run 2 or more rounds (--rounds) or calibrate"))
    if across_runs:
        comparison.warnings.append(across_runs_note(norm, calibration, spread, (len(runs_of(base)), len(runs_of(head)))
                                                     if runs_a_side else None))
        for note in (load_warning(base, head), spell_warning(base, head)):
            if note:
                comparison.warnings.append(note)
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


# ------------------------------------------------------------------------------------ formats


def _with_counters(case: CaseVerdict, old: dict[str, Result], new: dict[str, Result]) -> CaseVerdict:
    """The case with its counter changes beside its time verdict (comparison/counters.py), or "no
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
