"""``ipcbench compare`` and ``ipcbench gate``: base versus head, decided on a confidence interval.

``compare BASE.json HEAD.json`` matches the cases of two result sets by key and, for each case in
both, takes the bootstrap confidence interval of ``median(head) / median(base)`` (stats.py). A case
is *slower* only when the whole interval lies above ``1 + threshold``, *faster* only when it lies
below ``1 / (1 + threshold)``; anything else is *unchanged*. The exit code is 1 when at least one
case is slower, 0 otherwise, 2 when the inputs cannot be compared (bad file, nothing in common).

``gate --base REF`` measures both sides itself, on this machine and in this job (METHOD.md rule
16): it installs base and head into virtual environments of their own, runs the quick matrix
(``ipcbench run --quick``) of each in turn, round after round (base head, head base, ...: the
order alternates so that a drift of the machine does not favour one side), pools each side's
samples over the rounds and compares them as above -- except that the interval comes from a
two-level bootstrap (rounds, then samples within a round): samples of one round share the state
of the machine at that moment and are not independent draws (:func:`rounds_ratio_interval`).
When a case looks slower, ``--confirm-rounds`` more rounds run and the verdict is taken again on
all of them: a real regression only gathers more evidence, a fluke rarely survives. Nothing is
tied to a machine's identity or to yesterday's number on another runner.
"""

from __future__ import annotations

import argparse
import hashlib
import math
import os
import shlex
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

import numpy as np

from ..core import names
from .results import Result, ResultSet
from .stats import DEFAULT_CONFIDENCE, DEFAULT_RESAMPLES, RatioInterval, ratio_interval, verdict

EXIT_OK = 0
EXIT_REGRESSION = 1
EXIT_ERROR = 2

DEFAULT_THRESHOLD = 0.10
DEFAULT_ROUNDS = 3
DEFAULT_CONFIRM_ROUNDS = 2
#: Fewer samples than this on either side: the interval would be a fiction, no verdict is given.
MIN_SAMPLES = 3
#: Where a merged result keeps how many samples each round gave, per metric (Result.extra).
ROUNDS_KEY = "gate_rounds"
#: Verdicts in the order the table lists them.
STATUS_ORDER = ("slower", "faster", "unchanged", "undecided", "added", "removed")


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


def rounds_ratio_interval(
    a_rounds: Sequence[Sequence[float]],
    b_rounds: Sequence[Sequence[float]],
    confidence: float = DEFAULT_CONFIDENCE,
    resamples: int = DEFAULT_RESAMPLES,
    seed: int = 0,
) -> RatioInterval:
    """``median(a) / median(b)`` over every round, with a two-level bootstrap interval.

    Samples of one round share the machine's state of that moment (another job on the runner,
    a frequency change), so they are not independent draws: pooling them as if they were gives
    an interval far too narrow, and a gate that flaps. Each resample draws rounds with
    replacement first -- the same round numbers on both sides when both have as many, since
    round i of base and of head ran next to each other -- then samples within each drawn round,
    and every drawn round weighs the same. With few rounds the interval is honest about how
    little a couple of rounds can prove: with 3, a case is slower only if its head lost by more
    than the threshold in practically every round.
    """
    if not a_rounds or not b_rounds or not all(len(r) for r in (*a_rounds, *b_rounds)):
        raise ValueError("a ratio needs samples in every round on both sides")
    if not 0 < confidence < 1:
        raise ValueError(f"confidence must be between 0 and 1, got {confidence}")
    a_all = np.concatenate([np.asarray(r, dtype=float) for r in a_rounds])
    b_all = np.concatenate([np.asarray(r, dtype=float) for r in b_rounds])
    if np.any(b_all <= 0) or np.any(a_all < 0):
        raise ValueError("times must be positive")
    rng = np.random.default_rng(seed)
    paired = len(a_rounds) == len(b_rounds)
    picks_a = rng.integers(0, len(a_rounds), (resamples, len(a_rounds)))
    picks_b = picks_a if paired else rng.integers(0, len(b_rounds), (resamples, len(b_rounds)))
    ma = _resampled_medians(a_rounds, picks_a, rng)
    mb = _resampled_medians(b_rounds, picks_b, rng)
    alpha = (1 - confidence) / 2
    low, high = np.quantile(ma / mb, [alpha, 1 - alpha])
    med_a, med_b = float(np.median(a_all)), float(np.median(b_all))
    return RatioInterval(med_a / med_b, float(low), float(high), confidence, med_a, med_b)


