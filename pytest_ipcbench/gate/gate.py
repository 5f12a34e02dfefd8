"""``ipcbench gate``: measure base and head here, interleaved, and compare them.

Base and head, each in a venv of its own, run in turn (base head, head base, ...: a drift of the
machine favours neither): ``rounds`` of every case, then confirming rounds of only the cases in
doubt (those that look slower first) within the budget. Samples are compared round by round
(:mod:`..comparison.compare`): a fluke rarely survives the confirming rounds (docs/method.md rule 16).
In another project the gate measures its declared ``[tool.ipcbench]`` matrix (:mod:`.consumer`).
"""

from __future__ import annotations

import shlex
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from ..comparison.calibration import Calibration
from ..comparison.calibration_store import describe_use, find_calibration
from ..comparison.calibration_summary import JUDGEMENTS, decision_z, undecidable
from ..comparison.compare import compare_sets
from ..comparison.rounds import merge_rounds
from ..comparison.verdict import Comparison, Decision, GateError, rule_callables
from ..comparison.verdict_json import write_json
from ..comparison.verdict_text import format_markdown, format_table
from ..core import names
from ..core.envinfo import INJECT_ENV
from ..core.injection import Slowdown, format_injection
from ..core.outdir import check_output_file, clear_own, write_output, write_text
from ..core.project import declared_rules, find_pyproject
from ..results.results import ResultSet
from . import consumer
from .gate_sides import (
    Side,
    check_matrix,
    check_sides_equal,
    commit_has_run,
    default_run_args,
    git,
    install_sides,
    no_run_message,
    repo_top,
    resolve_commit,
    run_round,
    side_args,
    tree_has_run,
    warm_up,
)

DEFAULT_ROUNDS = 2
#: At most this many confirming rounds; the budget usually ends them first.
DEFAULT_CONFIRM_ROUNDS = 30
#: No confirming round starts once the gate has run this long (seconds, from its start, the
#: installs included) or would pass it with one more round pair of the last one's length.
DEFAULT_BUDGET = 420.0
#: A case stays in doubt, and gets more rounds, while its verdict is not "unchanged".
IN_DOUBT = ("inconclusive", "slower", "faster")


@dataclass(frozen=True)
class GateOptions:
    base: str
    head: str = "."
    rounds: int = DEFAULT_ROUNDS
    confirm_rounds: int = DEFAULT_CONFIRM_ROUNDS
    budget: float = DEFAULT_BUDGET  # seconds: no confirming round starts past it
    run_args: str | None = None  # None: default_run_args() here, the declared matrix as it is in another project
    out: str | None = None
    cache_dir: str | None = None
    isolated: bool = False
    timeout: float = 1800.0
    decision: Decision = field(default_factory=Decision)
    skip_unadopted_base: bool = False  # another project: a base without [tool.ipcbench] exits 0, not 2
    inject: dict[str, Slowdown] = field(default_factory=dict)  # head only: backend -> slowdown (harness/inject.py)
    dry_run: bool = False  # say what would be installed and measured, then stop (exit 0)
    count: bool = True  # each side's first round counts: exact counters compared exactly (exit 1 when one grew)


class Unadopted(GateError):
    """The base predates the project's adoption of pytest-ipcbench: nothing to compare with."""


#: the ``--only`` name of the block each extra scenario's results come from: the names of before 0.2
#: (still accepted by ``ipcbench run --only``), which a base of any version knows
EXTRA_LABELS = {"mpi-method": "seed004", "shared-array": "seed002", "shared-array-handle": "seed002",
                "seed002": "seed002", "seed002-handle": "seed002"}


