"""How much identical code moves on this runner: the A/A calibration.

A verdict on a case is only as good as what is known of the case's noise (docs/method.md rules 19, 21).
``ipcbench calibrate`` runs the same code several times, one ``ipcbench run`` after another, and
measures per case how far the (normalised) median moves from run to run: ``sigma``, the
log-scale standard deviation of head / base of two single runs of identical code. That file is
what ``ipcbench compare`` and ``ipcbench gate`` read to know, per case, the between-run noise;
without it they assume a conservative one and say "inconclusive" where it cannot decide. Runs
are normalised by their in-run references first (:mod:`.normalise`).
"""

from __future__ import annotations

import json
import math
import platform
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from statistics import NormalDist
from typing import Any

import numpy as np

from ..core.outdir import write_text
from ..results.results import OLD_SCENARIOS, Result, ResultSet, current_key
from .calibration_check import check_calibration, read_json
from .normalise import is_reference, reference_factor

SCHEMA = "pytest-ipcbench-calibration/1"
#: One-sided confidence of the bound on a case's sigma (few runs: a lucky small estimate is not trusted).
SIGMA_BOUND = 0.80
#: The between-run noise assumed without a calibration (log-scale sd): separate runs of identical code
#: can move several-fold under load (docs/method.md rule 19); an uncalibrated comparison says
#: "inconclusive" below that.
UNCALIBRATED_NOISE = 0.35


def case_group(result: Result) -> str:
    """Cases that share their noise in a calibration's summary: a scenario at a rank count."""
    return f"{result.scenario} r{result.ranks}"


def group_of_key(key: str) -> str:
    parts = key.split("/")
    return f"{parts[0]} {parts[5]}" if len(parts) >= 6 else parts[0]


# ------------------------------------------------------------------------------- the calibration


@dataclass(frozen=True)
class CaseNoise:
    """One case's measured between-run noise: ``sigma`` from ``runs`` runs, ``upper`` its bound."""

    sigma: float
    upper: float
    runs: int
    group: str
    ratios: tuple[float, ...] = ()  # normalised head / base of consecutive A/A runs


@dataclass(frozen=True)
class GroupTail:
    """The largest move of a group's cases between consecutive A/A runs: ``jump`` (|log head/base|)
    over ``pairs`` case pairs. A new A/A pair passes the largest of ``pairs`` exchangeable ones with
    a chance of at most ``1 / (pairs + 1)``, whatever the distribution: the promise a tail keeps."""

    jump: float
    pairs: int

    @property
    def promise(self) -> float:
        return 1 / (self.pairs + 1)


def group_tails(cases: dict[str, CaseNoise]) -> dict[str, GroupTail]:
    """Each group's tail, pooled over ALL its cases: a case steady through its own few runs may
    have a second speed that its neighbours showed (docs/method.md rule 21)."""
    pooled: dict[str, list[float]] = {}
    for c in cases.values():
        pooled.setdefault(c.group, []).extend(abs(math.log(r)) for r in c.ratios if r > 0)
    return {g: GroupTail(max(xs), len(xs)) for g, xs in pooled.items() if xs}


