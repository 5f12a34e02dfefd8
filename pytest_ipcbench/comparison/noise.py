"""How wide one case's interval of head / base is, in each of the four situations compare meets.

Each starts from the case's measurement (:class:`CaseData`: the bootstrap interval of its
samples, and its rounds' or runs' spread) and adds the noise its files could not show (rule 19):
:func:`one_experiment` (one interleaved experiment: the rounds' spread, at least a calibration's),
:func:`runs_a_side` (several alternate runs a side: how far they moved), :func:`separate_calibrated`
(a calibration's between-run noise) and :func:`separate_uncalibrated` (an assumed noise: the
verdict only "looks"). Each returns a :class:`Noise`: the log-scale half-width, its source,
whether it was measured, and what more would decide the case.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from ..results.stats import RatioInterval
from .calibration import Calibration


@dataclass(frozen=True)
class CaseData:
    """What was measured of one case: the bootstrap interval of its samples (``interval``, its
    log half-width ``h_within``), its rounds' (or runs') t interval ``h_rounds`` (None: fewer than 2
    a side), the rounds a side (``k``: the fewer of the two sides'), and the z of its confidence."""

    key: str
    interval: RatioInterval
    h_within: float
    h_rounds: float | None
    k: int
    z: float
    h_norm: float = 0.0  # the normalisation's half-width (separate runs divided by their references)
    what: str = "rounds"  # what the rounds are: "rounds" (a gate's) or "runs" (separate runs a side)


@dataclass(frozen=True)
class Noise:
    """One case's half-width ``h`` (log scale) and where it came from. ``measured``: False when no
    between-run noise was measured (the verdict then only "looks"); ``exact``: the bootstrap's own
    (asymmetric) interval is the case's; ``unmeasured``: what was not measured; ``more``: what kind
    of repetition narrows it ("rounds", "runs a side", "" for none)."""

    h: float
    source: str
    measured: bool = True
    exact: bool = False
    unmeasured: str = ""
    more: str = ""


def one_experiment(case: CaseData, calibration: Calibration | None) -> Noise:
    """A gate's rounds (or one run): the rounds' own spread; their bootstrap already holds it, and
    a calibration's noise bounds it below (docs/method.md rule 21)."""
    cal = calibration.noise(case.key) if calibration is not None else None
    h_between = case.z * cal[0] / math.sqrt(case.k) if cal is not None else 0.0
    if cal is not None:
        source = cal[1]
    elif case.h_rounds is not None:
        source = case.what
    else:
        source = "within-run"
    if case.h_rounds is not None:
        h_between = max(h_between, case.h_rounds)
    h = max(case.h_within, h_between)
    return Noise(h, source, exact=h == case.h_within, more="rounds" if case.h_rounds is not None else "")


def runs_a_side(case: CaseData, calibration: Calibration | None) -> Noise:
    """Several alternated runs a side: how far they moved (the runs' medians already hold each
    run's own sampling noise), at least the calibrated noise."""
    assert case.h_rounds is not None
    cal = calibration.noise(case.key) if calibration is not None else None
    floor = case.z * cal[0] / math.sqrt(case.k) if cal is not None else 0.0
    h_between = max(case.h_rounds, floor)
    source = f"spread of {case.what}" + ("; calibrated floor" if floor > case.h_rounds else "")
    h = max(case.h_within, math.sqrt(h_between ** 2 + case.h_norm ** 2))
    return Noise(h, source, more="runs a side")


def separate_calibrated(case: CaseData, calibration: Calibration, shared: str | None) -> Noise:
    """Separate runs: the calibration's between-run noise of the case (its group's largest A/A jump
    a floor). A run that shared the machine more than the calibration's did, or met a load far
    from the calibration's (``shared`` says which), met a noise nobody measured."""
    between = calibration.between_runs(case.key, case.z, case.k)
    assert between is not None
    h_between, source = between
    h = math.sqrt(case.h_within ** 2 + h_between ** 2 + case.h_norm ** 2)
    return Noise(h, source, measured=shared is None, unmeasured="the noise at the load these runs met",
                 more="runs a side")


def separate_uncalibrated(case: CaseData, assumed: float, one_round: bool) -> Noise:
    """Separate runs without a calibration (or a gate's case with one round on a side): a
    conservative noise is assumed, and nothing measured it, so the case is not decided."""
    h_between = case.z * assumed / math.sqrt(case.k)
    h = math.sqrt(case.h_within ** 2 + h_between ** 2 + case.h_norm ** 2)
    unmeasured = "how much a round moves" if one_round else "the between-run noise"
    return Noise(h, "assumed, no calibration", measured=False, unmeasured=unmeasured)


def more_needed(noise: Noise, k: int, ratio: float, threshold: float) -> int | None:
    """About how many rounds (or runs) a side would decide a case of this point ``ratio``: the
    half-width shrinks as 1 / sqrt(rounds) until the interval clears the nearest boundary
    (None: the ratio sits on a boundary, or nothing repeats)."""
    if not noise.more or not math.isfinite(noise.h) or ratio <= 0:
        return None
    edge = math.log(1 + threshold)
    margin = abs(abs(math.log(ratio)) - edge)
    if margin < 1e-3:
        return None
    return max(k + 1, math.ceil(k * (noise.h / margin) ** 2))


def median_ratio(a: Sequence[float] | None, b: Sequence[float] | None) -> float | None:
    if not a or not b:
        return None
    ma, mb = float(np.median(a)), float(np.median(b))
    return ma / mb if ma > 0 and mb > 0 else None


def case_spread(todo: Sequence[tuple[str, str, list[float], list[float]]]) -> float:
    """How far the cases' log ratios scatter around their own median (1.4826 x MAD): a spread,
    not a shift, so a slowdown of every case does not read as noise, while two runs whose cases
    each moved their own way do."""
    logs = [math.log(r) for _k, _m, a, b in todo if (r := median_ratio(a, b))]
    if len(logs) < 8:
        return 0.0
    x = np.asarray(logs)
    return float(1.4826 * np.median(np.abs(x - np.median(x))))
