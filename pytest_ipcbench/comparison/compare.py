"""Compare two result sets case by case: slower, faster, unchanged or inconclusive.

Cases are matched by key. Each case's head / base of the medians gets an interval: the bootstrap of
its samples (two-level over rounds), widened by the noise its situation could not show itself
(:mod:`.noise`). Then one rule (:func:`decide`): *slower* when the whole interval lies above
``1 + threshold``, *faster* when below ``1 / (1 + threshold)``, *unchanged* when within both, else
*inconclusive*; a case whose between-run noise nobody measured only "looks" slower or faster
(docs/method.md rule 19). A gate's rounds and several runs a side are judged by their medians and
by their fast tails, each at half the error rate. The outcome: :class:`~.verdict.Comparison`.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from statistics import NormalDist

from ..core.case_rules import Waiver
from ..results.results import Result, ResultSet
from ..results.stats import (
    DEFAULT_CONFIDENCE,
    DEFAULT_RESAMPLES,
    RatioInterval,
    ratio_interval,
    round_ratio_halfwidth,
    rounds_ratio_interval,
)
from .calibration import SHARED_RUN, UNCALIBRATED_NOISE, Calibration, busier_than_calibrated, others_share
from .compare_notes import (
    across_runs_note,
    calibration_load_note,
    calibration_warning,
    env_warnings,
    host_state_warning,
    load_warning,
)
from .counters import counter_verdict
from .noise import (
    CaseData,
    Noise,
    case_spread,
    median_ratio,
    more_needed,
    one_experiment,
    runs_a_side,
    separate_calibrated,
    separate_uncalibrated,
)
from .normalise import Normalisation, is_reference, reference_factor
from .rounds import chunks, metric_of, moderated_round_halfwidths, round_noise, round_split
from .run_sets import MIN_RUNS, RUN_QUANTILE, overlap_problem, runs_of, shared_runs
from .verdict import DEFAULT_THRESHOLD, MAX_HALF_WIDTH, MIN_SAMPLES, CaseVerdict, Comparison

Todo = tuple[str, str, list[float], list[float]]  # key, metric, head samples, base samples


def same_experiment(base: ResultSet, head: ResultSet) -> bool:
    """Were both sets made by one interleaved experiment (one gate job), or are they one run?"""
    for key in ("gate_job", "run_id"):
        a, b = base.env.get(key), head.env.get(key)
        if a is not None and a == b:
            return True
    return False


def from_gate_rounds(base: ResultSet, head: ResultSet) -> bool:
    """Were both sets merged from the rounds of one gate (:func:`~.rounds.merge_rounds`)?"""
    return same_experiment(base, head) and all(isinstance(rs.env.get("gate_rounds"), int) for rs in (base, head))


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


@dataclass
class Setting:
    """What holds for every case of one comparison: which situation, the normalisation, the
    calibration (None when it does not apply), a run that shared the machine, the warnings."""

    across_runs: bool  # separate runs, not one interleaved experiment
    paired: bool  # not divided by the in-run references
    from_gate: bool  # a gate's sides, merged from its rounds
    gate_rounds: int  # the fewer rounds of the gate's two sides (0: not a gate)
    runs_a_side: bool  # several alternated runs a side: their own spread bounds the noise
    calibration: Calibration | None
    norm: Normalisation | None = None
    shared: str | None = None
    warnings: list[str] = field(default_factory=list)

    @property
    def judged_twice(self) -> bool:
        """Sides of several runs and a gate's rounds: judged by medians and by fast tails."""
        return self.runs_a_side or (self.from_gate and self.gate_rounds > 1)


