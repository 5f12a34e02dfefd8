"""What an A/A calibration measures and tells: the A/A runs themselves, the held-out check of
compare's rule, each group's summary (noise, false alarms, detectable change) and the cases a
gate's budget cannot decide. The calibration itself and compare's rule are :mod:`.calibration`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from statistics import NormalDist

import numpy as np

from ..results.results import ResultSet
from .calibration import Calibration, CaseNoise, busier_than_calibrated, calibrate_sets, group_of_key, others_share
from .normalise import is_reference, reference_factor


def held_out_false(runs: Sequence[ResultSet], threshold: float, z: float) -> dict[str, list[float]]:
    """Per group [false, pairs, promised]: two consecutive runs judged by a calibration of the others
    (>= 3) with compare's rule (:meth:`Calibration.between_runs`; the ratio of medians alone, so at
    least compare's false verdicts), and the false verdicts its tails promise at most (the sum of
    ``1 / (pairs + 1)``): a case steady through several runs may switch speed in a later one, which
    only runs left out of the calibration show (docs/method.md rule 21). Empty below 5 runs."""
    out: dict[str, list[float]] = {}
    if len(runs) < 5:
        return out
    for i in range(len(runs) - 1):
        held = calibrate_sets([rs for j, rs in enumerate(runs) if j not in (i, i + 1)], threshold)
        if any(busier_than_calibrated(held, others_share(runs[k])) for k in (i, i + 1)):
            continue  # compare gives such a run no time verdict
        a, b = runs[i].by_key(), runs[i + 1].by_key()
        factor = reference_factor(a, b).factor
        for key, ra in a.items():
            rb, between = b.get(key), held.between_runs(key, z)
            if rb is None or between is None or is_reference(ra):
                continue
            xa, xb = ra.samples.get(ra.primary), rb.samples.get(rb.primary)
            ma, mb = (float(np.median(x)) if x else 0.0 for x in (xa, xb))
            if ma <= 0 or mb <= 0:
                continue
            counts = out.setdefault(group_of_key(key), [0, 0, 0.0])
            counts[0] += abs(math.log(mb / ma / factor)) > math.log(1 + threshold) + between[0]
            counts[1] += 1
            tail = held.tails.get(group_of_key(key))
            counts[2] += tail.promise if tail is not None else 1.0
    return {g: [int(v[0]), int(v[1]), round(v[2], 3)] for g, v in out.items()}



#: a gate's rounds, and several alternated runs a side, are judged twice (their medians, their fast
#: tails), each at half the error rate (``compare.compare_sets``): what they can decide is predicted so
JUDGEMENTS = 2


def decision_z(confidence: float, cases: int, family_wise: bool = True, tests: int = 1) -> float:
    """The normal quantile of one case's two-sided interval: ``confidence`` shared by ``cases``
    (Bonferroni, when ``family_wise``) and by the ``tests`` ways each case is judged."""
    per_case = 1 - (1 - confidence) / (max(1, cases) if family_wise else 1) / tests
    return NormalDist().inv_cdf(1 - (1 - per_case) / 2)


def rounds_to_detect(sigma: float, effect: float, threshold: float, z: float) -> int | None:
    """Interleaved rounds per side at which a true ``effect`` (e.g. 1.5) is decided slower,
    when one round's head/base has log-scale noise ``sigma``: the smallest ``k`` with
    ``(1 + threshold) * exp(z * sigma / sqrt(k)) <= effect`` (None: never, effect <= 1 + threshold)."""
    margin = math.log(effect / (1 + threshold))
    if margin <= 0:
        return None
    return max(1, math.ceil((z * sigma / margin) ** 2))


def detectable(sigma: float, rounds: int, threshold: float, z: float) -> float:
    """The smallest true head / base that ``rounds`` interleaved rounds per side decide as slower."""
    return (1 + threshold) * math.exp(z * sigma / math.sqrt(max(1, rounds)))


def bare_false_alarm(sigma: float, threshold: float) -> float:
    """Predicted share of A/A pairs whose bare ratio passes +-threshold, for log-normal noise ``sigma``."""
    if sigma <= 0:
        return 0.0
    return 2 * (1 - NormalDist().cdf(math.log(1 + threshold) / sigma))


def measure_runs(run_args: Sequence[str], budget: float, scratch: Path, runs: int | None = None,
                 timeout: float = 1800.0, log: Path | None = None) -> tuple[list[ResultSet], list[float]]:
    """``ipcbench run`` of the code at hand, one after another, into ``scratch``: at least 3 runs,
    more while the next one (at the mean time so far) fits in ``budget`` seconds (or exactly
    ``runs``). Returns the result sets and the 1-minute load averages seen (before, after each)."""
    import subprocess
    import sys
    import time

    from ..core.launcher import ended_with_us  # core: below comparison
    from ..core.names import child_env
    from ..core.procs import load_average

    sets: list[ResultSet] = []
    loads: list[float] = []
    started = time.monotonic()
    while True:
        i = len(sets)
        if runs is not None and i >= runs:
            break
        if runs is None and i >= 3:
            spent = time.monotonic() - started
            if spent + spent / i > budget:
                break
        out = scratch / f"aa-{i + 1:02d}"
        cmd = [sys.executable, "-m", "pytest_ipcbench", "run", *run_args, "--results-only", "--progress", "none",
               "--out", str(out)]
        la = load_average()
        if la is not None:
            loads.append(la)
        t0 = time.monotonic()
        with open(log or (scratch / "calibrate.log"), "a") as sink:
            # SIGTERM to the run when calibrate dies, SIGKILL'd included: it ends its job the orderly way
            proc = subprocess.run(ended_with_us(cmd), stdout=sink, stderr=subprocess.STDOUT, timeout=timeout,
                                  env=child_env(scratch))
        if proc.returncode not in (0, 1) or not (out / "results.json").is_file():
            raise ValueError(f"run {i + 1} of identical code (`{' '.join(cmd[1:])}`) exited {proc.returncode}; see "
                             f"{log or scratch / 'calibrate.log'}")
        sets.append(ResultSet.load(out / "results.json"))
        la = load_average()
        if la is not None:
            loads.append(la)
        print(f"[calibrate] run {i + 1} of identical code: {time.monotonic() - t0:.0f} s, {len(sets[-1].results)} cases"
              + (f", load {la:.1f}" if la is not None else ""), flush=True)
    return sets, loads


@dataclass(frozen=True)
class GroupSummary:
    """What a calibration says about one group of cases, at a threshold and a budget of rounds."""

    group: str
    cases: int
    sigma_median: float
    sigma_max: float
    bare_predicted: float  # share of A/A pairs a bare +-threshold on one ratio would flag (normal model)
    bare_observed: float  # the same, counted on the calibration's own consecutive A/A pairs
    pairs: int
    tail: float  # the group's largest A/A move (head / base, >= 1) over `pairs`: compare's floor across runs
    verdict_promised: float  # at most this share of a compare's A/A case pairs gets a false verdict: 1 / (pairs + 1)
    detect_runs: float  # median smallest detectable slowdown, compare of two single runs
    detect_gate: float  # the same, a gate of `rounds` interleaved rounds per side
    rounds_needed: int | None  # most rounds any case of the group needs to decide 1.5x


def summarise(calibration: Calibration, threshold: float, rounds: int, z: float,
              effect: float = 1.5, z_rounds: float | None = None) -> list[GroupSummary]:
    """Per group: noise, false-alarm rates (bare; compare's verdict: what its tail promises), detectable
    change: of two single runs at ``z``, of a gate's ``rounds`` at ``z_rounds`` (default ``z``)."""
    z_rounds = z if z_rounds is None else z_rounds
    by_group: dict[str, list[tuple[str, CaseNoise]]] = {}
    for key, c in calibration.cases.items():
        by_group.setdefault(c.group, []).append((key, c))
    out = []
    for group, items in sorted(by_group.items()):
        # every calibrated case has its noise (None is for the cases the calibration never saw)
        used = [noise[0] for k, _ in items if (noise := calibration.noise(k)) is not None]
        across = [between[0] for k, _ in items if (between := calibration.between_runs(k, z)) is not None]
        sigmas = [c.sigma for _, c in items]
        ratios = [r for _, c in items for r in c.ratios]
        flagged = sum(1 for r in ratios if r > 1 + threshold or r < 1 / (1 + threshold))
        needed = [rounds_to_detect(u, effect, threshold, z_rounds) for u in used]
        tail = calibration.tails.get(group)
        out.append(GroupSummary(
            group, len(items), float(np.median(sigmas)), max(sigmas),
            float(np.mean([bare_false_alarm(s, threshold) for s in sigmas])),
            flagged / len(ratios) if ratios else math.nan, len(ratios),
            math.exp(tail.jump) if tail else math.nan, tail.promise if tail else math.nan,
            float(np.median([(1 + threshold) * math.exp(h) for h in across])),
            float(np.median([detectable(u, rounds, threshold, z_rounds) for u in used])),
            None if any(n is None for n in needed) else max(n for n in needed if n is not None)))
    return out


def undecidable(calibration: Calibration, keys: Sequence[str] | None, threshold: float, rounds: int, z: float,
                effect: float = 1.5) -> list[tuple[str, float, int | None]]:
    """Cases whose calibrated noise cannot decide ``effect`` within ``rounds`` interleaved rounds
    per side: (key, the slowdown they could decide at that budget, the rounds that would decide
    ``effect``)."""
    out = []
    for key in sorted(keys if keys is not None else calibration.cases):
        noise = calibration.noise(key)
        if noise is None:
            continue
        sigma = noise[0]
        mde = detectable(sigma, rounds, threshold, z)
        if mde > effect:
            out.append((key, mde, rounds_to_detect(sigma, effect, threshold, z)))
    return out