def doubtful(comparison: Comparison, head: ResultSet, reachable: int | None = None) -> list[str] | None:
    """The ``--only`` labels of the cases in doubt the next round measures: those that look slower
    first (they decide the outcome), those that cannot be decided in ``reachable`` rounds last. None
    when a case cannot be selected alone (a version without case labels): the whole matrix runs."""
    by_key = head.by_key()
    cases = [c for c in comparison.cases if c.interval is not None and c.status in IN_DOUBT and c.waiver is None]
    decidable = [c for c in cases if reachable is None or c.rounds_needed is None or c.rounds_needed <= reachable]
    cases = decidable or cases
    first = [c for c in cases if c.status == "slower" or (c.status == "inconclusive" and c.looks_slower)]
    labels: list[str] = []
    for case in first or cases:
        r = by_key.get(case.key)
        label = (r.extra or {}).get("case") if r is not None else None
        label = label or (EXTRA_LABELS.get(r.scenario) if r is not None else None)
        if not label:
            return None
        if label not in labels:
            labels.append(label)
    return labels


def last_round_s(sets: dict[str, list[ResultSet]]) -> float:
    """Seconds the last round of both sides took (what one more confirming round will cost)."""
    return sum(float(rounds[-1].env.get("gate_round_s") or 0.0) for rounds in sets.values() if rounds)


def round_order(rounds: int, first: int = 0) -> list[tuple[int, str]]:
    """(round, side) in run order: base head, head base, base head, ... (ABBA: drift cancels)."""
    return [(i, s) for i in range(first, first + rounds) for s in (("base", "head"), ("head", "base"))[i % 2]]


def _sides(repo: Path, opts: GateOptions) -> tuple[Side, Side]:
    base_commit = resolve_commit(repo, opts.base)
    base = Side("base", f"{opts.base} ({base_commit[:12]})", base_commit)
    head_path = Path(opts.head)
    if head_path.is_dir() and (head_path / "pyproject.toml").is_file():
        head_path = head_path.resolve()
        at = git(head_path, "rev-parse", "--short=12", "HEAD", check=False) or "?"
        dirty = git(head_path, "status", "--porcelain", "--untracked-files=no", check=False)
        label = f"working tree {head_path} (at {at}{' + uncommitted changes' if dirty else ''})"
        head = Side("head", label, None, head_path)
    else:
        head_commit = resolve_commit(repo, opts.head)
        head = Side("head", f"{opts.head} ({head_commit[:12]})", head_commit)
    # the project's folder in the repository: the head's working folder, or the nearest pyproject.toml
    pyproject = find_pyproject(head.source or Path.cwd())
    prefix = ""
    folder = head.source if head.source is not None else (pyproject.parent if pyproject is not None else None)
    if folder is not None and folder.resolve().is_relative_to(repo.resolve()):
        rel = folder.resolve().relative_to(repo.resolve()).as_posix()
        prefix = "" if rel == "." else rel + "/"
    head_decl = consumer.read_declared(repo, prefix, head.commit, head.source, "head")
    if head_decl.text is not None and not head_decl.is_self:  # another project: its declared matrix
        if head_decl.config is None:
            raise GateError(consumer.no_matrix_message(head.label, prefix))
        base_decl = consumer.read_declared(repo, prefix, base.commit, None, "base")
        if base_decl.config is None:
            raise Unadopted(consumer.unadopted_message("base", base.label, prefix))
        for side, decl in ((base, base_decl), (head, head_decl)):
            side.decl, side.prefix = decl, prefix
        return base, head
    for side in (base, head):
        if not (tree_has_run(side.source) if side.source else commit_has_run(repo, side.commit or "")):
            raise GateError(no_run_message(side))
    return base, head