def _resampled_medians(rounds: Sequence[Sequence[float]], picks: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Median of each resample: the drawn rounds, each resampled to the longest round's length."""
    width = max(len(r) for r in rounds)
    table = np.full((len(rounds), width), np.nan)
    sizes = np.array([len(r) for r in rounds])
    for i, r in enumerate(rounds):
        table[i, : len(r)] = r
    within = (rng.random((*picks.shape, width)) * sizes[picks][..., None]).astype(int)
    drawn = table[picks[..., None], within]  # (resamples, rounds drawn, width)
    return np.median(drawn.reshape(picks.shape[0], -1), axis=1)


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


def _fmt_time(seconds: float) -> str:
    if not math.isfinite(seconds):
        return "-"
    for unit, scale in (("s", 1.0), ("ms", 1e-3), ("us", 1e-6)):
        if seconds >= scale:
            return f"{seconds / scale:.3g} {unit}"
    return f"{seconds / 1e-9:.3g} ns"


def _row(case: CaseVerdict) -> list[str]:
    iv = case.interval
    if iv is None:
        return [case.key, "-", "-", "-", "-", case.status, case.note]
    return [
        case.key,
        _fmt_time(iv.median_b),
        _fmt_time(iv.median_a),
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


def parse_threshold(text: str) -> float:
    """``0.10``, ``10%`` -> 0.10; must be >= 0 and < 10."""
    raw = text.strip()
    try:
        value = float(raw[:-1]) / 100 if raw.endswith("%") else float(raw)
    except ValueError:
        raise argparse.ArgumentTypeError(f"bad threshold {text!r}: expected e.g. 0.10 or 10%") from None
    if not 0 <= value < 10 or not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"threshold {text!r} out of range: expected 0 <= t < 10 (0.10 = 10%)")
    return value


def parse_confidence(text: str) -> float:
    """``0.95`` or ``95%``, strictly between 0 and 1."""
    raw = text.strip()
    try:
        value = float(raw[:-1]) / 100 if raw.endswith("%") else float(raw)
    except ValueError:
        raise argparse.ArgumentTypeError(f"bad confidence {text!r}: expected e.g. 0.95 or 95%") from None
    if not 0 < value < 1:
        raise argparse.ArgumentTypeError(f"confidence {text!r} out of range: expected 0 < c < 1 (e.g. 0.95)")
    return value


def parse_rounds(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"bad number of rounds {text!r}: expected an integer >= 1") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"rounds must be at least 1, got {value}")
    return value


def _add_decision_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--threshold", type=parse_threshold, default=DEFAULT_THRESHOLD,
        help="slowdown tolerated before a case counts as slower: 0.10 or 10%% (default 0.10)",
    )
    parser.add_argument(
        "--confidence", type=parse_confidence, default=DEFAULT_CONFIDENCE,
        help="confidence of the bootstrap interval of the ratio (default 0.95)",
    )
    parser.add_argument(
        "--metric", default=None,
        help="metric to compare (default: each case's primary metric, 'completion')",
    )
    parser.add_argument(
        "--per-case", action="store_true",
        help="take --confidence per case (default: family-wise over all cases, Bonferroni)",
    )
    parser.add_argument("--markdown", metavar="FILE", help="also write the table as markdown to FILE")


def _write_markdown(path: str | os.PathLike[str] | None, comparison: Comparison, title: str) -> None:
    if path:
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        Path(path).write_text(format_markdown(comparison, title))


def _load(path: str, side: str) -> ResultSet:
    try:
        return ResultSet.load(path)
    except (ValueError, FileNotFoundError) as exc:
        raise GateError(f"{side}: {exc}") from None
    except (KeyError, TypeError) as exc:  # a results file whose records lack fields
        raise GateError(f"{side}: {path} has malformed result records ({exc})") from None