def setting_of(base: ResultSet, head: ResultSet, paired: bool | None, calibration: Calibration | None) -> Setting:
    one = same_experiment(base, head)
    why_not_runs = overlap_problem(base, head) if not one else "one experiment"
    gate = from_gate_rounds(base, head)
    s = Setting(not one, one if paired is None else paired, gate,
                min(base.env["gate_rounds"], head.env["gate_rounds"]) if gate else 0, why_not_runs is None,
                calibration, warnings=env_warnings(base, head))
    if s.across_runs and not s.runs_a_side and (runs_of(base) or runs_of(head)):
        s.warnings.append(f"the sides' runs are judged as single runs are (the calibration's rule): {why_not_runs}")
    busy = [*shared_runs(base, "base", SHARED_RUN), *shared_runs(head, "head", SHARED_RUN)] if s.runs_a_side else []
    if busy:
        s.warnings.append(f"other processes took a share of the CPUs while some runs ran ({'; '.join(busy)}): their "
                          f"spread widens the intervals of every case they slowed; rerun them on a quieter machine")
    s.norm = reference_factor(base.by_key(), head.by_key()) if not s.paired else None
    if s.paired and s.across_runs:
        s.warnings.append("--paired: the files do not come from one interleaved experiment (no shared gate job or "
                          "run id): they are not normalised, but the between-run noise still applies (docs/method.md "
                          "rule 19)")
    elsewhere = calibration_warning(calibration, base, head)
    if elsewhere:  # made on another machine: ignored
        s.warnings.append(elsewhere)
        s.calibration = None
    load_note = calibration_load_note(s.calibration, base, head)
    notes = [load_note]
    if s.calibration is not None and s.across_runs and not s.runs_a_side:
        notes.append(s.calibration.held_out_note())
        why = [f"{side}: {w}" for side, rs in (("base", base), ("head", head))
               if (w := busier_than_calibrated(s.calibration, others_share(rs)))]
        # a run that shared the machine more than any calibration run did, or met a load far from
        # the calibration's: the noise it met is not the one measured (docs/method.md rule 19)
        if why or load_note:
            s.shared = "; ".join(why) or "the runs met a load far from the calibration's"
            notes.append(f"{s.shared}: no time verdict is given ('looks slower' / 'looks faster' in the notes); "
                         f"rerun on a quieter machine, or calibrate at the load the runs meet")
    s.warnings.extend(n for n in notes if n)
    return s


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
    thresholds: Callable[[str], float] | None = None,
    waivers: Callable[[str], Waiver | None] | None = None,
    quantiles: Sequence[float] | None = None,
) -> Comparison:
    """Compare every case of ``head`` with the same case of ``base`` (``metric``: each case's primary).

    ``confidence`` is family-wise by default (Bonferroni over the cases compared, and over the
    two ways sides of several runs and a gate's rounds are judged: their medians and their
    ``fast_tail`` quantiles; None: medians alone; ``quantiles`` picks some of those ways).
    ``paired``: not divided by the in-run references (None: when both come from one experiment);
    files of separate runs still get the between-run noise. ``thresholds``: each case's
    threshold (default ``threshold``); ``waivers``: each case's waiver, if any.

    Raises ValueError when the two sets have no case in common that can be compared: a gate that
    compared nothing must not pass.
    """
    if threshold < 0:
        raise ValueError(f"threshold must not be negative, got {threshold}")
    if not 0 < confidence < 1:
        raise ValueError(f"confidence must be between 0 and 1, got {confidence}")
    threshold_of = thresholds or (lambda key: threshold)
    old, new = base.by_key(), head.by_key()
    s = setting_of(base, head, paired, calibration)
    cases, todo = _sort_out(old, new, metric)
    ways = (0.5, fast_tail) if s.judged_twice and fast_tail is not None else (0.5,)
    per_case = 1 - (1 - confidence) / (max(1, len(todo)) if family_wise else 1) / len(ways)
    z = NormalDist().inv_cdf(1 - (1 - per_case) / 2)
    assumed = max(UNCALIBRATED_NOISE, case_spread(todo) if s.across_runs else 0.0)
    measured = {q: _measure(todo, old, new, s, per_case, z, q) for q in ways if quantiles is None or q in quantiles}
    one_round = 0
    for key, m, a, b in todo:
        found = [measured[q][key] for q in measured]
        ok = [f for f in found if not isinstance(f, str)]
        if len(ok) < len(found):  # zero or negative times: a broken measurement, say so
            cases.append(CaseVerdict(key, "inconclusive", m, None, len(b), len(a),
                                     next(f for f in found if isinstance(f, str)),
                                     threshold=threshold_of(key), decide="a measurement with positive times"))
            continue
        one_round += s.from_gate and ok[0][1] == 1 and not s.across_runs
        judged = [_judge(s, data, _noise(s, data, k, assumed), threshold_of(key), m, len(b), len(a))
                  for data, k in ok]
        what = "rounds" if not s.across_runs else "runs"
        cases.append(_either(judged[0], judged[1], what) if len(judged) > 1 else judged[0])
    cases = sorted((_with_counters(c, old, new, waivers) for c in cases), key=lambda c: c.key)
    comparison = Comparison(cases, threshold, confidence, metric, s.warnings, per_case, paired=s.paired,
                            normalisation=s.norm, calibration=s.calibration)
    comparison.warnings.extend(_closing_warnings(s, base, head, old, new, threshold, metric, one_round, assumed,
                                                 fast_tail if len(ways) > 1 else None))
    comparison.noise = _noise_line(s, base, head, assumed)
    if not comparison.compared:
        undecided = comparison.with_status("inconclusive")
        why = f"; e.g. {undecided[0].key}: {undecided[0].note}" if undecided else ""
        raise ValueError(f"nothing to compare: base has {len(old)} cases, head {len(new)}, "
                         f"{len(old.keys() & new.keys())} in common, none with enough samples{why}")
    return comparison