def load_imbalance(base: Sequence[ResultSet], head: Sequence[ResultSet], share: float = 0.25) -> str | None:
    """A warning when one side's rounds met a clearly higher load than the other's (the 1-minute
    load average at the start and end of each run): alternating the order cancels a steady drift,
    not a burst of other work that lands on one side's rounds (docs/method.md rule 22)."""
    def mean_load(sets: Sequence[ResultSet]) -> float | None:
        xs = [float(x) for rs in sets for x in (rs.env.get("load_start"), rs.env.get("load_end"))
              if isinstance(x, (int, float))]
        return sum(xs) / len(xs) if xs else None

    a, b = mean_load(base), mean_load(head)
    if a is None or b is None or max(a, b) < 1.0 or abs(a - b) <= share * max(a, b):
        return None
    return (f"the sides met different loads: base's rounds at a mean 1-minute load of {a:.1f}, head's at {b:.1f}; "
            f"other work landed on one side's rounds, and a ratio that follows the load is not the code's")


def budget_notice(calibration: Calibration, opts: GateOptions, effect: float = 1.5) -> list[str]:
    """Up front: the cases whose calibrated noise cannot decide ``effect`` within the gate's
    budget of rounds, and the rounds that would (docs/method.md rule 21)."""
    rounds = opts.rounds + opts.confirm_rounds
    z = decision_z(opts.decision.confidence, len(calibration.cases), opts.decision.family_wise, JUDGEMENTS)
    cannot = undecidable(calibration, None, opts.decision.threshold, rounds, z, effect)
    if not cannot:
        return [f"every calibrated case can decide a {effect:g}x slowdown within {rounds} rounds per side"]
    worst = sorted(cannot, key=lambda c: c[2] or 10 ** 9, reverse=True)
    shown = "; ".join(f"{k} (detects {x:.3g}x, needs {n if n is not None else 'inf'} rounds)"
                      for k, x, n in worst[:3])
    return [f"{len(cannot)} of {len(calibration.cases)} calibrated cases cannot decide a {effect:g}x slowdown "
            f"within this budget ({rounds} rounds per side): their verdict will be inconclusive, not unchanged; "
            f"e.g. {shown}. --rounds/--confirm-rounds/--budget set the budget"]


#: what the gate writes into its report folder (--out), and the file that says it made the folder:
#: the only names a later gate removes there
REPORT_NAMES = ("base.json", "head.json", "compare.txt", "compare.md", "gate.log", "rounds", "environment.json",
                "base.pyproject.toml", "head.pyproject.toml")
REPORT_MARK = ".ipcbench-gate-report"