def configure_compare(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("base", help="results JSON of the base (ipcbench run --out DIR writes DIR/results.json)")
    parser.add_argument("head", help="results JSON of the head")
    _add_decision_options(parser)


def run_compare(args: argparse.Namespace) -> int:
    try:
        base = _load(args.base, "base")
        head = _load(args.head, "head")
        comparison = compare_sets(base, head, args.threshold, args.confidence, args.metric, not args.per_case)
    except (GateError, ValueError) as exc:
        print(f"ipcbench compare: {exc}", file=sys.stderr)
        return EXIT_ERROR
    print(format_table(comparison))
    _write_markdown(args.markdown, comparison, f"ipcbench compare: {Path(args.head).name} vs {Path(args.base).name}")
    return comparison.exit_code


# --------------------------------------------------------------------------------------- gate


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


def _git(repo: Path, *args: str, check: bool = True) -> str:
    proc = subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True)
    if check and proc.returncode != 0:
        raise GateError(f"git {' '.join(args)} failed: {proc.stderr.strip() or proc.stdout.strip()}")
    return proc.stdout.strip()


def repo_top(start: Path | None = None) -> Path:
    start = start or Path.cwd()
    proc = subprocess.run(["git", "-C", str(start), "rev-parse", "--show-toplevel"], capture_output=True, text=True)
    if proc.returncode != 0:
        raise GateError(f"{start} is not inside a git repository: the gate needs the project's history")
    return Path(proc.stdout.strip())


def resolve_commit(repo: Path, ref: str) -> str:
    proc = subprocess.run(
        ["git", "-C", str(repo), "rev-parse", "--verify", "--quiet", f"{ref}^{{commit}}"],
        capture_output=True, text=True,
    )
    if proc.returncode != 0 or not proc.stdout.strip():
        shallow = _git(repo, "rev-parse", "--is-shallow-repository", check=False) == "true"
        hint = " (this clone is shallow: fetch the full history, e.g. actions/checkout with fetch-depth: 0)" if shallow else ""
        raise GateError(f"cannot resolve {ref!r} to a commit{hint}")
    return proc.stdout.strip()


#: The module that defines ``ipcbench run``; a commit without it cannot be measured by the gate.
RUN_MODULE = "pytest_ipcbench/runner/job.py"
INSTALLED_STAMP = ".ipcbench-gate-installed"


@dataclass
class Side:
    """One side of the gate: where its source comes from and the environment it is installed in."""

    name: str  # "base" or "head"
    label: str  # what the report calls it
    commit: str | None  # None: a working tree (never cached)
    source: Path | None = None  # a folder holding the source to install
    venv: Path | None = None

    @property
    def bin(self) -> Path:
        assert self.venv is not None
        return self.venv / "bin"


def _tree_has_run(source: Path) -> bool:
    return (source / RUN_MODULE).is_file()


def _commit_has_run(repo: Path, commit: str) -> bool:
    proc = subprocess.run(["git", "-C", str(repo), "cat-file", "-e", f"{commit}:{RUN_MODULE}"], capture_output=True)
    return proc.returncode == 0


def _no_run_message(side: Side, detail: str = "") -> str:
    why = detail or f"{RUN_MODULE} is missing"
    return (
        f"{side.name} {side.label} has no `ipcbench run` ({why}): it predates the harness, so the "
        f"gate cannot measure it. Gate against a newer base, or compare result files made another "
        f"way with `ipcbench compare`."
    )


def _run_logged(cmd: Sequence[object], log: Path, timeout: float, cwd: Path | None = None,
                env: dict[str, str] | None = None) -> int:
    """Run ``cmd`` (its whole process group), output appended to ``log``; kill the group on timeout."""
    argv = [str(c) for c in cmd]
    with open(log, "a") as out:
        out.write(f"\n$ {shlex.join(argv)}\n")
        out.flush()
        proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, cwd=cwd, env=env,
                                start_new_session=True)
        try:
            return proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            _kill_group(proc, signal.SIGTERM)
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                _kill_group(proc, signal.SIGKILL)
                proc.wait()
            out.write(f"\n[ipcbench gate] killed after {timeout:g} s\n")
            return -1
        except BaseException:  # interrupted: take the whole group (mpiexec and its ranks) down
            _kill_group(proc, signal.SIGKILL)
            proc.wait()
            raise


def _kill_group(proc: subprocess.Popen[bytes], sig: int) -> None:
    try:
        os.killpg(proc.pid, sig)
    except ProcessLookupError:
        pass


def _tail(path: Path, lines: int = 25) -> str:
    try:
        text = path.read_text(errors="replace").splitlines()
    except OSError:
        return ""
    return "\n".join("    " + line for line in text[-lines:])