def _sort_out(old: dict[str, Result], new: dict[str, Result], metric: str | None
              ) -> tuple[list[CaseVerdict], list[Todo]]:
    """The cases that get no interval (references, added, removed, too few samples) with their
    verdicts, and the cases to judge."""
    cases: list[CaseVerdict] = []
    todo: list[Todo] = []
    for key in sorted(old.keys() | new.keys()):
        if (key in old and is_reference(old[key])) or (key in new and is_reference(new[key])):
            r = next(x for x in (new.get(key), old.get(key)) if x is not None)
            a = new[key].samples.get(r.primary) if key in new else None
            b = old[key].samples.get(r.primary) if key in old else None
            ratio = median_ratio(a, b) if a and b else None
            note = f"in-run reference, head/base {ratio:.3f}x" if ratio else "in-run reference"
            cases.append(CaseVerdict(key, "reference", r.primary, None, len(b or ()), len(a or ()), note))
        elif key not in new or key not in old:
            cases.append(CaseVerdict(key, "removed" if key not in new else "added",
                                     note="only in base" if key not in new else "only in head"))
        else:
            m = metric_of(new[key], metric)
            a, b = new[key].samples.get(m), old[key].samples.get(m)
            n_head, n_base = len(a or ()), len(b or ())
            if not a or not b:
                side = "either side" if not a and not b else ("head" if not a else "base")
                cases.append(CaseVerdict(key, "inconclusive", m, None, n_base, n_head, f"no {m!r} samples in {side}",
                                         decide=f"{m!r} samples on both sides"))
            elif min(n_base, n_head) < MIN_SAMPLES:
                cases.append(CaseVerdict(key, "inconclusive", m, None, n_base, n_head,
                                         f"too few samples to decide (base {n_base}, head {n_head}; "
                                         f"need {MIN_SAMPLES})", decide="more samples (a longer --time-budget)"))
            else:
                todo.append((key, m, a, b))
    return cases, todo