def run_gate(opts: GateOptions) -> int:
    """Install, run interleaved, compare, write the report; the exit code of the comparison."""
    started = time.monotonic()
    repo = repo_top()
    cache = Path(opts.cache_dir).resolve() if opts.cache_dir else repo / ".ipcbench-gate"
    out = Path(opts.out) if opts.out else cache / "report"
    for given, flag in ((opts.decision.markdown, "--markdown"), (opts.decision.json, "--json")):
        if given:  # checked before an hour of rounds, as the report folder is
            check_output_file(given, flag)
    try:
        base, head = _sides(repo, opts)
    except Unadopted as exc:
        if not opts.skip_unadopted_base:
            raise
        notice = f"ipcbench gate: not gated: {exc}"
        print(notice)
        md = f"## Perf gate: head vs {opts.base}\n\n:information_source: {notice}\n"
        write_text(clear_own(out, REPORT_MARK, REPORT_NAMES) / "compare.md", md)
        if opts.decision.markdown:
            write_output(opts.decision.markdown, md, "--markdown")
        return 0
    project = head.decl is not None
    # the head's thresholds and waivers, an expired one an error before anything is installed
    config = head.decl.config if head.decl is not None else None
    rules = config.rules if config is not None else declared_rules(head.source)
    rules.check_expiry()
    if project and opts.isolated:
        raise GateError("--isolated is for pytest-ipcbench's own repository: in another project both sides "
                        "share the gate's pytest-ipcbench, numpy, mpi4py and MPI")
    run_text = opts.run_args if opts.run_args is not None else ("" if project else default_run_args())
    if opts.dry_run:
        print(f"[gate] dry run\n[gate] base: {base.label}\n[gate] head: {head.label}")
        for side in (base, head):
            if side.decl is not None and side.decl.config is not None:
                print(f"[gate] {side.name} declares {side.decl.config.describe()}")
        print(f"[gate] would install both sides into {cache}, run `ipcbench run {run_text}` interleaved "
              f"({opts.rounds} rounds per side, then up to {opts.confirm_rounds} for cases in doubt while the "
              f"{opts.budget / 60:.1f} min budget lasts) and report to {out}")
        return 0
    clear_own(out, REPORT_MARK, REPORT_NAMES)
    (out / "rounds").mkdir()
    log = out / "gate.log"
    run_args = shlex.split(run_text)
    print(f"[gate] base: {base.label}\n[gate] head: {head.label}\n[gate] log: {log}", flush=True)
    if project:
        for side in (base, head):
            assert side.decl is not None and side.decl.config is not None and side.decl.text is not None
            side.config = out / f"{side.name}.pyproject.toml"
            write_text(side.config, side.decl.text)
            print(f"[gate] {side.name} declares {side.decl.config.describe()}", flush=True)
    # a named calibration is read now; the stored one is looked up by the sides' matrices after the first rounds
    explicit = opts.decision.calibration is not None
    try:
        calibration = find_calibration(opts.decision.calibration) if explicit else None
    except ValueError as exc:
        raise GateError(str(exc)) from None
    install_sides(repo, (base, head), cache, log, opts.timeout, opts.isolated)
    env_notes = check_sides_equal(base, head, out, cache)

    def use_calibration(found: Calibration | None) -> None:
        nonlocal calibration, env_notes
        calibration = found
        print(f"[gate] {describe_use(calibration, opts.decision.calibration)}", flush=True)
        budget_lines = budget_notice(calibration, opts) if calibration is not None else []
        print("".join(f"[gate] {line}\n" for line in budget_lines), end="", flush=True)
        env_notes = env_notes + budget_lines[:1]
    if explicit:
        use_calibration(calibration)

    sides, scratch, job = {"base": base, "head": head}, names.private_dir("gate-run"), uuid.uuid4().hex
    sets: dict[str, list[ResultSet]] = {"base": [], "head": []}
    warnings: list[str] = []
    if project:
        try:
            for side in (base, head):
                print(f"[gate] {side.name}: {check_matrix(side, scratch, opts.timeout)} cases declared", flush=True)
        except BaseException:
            names.remove(scratch)
            raise

    injected = {INJECT_ENV: format_injection(opts.inject)} if opts.inject else {}
    if injected:
        print(f"[gate] head's runs slowed on purpose: {injected[INJECT_ENV]} (what the gate sees)", flush=True)

    latest: dict[str, ResultSet] = {}  # the sides merged from every round so far

    def run_rounds(count: int, only: list[str] | None) -> tuple[Comparison, ResultSet]:
        for i, name in round_order(count, first=len(sets["base"])):
            what = f"{len(only)} case(s) in doubt" if only is not None else "every case"
            print(f"[gate] round {i + 1}: {name}, {what}", flush=True)
            dest = out / "rounds" / f"{i + 1}-{name}"
            # one counting pass a side (its first round; merge_rounds keeps its counters): docs/counters.md
            args = side_args(sides[name], run_args, only, scratch, opts.timeout, opts.count and i == 0)
            rs, warning = run_round(sides[name], dest, args, scratch, log, opts.timeout,
                                    env=injected if name == "head" else None)
            sets[name].append(rs)
            if warning:
                warnings.append(warning)
        merged = {name: merge_rounds(s) for name, s in sets.items()}
        for name, rs in merged.items():
            rs.env["gate_side"] = sides[name].label
            rs.env["gate_job"] = job  # one interleaved experiment: `ipcbench compare` of the two is paired
        latest.update(merged)
        try:
            if not explicit and len(sets["base"]) == 1:  # the first round: every case, both matrices known
                use_calibration(find_calibration(None, merged["head"], merged["base"]))
            comparison = compare_sets(merged["base"], merged["head"], opts.decision.threshold,
                                      opts.decision.confidence, opts.decision.metric, opts.decision.family_wise,
                                      paired=True, calibration=calibration,
                                      **rule_callables(rules, opts.decision.threshold))
        except ValueError as exc:
            raise GateError(str(exc)) from None
        comparison.warnings.extend(warnings)
        comparison.warnings.extend(env_notes)
        imbalance = load_imbalance(sets["base"], sets["head"])
        if imbalance:
            comparison.warnings.append(imbalance)
        return comparison, merged["head"]

    confirmed = 0
    stopped = ""
    try:
        warm_up(sides, scratch, log, opts.timeout)
        comparison, merged_head = run_rounds(1, None)
        # the other first rounds measure every case while the budget allows, else the cases in doubt
        # (those that look slower first): a large matrix under load fits one round of every case
        for _ in range(opts.rounds - 1):
            fits = time.monotonic() - started + last_round_s(sets) <= opts.budget
            only = None if fits else doubtful(comparison, merged_head)
            if only == []:
                break
            comparison, merged_head = run_rounds(1, only)
        # the confirming rounds: only the cases in doubt, one round at a time, within the budget
        while confirmed < opts.confirm_rounds:
            elapsed = time.monotonic() - started
            per_round = last_round_s(sets)
            left = min(opts.confirm_rounds - confirmed, int((opts.budget - elapsed) / per_round) if per_round else 0)
            only = doubtful(comparison, merged_head, len(sets["base"]) + max(left, 1))
            if only == []:
                break
            if elapsed + last_round_s(sets) > opts.budget:
                stopped = (f"the budget ({opts.budget / 60:.1f} min) ended the confirming rounds with "
                           f"{'every case' if only is None else f'{len(only)} case(s)'} still in doubt")
                print(f"[gate] {stopped}", flush=True)
                break
            print(f"[gate] {'every case' if only is None else f'{len(only)} case(s)'} in doubt (not unchanged): "
                  f"confirming round {confirmed + 1} of at most {opts.confirm_rounds}", flush=True)
            comparison, merged_head = run_rounds(1, only)
            confirmed += 1
    finally:
        names.remove(scratch)
    if stopped:
        comparison.warnings.append(stopped + " (--budget, --confirm-rounds)")
    # written once, after the last round: a merged side can hold millions of samples
    for name, rs in latest.items():
        rs.save(out / f"{name}.json")

    intro = (
        f"ipcbench gate: head {head.label} vs base {base.label}; {opts.rounds} interleaved rounds of "
        f"`ipcbench run{' ' + run_text if run_text else ''}`"
        f"{' over the matrix each side declares in [tool.ipcbench]' if project else ''} per side"
        f"{f', then {confirmed} more of the cases in doubt' if confirmed else ''}, in this job, on this machine"
        f"{f'; head slowed on purpose ({injected[INJECT_ENV]})' if injected else ''}"
        f"{'; counted once a side (its first round)' if opts.count else '; not counted (--no-count)'}"
        f"; {(time.monotonic() - started) / 60:.1f} min"
    )
    table = format_table(comparison)
    write_text(out / "compare.txt", intro + "\n" + table + "\n")
    md = format_markdown(comparison, f"Perf gate: head vs {opts.base}") + f"\n{intro}.\n"
    write_text(out / "compare.md", md)
    if opts.decision.markdown:
        write_output(opts.decision.markdown, md, "--markdown")
    if opts.decision.json:
        write_json(opts.decision.json, comparison, "gate", opts.decision.inconclusive_pass)
    write_json(out / "verdicts.json", comparison, "gate", opts.decision.inconclusive_pass, checked=False)
    print(f"[gate] report: {out}")
    print(intro)
    print(table)  # its last line is the verdict's
    return opts.decision.exit_code(comparison)