def _side_env(venv: Path) -> dict[str, str]:
    """The environment of a side's commands: its venv first on PATH, nothing leaking from ours.

    The gate's own bin folder follows (a venv that shares our packages finds the mpich wheel's
    mpiexec there).
    """
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV")}
    env["VIRTUAL_ENV"] = str(venv)
    ours = str(Path(sys.executable).parent)
    env["PATH"] = os.pathsep.join([str(venv / "bin"), ours, env.get("PATH", "")])
    env["PIP_DISABLE_PIP_VERSION_CHECK"] = "1"
    return env


def venv_key(side: Side, isolated: bool) -> str:
    py = f"py{sys.version_info[0]}{sys.version_info[1]}"
    mode = "isolated" if isolated else "shared"
    if side.commit:
        return f"{side.commit}-{py}-{mode}"
    assert side.source is not None
    return f"worktree-{hashlib.sha1(str(side.source).encode()).hexdigest()[:12]}-{py}-{mode}"


def install_side(side: Side, cache: Path, log: Path, timeout: float, isolated: bool = False) -> None:
    """Create (or reuse, for a commit) the side's venv and install its source with the mpi extra.

    By default the venv sees the gate's own packages (``--system-site-packages``): both sides
    then run on the very same numpy, mpi4py and MPI, pip installs only the project and what its
    pyproject asks for beyond them, and an install takes seconds. ``isolated`` makes a bare venv.
    """
    side.venv = cache / "venvs" / venv_key(side, isolated)
    stamp = side.venv / INSTALLED_STAMP
    if side.commit and stamp.is_file():
        print(f"[gate] {side.name}: reusing {side.venv.name} (installed for {side.commit[:12]})", flush=True)
        return
    assert side.source is not None
    print(f"[gate] {side.name}: installing {side.label} into {side.venv}", flush=True)
    stamp.unlink(missing_ok=True)
    if not (side.bin / "python").exists():
        shutil.rmtree(side.venv, ignore_errors=True)
        side.venv.parent.mkdir(parents=True, exist_ok=True)
        cmd = [sys.executable, "-m", "venv", *([] if isolated else ["--system-site-packages"]), side.venv]
        if _run_logged(cmd, log, timeout) != 0:
            raise GateError(f"cannot create a virtual environment for {side.name}; see {log}:\n{_tail(log)}")
    env = _side_env(side.venv)
    pip = [side.bin / "python", "-m", "pip", "install", "--quiet"]
    steps = [
        pip + [f"{side.source}[mpi]"],
        # the version does not change between commits: force the project itself to be reinstalled
        pip + ["--no-deps", "--force-reinstall", side.source],
    ]
    for cmd in steps:
        if _run_logged(cmd, log, timeout, cwd=side.source, env=env) != 0:
            raise GateError(f"installing {side.name} ({side.label}) failed; see {log}:\n{_tail(log)}")
    if side.source.is_dir() and side.commit is None:
        shutil.rmtree(side.source / "build", ignore_errors=True)  # pip's in-tree build leftovers
    # the package must come from the side's venv, not from the gate's own (editable) install
    probe = subprocess.run(
        [str(side.bin / "python"), "-c", "import pytest_ipcbench; print(pytest_ipcbench.__file__)"],
        capture_output=True, text=True, cwd=cache, env=env, timeout=120,
    )
    where = Path(probe.stdout.strip() or "?").resolve()
    if probe.returncode != 0 or side.venv.resolve() not in where.parents:
        raise GateError(
            f"{side.name}: pytest_ipcbench is imported from {where}, not from {side.venv}; "
            f"rerun with --isolated. {probe.stderr.strip()[-500:]}"
        )
    help_run = subprocess.run([str(side.bin / "ipcbench"), "run", "--help"], capture_output=True, text=True,
                              cwd=cache, env=env, timeout=120)
    if help_run.returncode != 0:
        last = (help_run.stderr.strip().splitlines() or ["?"])[-1]
        raise GateError(_no_run_message(side, f"`ipcbench run --help` failed: {last}"))
    if side.commit:
        stamp.write_text(side.commit + "\n")