def _measure(todo: Sequence[Todo], old: dict[str, Result], new: dict[str, Result], s: Setting, per_case: float,
             z: float, quantile: float) -> dict[str, tuple[CaseData, int] | str]:
    """Each case's measurement (its samples' bootstrap interval, its rounds' spread) with its
    number of rounds, when it has rounds on a side (else 1); the error when its times are bad."""
    resamples = DEFAULT_RESAMPLES if per_case <= 0.99 else 2 * DEFAULT_RESAMPLES
    factor = s.norm.factor if s.norm is not None and s.norm.used else 1.0
    h_norm = s.norm.half_width * z / NormalDist().inv_cdf(0.975) if s.norm is not None and s.norm.used else 0.0
    moderated = moderated_round_halfwidths(old, new, todo, per_case, quantile)
    stat = "medians" if quantile == 0.5 else f"{quantile:.0%} quantiles"
    out: dict[str, tuple[CaseData, int] | str] = {}
    for key, m, a, b in todo:
        split_a, split_b = round_split(new[key], m), round_split(old[key], m)
        rounds = bool(split_a and split_b and (len(split_a) > 1 or len(split_b) > 1))
        try:
            if rounds:
                ra, rb = chunks(a, split_a or []), chunks(b, split_b or [])
                iv = rounds_ratio_interval(ra, rb, per_case, resamples, quantile=quantile)
                h_rounds = moderated.get(key) or round_ratio_halfwidth(ra, rb, per_case, quantile)
            else:
                iv, h_rounds = ratio_interval(a, b, confidence=per_case, resamples=resamples), None
        except ValueError as exc:
            out[key] = str(exc)
            continue
        iv = replace(iv, ratio=iv.ratio / factor, low=iv.low / factor, high=iv.high / factor)
        h_within = max(math.log(iv.ratio / iv.low), math.log(iv.high / iv.ratio), 0.0) if iv.low > 0 else math.inf
        kb, ka = len(split_b or [1]), len(split_a or [1])
        what = (f"{kb} base and {ka} head runs' {stat}" if s.runs_a_side
                else f"{min(ka, kb)} rounds" + ("" if quantile == 0.5 else f"' {stat}"))
        out[key] = (CaseData(key, iv, h_within, h_rounds, min(ka, kb), z, h_norm, what), max(ka, kb) if rounds else 1)
    return out


def _noise(s: Setting, case: CaseData, rounds: int, assumed: float) -> Noise:
    """The situation of this case, and so its noise (:mod:`.noise`)."""
    one_round = s.from_gate and rounds == 1 and not s.across_runs
    calibrated = s.calibration is not None and s.calibration.noise(case.key) is not None
    if s.runs_a_side and case.h_rounds is not None:
        return runs_a_side(case, s.calibration)
    if (s.across_runs or one_round) and calibrated:
        return replace(separate_calibrated(case, s.calibration, s.shared), exact=one_round)  # type: ignore[arg-type]
    if s.across_runs or one_round:
        return replace(separate_uncalibrated(case, assumed, one_round), exact=one_round)
    return one_experiment(case, s.calibration)


def _judge(s: Setting, data: CaseData, noise: Noise, threshold: float, metric: str, n_base: int,
           n_head: int) -> CaseVerdict:
    """interval -> decision -> words."""
    iv = data.interval
    h = min(noise.h, MAX_HALF_WIDTH)
    low, high = iv.ratio * math.exp(-h), iv.ratio * math.exp(h)
    if noise.exact and h == data.h_within:  # the bootstrap's own (asymmetric) interval
        low, high = iv.low, iv.high
    final = RatioInterval(iv.ratio, low, high, iv.confidence, iv.median_a, iv.median_b)
    status = decide(final, threshold)
    looks = status if not noise.measured and status != "inconclusive" else None
    status = "inconclusive" if looks else status
    parts = [f"divided by {s.norm.factor:.3g} (the in-run references)"] if s.norm is not None and s.norm.used else []
    note = ", ".join([*parts, f"noise ±{_growth(h)} ({noise.source})"])
    todo, need = "", None
    if looks:
        note += f"; looks {looks}, but {noise.unmeasured} was not measured"
    elif status == "inconclusive":
        note += f"; noise too large to decide at ±{threshold:.0%}"
    if status == "inconclusive":
        need = more_needed(noise, data.k, iv.ratio, threshold) if noise.measured else None
        todo = _what_decides(noise, data.k, need)
    return CaseVerdict(data.key, status, metric, final, n_base, n_head, note, h, (1 + threshold) * math.exp(h),
                       noise.source, threshold=threshold, decide=todo, rounds_needed=need)


def _what_decides(noise: Noise, k: int, need: int | None) -> str:
    """What would decide an undecided case: a calibration, the gate, or about N rounds or runs a side."""
    if not noise.measured:
        if noise.unmeasured == "how much a round moves":
            return "2 or more rounds a side (--rounds), or a calibration (ipcbench calibrate)"
        if noise.unmeasured.startswith("the noise at the load"):
            return "runs at the calibration's load, a calibration at this load, or the gate"
        return f"a calibration (ipcbench calibrate), {MIN_RUNS} alternated runs a side, or the gate"
    if need is None or need > 1000:
        return ("hardly more rounds or runs: its ratio sits near the threshold" if noise.more
                else "interleaved rounds (the gate)")
    if noise.more == "rounds":
        return f"about {need} rounds a side (the gate's --confirm-rounds, --budget)"
    return f"about {max(need, MIN_RUNS)} alternated runs a side" + ("" if k > 1 else ", or the gate")