@dataclass
class Calibration:
    """What ``ipcbench calibrate`` measured (the JSON file, schema :data:`SCHEMA`)."""

    cases: dict[str, CaseNoise]
    groups: dict[str, float]  # group -> its median case's sigma (log scale): the floor of its cases' noise
    runs: int
    threshold: float
    env: dict[str, Any] = field(default_factory=dict)
    path: str = ""
    held_out: dict[str, list[float]] = field(default_factory=dict)  # group -> [false, pairs, promised]
    tails: dict[str, GroupTail] = field(init=False)  # from the cases' ratios: the files hold no copy

    def __post_init__(self) -> None:
        self.tails = group_tails(self.cases)

    def held_out_note(self) -> str | None:
        """What the held-out check found in the groups where it found more false verdicts than
        their tails promise (files without the promise: any false verdict)."""
        over = {g: v for g, v in self.held_out.items() if v[0] > (v[2] if len(v) > 2 else 0.0)}
        if not over:
            return None
        false, pairs = (int(sum(v[i] for v in over.values())) for i in (0, 1))
        promised = sum(v[2] if len(v) > 2 else 0.0 for v in over.values())
        return (f"on this runner, compare's rule gave {false} false verdicts in {pairs} A/A case pairs "
                "(identical code) of "
                f"{', '.join(sorted(over))} that the calibration's own runs were held out of (their largest A/A "
                f"jumps promised at most {promised:.1f}): some cases switch speeds between runs in a way the "
                f"calibration's runs did not show, and compare's verdicts across separate runs are not to be "
                f"trusted there; the gate's interleaved rounds are")

    def noise(self, key: str) -> tuple[float, str] | None:
        """The sigma for ``key`` and its source: its own upper bound, at least its group's median
        case's (one wild case must not widen the others, but a case steady through a few runs may
        jump in the next: a lucky small estimate is not trusted alone), else the group's."""
        case = self.cases.get(key)
        group = self.groups.get(group_of_key(key))
        if case is not None:
            return max(case.upper, group or 0.0), f"calibrated, {case.runs} runs"
        if group is not None:
            return group, f"calibrated group {group_of_key(key)}"
        return None

    def between_runs(self, key: str, z: float, rounds: int = 1) -> tuple[float, str] | None:
        """compare's rule across separate runs, the one place it is: the log-scale half-width that
        ``key``'s interval gets for the noise between runs, and its source. ``z`` x the case's noise
        (:meth:`noise`), and at least its group's largest A/A jump, whatever its own runs showed: a
        verdict needs the threshold past that, so a false one needs a jump bigger than any the
        calibration saw in the group (a tail is of single runs: it is not narrowed by ``rounds``)."""
        noise = self.noise(key)
        if noise is None:
            return None
        sigma, source = noise
        h = z * sigma / math.sqrt(max(1, rounds))
        tail = self.tails.get(group_of_key(key))
        if tail is not None and tail.jump > h:
            h = tail.jump
            source = f"{source}; its group's runs of identical code moved up to {math.exp(tail.jump):.2f}x"
        return h, source

    def describe(self) -> str:
        when = str(self.env.get("created", "?"))[:16].replace("T", " ")
        load = self.env.get("load")
        load_text = f", load {load[0]:.1f}-{load[1]:.1f}" if isinstance(load, list) and len(load) == 2 else ""
        return (f"calibration {self.path or '(in memory)'}: {self.runs} runs of identical code, "
                f"{len(self.cases)} cases, {when}{load_text} on {self.env.get('host', '?')} "
                f"({self.env.get('cores', '?')} cores)")

    def to_dict(self) -> dict[str, Any]:
        return {
            "schema": SCHEMA, "env": self.env, "runs": self.runs, "threshold": self.threshold,
            "groups": {g: round(s, 6) for g, s in sorted(self.groups.items())},
            "held_out": {g: list(v) for g, v in sorted(self.held_out.items())},
            "cases": {k: {"sigma": round(c.sigma, 6), "upper": round(c.upper, 6), "runs": c.runs, "group": c.group,
                          "ratios": [round(r, 6) for r in c.ratios]}
                      for k, c in sorted(self.cases.items())},
        }

    def save(self, path: str | Path) -> Path:
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        write_text(path, json.dumps(self.to_dict(), indent=1) + "\n", "calibration")
        self.path = str(path)
        return path

    @classmethod
    def load(cls, path: str | Path) -> Calibration:
        """A calibration file, every field checked (:mod:`.calibration_check`): CalibrationError
        (a ValueError, exit 2) naming the file and the field when it is not one. Keys and groups of
        a file written before 0.2 are read as this version names them."""
        data = read_json(path)
        check_calibration(data, path, SCHEMA)
        cases = {current_key(str(k)): CaseNoise(float(v["sigma"]), float(v["upper"]), int(v["runs"]),
                                               _group(v["group"]),
                                               tuple(float(r) for r in v.get("ratios", ())))
                 for k, v in data["cases"].items()}
        groups = {_group(g): float(s) for g, s in data["groups"].items()}
        held = {str(g): [int(v[0]), int(v[1]), *(float(x) for x in v[2:3])]
                for g, v in (data.get("held_out") or {}).items()}
        return cls(cases, groups, int(data["runs"]), float(data["threshold"]), dict(data.get("env") or {}),
                   str(path), held)


def _group(name: Any) -> str:
    """A group of a file written before 0.2 (``seed002-handle r2``), as this version names it."""
    scenario, sep, ranks = str(name).partition(" ")
    return OLD_SCENARIOS.get(scenario, scenario) + sep + ranks