def run_round(side: Side, out: Path, run_args: Sequence[str], scratch: Path, log: Path,
              timeout: float) -> tuple[ResultSet, str]:
    """One ``ipcbench run`` of a side into ``out``: its ResultSet, and a warning ("" if none).

    The command runs in a scratch folder, never in the repository: there ``python -m`` would
    import the working tree's package instead of the side's installed one. Exit 1 with a
    results file means some cases failed (their results are missing): the others still count,
    and the report says so.
    """
    assert side.venv is not None
    cmd = [side.bin / "ipcbench", "run", *run_args, "--out", out]
    started = time.monotonic()
    code = _run_logged(cmd, log, timeout, cwd=scratch, env=_side_env(side.venv))
    took = time.monotonic() - started
    results = out / "results.json"
    if code not in (0, 1) or not results.is_file():
        why = f"exited with {code}" if code != -1 else f"did not finish within {timeout:g} s"
        raise GateError(f"`ipcbench run` of {side.name} {why} after {took:.0f} s; see {log}:\n{_tail(log)}")
    try:
        rs = ResultSet.load(results)
    except ValueError as exc:
        raise GateError(f"{side.name}: {exc}") from None
    failed = rs.env.get("failures") or []
    warning = ""
    if code != 0:
        warning = (f"{side.name}, round {out.name.split('-')[0]}: `ipcbench run` reported "
                   f"{len(failed) or 'some'} failed case(s), e.g. {str(failed[:1])[:200]} (see {out / 'run.log'})")
    print(f"[gate]   {side.name}: {took:.1f} s, {len(rs.results)} cases" + (" (with failures)" if code else ""),
          flush=True)
    return rs, warning


def round_order(rounds: int, first: int = 0) -> list[tuple[int, str]]:
    """(round, side) in run order: base head, head base, base head, ... (ABBA: drift cancels)."""
    order: list[tuple[int, str]] = []
    for i in range(first, first + rounds):
        pair = ("base", "head") if i % 2 == 0 else ("head", "base")
        order += [(i, s) for s in pair]
    return order