def _either(by_median: CaseVerdict, by_tail: CaseVerdict, what: str = "runs") -> CaseVerdict:
    """One case's verdict from its runs' (rounds') medians and from their fast tails (each at half
    the error rate): the one that decides when the other cannot; none when both decide, differently."""
    if by_median.key != by_tail.key or by_median.status == by_tail.status or by_tail.status == "inconclusive":
        return by_median
    if by_median.status == "inconclusive":
        return by_tail
    return replace(by_median, status="inconclusive", decide=by_median.decide or "more rounds or runs a side",
                   note=f"{by_median.note}; the {what}' medians say {by_median.status}, "
                        f"their fast tails {by_tail.status}")


def _closing_warnings(s: Setting, base: ResultSet, head: ResultSet, old: dict[str, Result], new: dict[str, Result],
                      threshold: float, metric: str | None, one_round: int, assumed: float,
                      fast_tail: float | None) -> list[str]:
    out = []
    if fast_tail is not None:
        what = "runs" if s.across_runs else "rounds"
        out.append(f"each case is judged by its {what}' medians and by their {fast_tail:.0%} quantiles (other jobs "
                   f"move a {what[:-1]}'s fast tail least), each at half the error rate: a case takes the verdict "
                   f"that decides, and is inconclusive when both decide, differently")
    if one_round:
        out.append(
            f"{one_round} case(s) ran one round on a side: nothing measured how much a round of identical code "
            "moves, so their "
            + (f"between-round noise is the one measured by the {s.calibration.describe()}" if s.calibration
               else "intervals assume the uncalibrated between-run noise and get no time verdict "
                    "('looks slower' / 'looks faster' in their notes); run 2 or more rounds (--rounds) or calibrate"))
    if s.across_runs:
        runs = (len(runs_of(base)), len(runs_of(head))) if s.runs_a_side else None
        out.append(across_runs_note(s.norm, s.calibration, assumed, runs))
        out.extend(n for n in (load_warning(base, head), host_state_warning(base, head)) if n)
    noisy = round_noise(old, new, metric)
    if noisy is not None and noisy > 1 + threshold:
        out.append(f"noisy machine: between its own rounds the same code moved by a median factor of {noisy:.2f} "
                   f"(max / min of round medians, per case); verdicts at the {threshold:.0%} level are fragile here")
    return out


def _noise_line(s: Setting, base: ResultSet, head: ResultSet, assumed: float) -> str:
    """One line: how the noise of this comparison was taken."""
    if s.across_runs:
        return across_runs_note(s.norm, s.calibration, assumed, (len(runs_of(base)), len(runs_of(head)))
                                if s.runs_a_side else None)
    floor = f", at least the noise measured by the {s.calibration.describe()}" if s.calibration is not None else ""
    if s.from_gate:
        return (f"one interleaved experiment ({s.gate_rounds} or more rounds a side): each case's noise is how far "
                f"its rounds moved{floor}")
    return f"one run: each case's noise is its own samples' spread (a bootstrap){floor}"


def _growth(h: float) -> str:
    """A log-scale half-width as the percentage it spans: 0.0953 -> '10%'."""
    return "inf" if not math.isfinite(h) else f"{math.exp(h) - 1:.0%}"


def _with_counters(case: CaseVerdict, old: dict[str, Result], new: dict[str, Result],
                   waivers: Callable[[str], Waiver | None] | None) -> CaseVerdict:
    """The case with its waiver, and its counter changes beside its time verdict
    (comparison/counters.py): counts do not move with load, so a change says why a time moved."""
    if waivers is not None and case.status != "reference":
        case = replace(case, waiver=waivers(case.key))
    base, head = old.get(case.key), new.get(case.key)
    if case.status == "reference" or base is None or head is None:
        return case
    verdict = counter_verdict(base, head)
    if verdict is None:  # not counted on both sides
        return case
    return replace(case, explanations=[*case.explanations, *verdict.lines], counter_changes=verdict.changes,
                   counter_regressions=verdict.regressions)