def chi2_quantile(p: float, dof: int) -> float:
    """The ``p`` quantile of chi-square with ``dof`` degrees of freedom (Wilson-Hilferty; within
    a few percent from 2 degrees of freedom up, which is all a bound on a noise needs)."""
    z = NormalDist().inv_cdf(p)
    c = 2 / (9 * dof)
    return max(dof * (1 - c + z * math.sqrt(c)) ** 3, 1e-9)


def sigma_upper(sigma: float, dof: int, bound: float = SIGMA_BOUND) -> float:
    """One-sided upper confidence bound of a standard deviation estimated with ``dof`` degrees of freedom."""
    if dof < 1:
        return math.inf
    return sigma * math.sqrt(dof / chi2_quantile(1 - bound, dof))


def calibrate_sets(runs: Sequence[ResultSet], threshold: float, env: dict[str, Any] | None = None) -> Calibration:
    """The between-run noise of every case from ``runs`` (>= 3) of identical code.

    Each run is normalised to the first by :func:`reference_factor` (as ``compare`` would);
    a case's log medians over the runs have a standard deviation ``s`` (``n - 1`` degrees of
    freedom); two single runs then differ by ``sigma = s * sqrt(2)`` (log scale). ``upper`` is
    the bound at :data:`SIGMA_BOUND`; a group's sigma is its median case's (the floor of
    :meth:`Calibration.noise`).
    """
    if len(runs) < 3:
        raise ValueError(f"a calibration needs at least 3 runs of the same code, got {len(runs)}")
    first = runs[0].by_key()
    factors = [1.0] + [reference_factor(first, rs.by_key()).factor for rs in runs[1:]]
    logs: dict[str, list[float]] = {}
    groups_of: dict[str, str] = {}
    for rs, factor in zip(runs, factors):
        for r in rs.results:
            if is_reference(r):
                continue
            x = r.samples.get(r.primary)
            if not x:
                continue
            med = float(np.median(x))
            if med > 0:
                logs.setdefault(r.key, []).append(math.log(med / factor))
                groups_of[r.key] = case_group(r)
    cases: dict[str, CaseNoise] = {}
    pooled: dict[str, list[float]] = {}
    dofs: dict[str, int] = {}
    for key, xs in logs.items():
        if len(xs) < 3:
            continue
        arr = np.asarray(xs)
        s = float(arr.std(ddof=1))
        sigma = s * math.sqrt(2)
        ratios = tuple(float(math.exp(d)) for d in np.diff(arr))
        cases[key] = CaseNoise(sigma, sigma_upper(sigma, len(xs) - 1), len(xs), groups_of[key], ratios)
        g = groups_of[key]
        pooled.setdefault(g, []).append(float(((arr - arr.mean()) ** 2).sum()))
        dofs[g] = dofs.get(g, 0) + len(xs) - 1
    if not cases:
        raise ValueError("no case was measured in at least 3 of the runs: nothing to calibrate")
    groups = {g: float(np.median([c.sigma for c in cases.values() if c.group == g])) for g in pooled}
    env = dict(env or {})
    shares = [x for x in map(others_share, runs) if x is not None]
    if shares:  # how much other processes took from the runs it measured: min, median, max
        env.setdefault("others_cpu_share", [min(shares), float(np.median(shares)), max(shares)])
    env.setdefault("created", datetime.now(timezone.utc).isoformat(timespec="seconds"))
    env.setdefault("host", runs[0].env.get("host") or runs[0].env.get("hostname") or platform.node())
    env.setdefault("cores", runs[0].env.get("cores"))
    return Calibration(cases, groups, len(runs), threshold, env)


def others_share(rs: ResultSet) -> float | None:
    """The share of the CPUs other processes took while the run ran (``env["others_cpu_share"]``)."""
    x = rs.env.get("others_cpu_share")
    return float(x) if isinstance(x, (int, float)) else None


SHARED_RUN = 0.05  # others' CPU share past which (and past 2x the calibration's median) a run is not judged


def busier_than_calibrated(calibration: Calibration, share: float | None) -> str | None:
    """Why a run whose other processes took ``share`` of the CPUs (``env["others_cpu_share"]``)
    cannot be judged with this calibration's noise, or None: another command sharing the CPUs
    slows some cases several-fold and others not at all, which no calibrated noise covers."""
    measured = calibration.env.get("others_cpu_share")
    if share is None or not (isinstance(measured, list) and len(measured) == 3):
        return None
    typical = float(measured[1])
    if share <= max(SHARED_RUN, 2 * typical):
        return None
    return (f"other processes took {share:.0%} of the CPUs during this run, {typical:.0%} during the "
            f"calibration's median run")