def configure_gate(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--base", required=True, help="git ref of the base (e.g. origin/main, HEAD~1)")
    parser.add_argument(
        "--head", default=".",
        help="git ref of the head, or a folder holding a working tree (default: the current working tree)",
    )
    parser.add_argument("--rounds", type=parse_rounds, default=DEFAULT_ROUNDS,
                        help=f"interleaved rounds per side (default {DEFAULT_ROUNDS})")
    parser.add_argument("--confirm-rounds", type=int, default=DEFAULT_CONFIRM_ROUNDS,
                        help="when a case looks slower, this many more rounds are run and the verdict is "
                             f"taken again on every round (default {DEFAULT_CONFIRM_ROUNDS}; 0: no confirmation)")
    parser.add_argument(
        "--run-args", default="--quick",
        help="arguments of each `ipcbench run` (default '--quick'); --out is added by the gate",
    )
    parser.add_argument("--out", default=None,
                        help="report folder: base.json, head.json, compare.txt, compare.md, gate.log, rounds/ "
                             "(default CACHE/report)")
    parser.add_argument("--cache-dir", default=None,
                        help="where the gate keeps its environments (default .ipcbench-gate at the top of the repository)")
    parser.add_argument("--isolated", action="store_true",
                        help="bare environments (default: they share the gate's own packages, so both sides "
                             "run on the same numpy, mpi4py and MPI)")
    parser.add_argument("--timeout", type=float, default=1800.0,
                        help="seconds allowed to one install or one run of one side (default 1800)")
    _add_decision_options(parser)


def run_gate(args: argparse.Namespace) -> int:
    try:
        return _gate(args)
    except GateError as exc:
        print(f"ipcbench gate: {exc}", file=sys.stderr)
        return EXIT_ERROR


def _sides(repo: Path, args: argparse.Namespace) -> tuple[Side, Side]:
    base_commit = resolve_commit(repo, args.base)
    base = Side("base", f"{args.base} ({base_commit[:12]})", base_commit)
    head_path = Path(args.head)
    if head_path.is_dir() and (head_path / "pyproject.toml").is_file():
        head_path = head_path.resolve()
        at = _git(head_path, "rev-parse", "--short=12", "HEAD", check=False) or "?"
        dirty = _git(head_path, "status", "--porcelain", "--untracked-files=no", check=False)
        label = f"working tree {head_path} (at {at}{' + uncommitted changes' if dirty else ''})"
        head = Side("head", label, None, head_path)
    else:
        head_commit = resolve_commit(repo, args.head)
        head = Side("head", f"{args.head} ({head_commit[:12]})", head_commit)
    for side in (base, head):
        has_run = _tree_has_run(side.source) if side.source else _commit_has_run(repo, side.commit or "")
        if not has_run:
            raise GateError(_no_run_message(side))
    return base, head


def _install(repo: Path, sides: Sequence[Side], cache: Path, log: Path, args: argparse.Namespace) -> None:
    """Install every side; a commit is checked out into a temporary worktree, removed right after."""
    _git(repo, "worktree", "prune", check=False)
    for side in sides:
        tree: Path | None = None
        try:
            if side.source is None:
                key = venv_key(side, args.isolated)
                if not (cache / "venvs" / key / INSTALLED_STAMP).is_file():
                    tree = names.private_dir(f"gate-{side.name}") / "src"
                    _git(repo, "worktree", "add", "--detach", str(tree), side.commit or "")
                    side.source = tree
            install_side(side, cache, log, args.timeout, args.isolated)
        finally:
            if tree is not None:
                _git(repo, "worktree", "remove", "--force", str(tree), check=False)
                names.remove(tree.parent)
                _git(repo, "worktree", "prune", check=False)


def _gate(args: argparse.Namespace) -> int:
    if args.confirm_rounds < 0:
        raise GateError(f"--confirm-rounds must not be negative, got {args.confirm_rounds}")
    repo = repo_top()
    cache = Path(args.cache_dir).resolve() if args.cache_dir else repo / ".ipcbench-gate"
    out = Path(args.out).resolve() if args.out else cache / "report"
    base, head = _sides(repo, args)
    if out.exists():
        shutil.rmtree(out)
    (out / "rounds").mkdir(parents=True)
    log = out / "gate.log"
    run_args = shlex.split(args.run_args)
    print(f"[gate] base: {base.label}\n[gate] head: {head.label}\n[gate] log: {log}", flush=True)
    _install(repo, (base, head), cache, log, args)

    sides = {"base": base, "head": head}
    sets: dict[str, list[ResultSet]] = {"base": [], "head": []}
    warnings: list[str] = []
    scratch = names.private_dir("gate-run")

    def run_rounds(count: int) -> Comparison:
        for i, name in round_order(count, first=len(sets["base"])):
            print(f"[gate] round {i + 1}: {name}", flush=True)
            dest = out / "rounds" / f"{i + 1}-{name}"
            rs, warning = run_round(sides[name], dest, run_args, scratch, log, args.timeout)
            sets[name].append(rs)
            if warning:
                warnings.append(warning)
        merged = {name: merge_rounds(s) for name, s in sets.items()}
        for name, rs in merged.items():
            rs.env["gate_side"] = sides[name].label
            rs.save(out / f"{name}.json")
        try:
            comparison = compare_sets(merged["base"], merged["head"], args.threshold, args.confidence, args.metric,
                                      not args.per_case)
        except ValueError as exc:
            raise GateError(str(exc)) from None
        comparison.warnings.extend(warnings)
        return comparison

    try:
        comparison = run_rounds(args.rounds)
        if comparison.regressions and args.confirm_rounds:
            print(f"[gate] {len(comparison.regressions)} case(s) look slower: {args.confirm_rounds} more "
                  f"round(s) to confirm, then the verdict is taken again on every round", flush=True)
            comparison = run_rounds(args.confirm_rounds)
    finally:
        names.remove(scratch)

    rounds = len(sets["base"])
    intro = (
        f"ipcbench gate: head {head.label} vs base {base.label}; {rounds} interleaved rounds of "
        f"`ipcbench run {args.run_args}` per side, in this job, on this machine"
    )
    table = format_table(comparison)
    (out / "compare.txt").write_text(intro + "\n" + table + "\n")
    md = format_markdown(comparison, f"Perf gate: head vs {args.base}") + f"\n{intro}.\n"
    (out / "compare.md").write_text(md)
    if args.markdown:
        Path(args.markdown).parent.mkdir(parents=True, exist_ok=True)
        Path(args.markdown).write_text(md)
    print(intro)
    print(table)
    print(f"[gate] report: {out}")
    return comparison.exit_code


COMMANDS = {
    "compare": (
        "compare two results files case by case on a confidence interval of the ratio; exit 1 on a regression",
        configure_compare,
        run_compare,
    ),
    "gate": (
        "install base and head, run them interleaved on this machine, compare; exit 1 on a regression",
        configure_gate,
        run_gate,
    ),
}
