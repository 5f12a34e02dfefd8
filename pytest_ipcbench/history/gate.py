"""``ipcbench gate``: measure base and head here, interleaved, and compare them.

It installs base and head into virtual environments of their own and runs them in turn, round
after round (base head, head base, ...: the order alternates so that a drift of the machine does
not favour one side): first every case (``rounds``, by default ``ipcbench run --quick`` at as many
ranks as cores), then, one round at a time, only the cases still in doubt (head / base above 1 +
half the threshold), until none is or ``confirm_rounds`` are spent. Each side's samples are kept
round by round and compared (:mod:`.compare`) on a two-level bootstrap (rounds, then samples
within a round): samples of one round share the state of the machine at that moment and are not
independent draws. A real regression only gathers evidence in the confirming rounds, a fluke
rarely survives them, and a clearly unchanged case costs nothing after the first rounds. Nothing
is tied to a machine's identity or to yesterday's number on another runner (docs/method.md rule 16).

In another project (its pyproject.toml names another project than pytest-ipcbench) the gate
measures what that project declares in ``[tool.ipcbench]``, installs the project itself at base
and head, and keeps pytest-ipcbench the same on both sides (:mod:`.consumer`).
"""

from __future__ import annotations

import hashlib
import os
import shlex
import shutil
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

from ..core import names
from ..core.envinfo import INJECT_ENV, cores
from ..core.injection import Slowdown, format_injection
from ..core.procs import kill_group
from ..core.project import find_pyproject
from . import consumer
from .calibration import Calibration, find_calibration, undecidable
from .compare import Comparison, Decision, GateError, compare_sets, format_markdown, format_table, merge_rounds
from .results import ResultSet

DEFAULT_ROUNDS = 2
DEFAULT_CONFIRM_ROUNDS = 12
#: No confirming round starts once the gate has run this long (seconds, from its start, the
#: installs included) or would pass it with one more round pair of the last one's length.
DEFAULT_BUDGET = 420.0
#: After the first rounds a case stays in doubt while its verdict is not "unchanged": only such
#: cases get the confirming rounds. A clearly unchanged case cannot turn into a regression by more
#: measuring; a real change only gathers evidence, and a case that flips between two modes from
#: run to run (4 ranks on 2 cores) shows it, instead of a verdict from two rounds that happened to
#: land in different modes.
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
    count: bool = False  # each run with its counting pass: exact counters compared exactly (exit 1 when one grew)


class Unadopted(GateError):
    """The base predates the project's adoption of pytest-ipcbench: nothing to compare with."""


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
    decl: "consumer.Declared | None" = None  # another project: its pyproject.toml (None: pytest-ipcbench itself)
    config: Path | None = None  # another project: the copy of its pyproject.toml given to `ipcbench run --config`
    prefix: str = ""  # the project's folder inside the repository ("" at the top, else ending in "/")
    run_help: str = ""  # `ipcbench run --help` of this side: which options its version knows

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
            kill_group(proc, grace=10)
            out.write(f"\n[ipcbench gate] killed after {timeout:g} s\n")
            return -1
        except BaseException:  # interrupted: take the whole group (mpiexec and its ranks) down
            kill_group(proc, grace=0)
            raise




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
    """The side's venv folder name: the same length for a commit and a working tree, so that both
    sides run with environments (PATH, VIRTUAL_ENV) of the same size -- the size of the
    environment moves the stack's alignment and with it the timings of identical code."""
    py = f"py{sys.version_info[0]}{sys.version_info[1]}"
    mode = "isolated" if isolated else "shared"
    if side.decl is not None:
        mode = f"project-{hashlib.sha1(side.prefix.encode()).hexdigest()[:6]}"
    what = f"c-{side.commit}" if side.commit else f"w-{side.source}"
    return f"{hashlib.sha1(what.encode()).hexdigest()[:20]}-{py}-{mode}"


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
    if side.decl is not None:
        install_project(side, cache, log, timeout)
        if side.commit:
            stamp.write_text(side.commit + "\n")
        return
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


def install_project(side: Side, cache: Path, log: Path, timeout: float) -> None:
    """Another project at one side: a venv that sees the gate's packages (pytest-ipcbench, numpy,
    mpi4py, MPI: the same for both sides), the project's other dependencies, the project itself."""
    assert side.source is not None and side.venv is not None and side.decl is not None
    if not (side.bin / "python").exists():
        shutil.rmtree(side.venv, ignore_errors=True)
        side.venv.parent.mkdir(parents=True, exist_ok=True)
        if _run_logged([sys.executable, "-m", "venv", side.venv], log, timeout) != 0:
            raise GateError(f"cannot create a virtual environment for {side.name}; see {log}:\n{_tail(log)}")
    consumer.share_packages(side.bin / "python")
    env = _side_env(side.venv)
    pip = [side.bin / "python", "-m", "pip", "install", "--quiet"]
    deps = consumer.dependencies_besides_us(side.decl)
    if deps and _run_logged(pip + deps, log, timeout, cwd=cache, env=env) != 0:
        raise GateError(f"installing the dependencies of {side.name} ({side.label}) failed; see {log}:\n{_tail(log)}")
    # the version does not change between commits: force the project itself to be reinstalled.
    # Built the way pip builds by default (build isolation), the same way at both sides: building
    # in the side's environment (--no-build-isolation) broke with an older setuptools there
    # (InvalidRequirement on a git+file URL) and made the two sides' builds depend on what each had
    project = pip + ["--no-deps", "--force-reinstall", side.source]
    if _run_logged(project, log, timeout, cwd=cache, env=env) != 0:
        missing = consumer.missing_build_requirements(side.source, side.bin / "python", env)
        hint = (f" Its build requirements {missing} are not in the side's environment either, and pip's isolated "
                f"build could not fetch them (offline?): make them installable (a reachable index or "
                f"PIP_FIND_LINKS)." if missing else "")
        raise GateError(f"installing {side.name} ({side.label}) failed, built with pip's default build isolation."
                        f"{hint} See {log}:\n{_tail(log)}")
    if side.commit is None:
        shutil.rmtree(side.source / "build", ignore_errors=True)  # pip's in-tree build leftovers
    ours, where, err = consumer.probe_install(side.bin / "python", side.decl.name, env, cache)
    if ours is None or where is None:
        raise GateError(f"{side.name}: the installed project {side.decl.name!r} cannot be found: {err}")
    if ours != consumer.self_location():
        raise GateError(f"{side.name}: pytest_ipcbench is imported from {ours}, not from the gate's own "
                        f"{consumer.self_location()}; both sides must run the same pytest-ipcbench")
    if side.venv.resolve() not in where.parents and where != side.venv.resolve():
        raise GateError(f"{side.name}: {side.decl.name} is imported from {where}, not from {side.venv} "
                        f"(an editable install of it in the gate's environment shadows the side's)")


def check_matrix(side: Side, scratch: Path, timeout: float) -> int:
    """``ipcbench run --list`` of a side's declared matrix: its number of cases (GateError if it
    cannot run, e.g. it names a backend this side does not provide)."""
    assert side.venv is not None and side.config is not None
    cmd = [*consumer.run_command(side.bin / "python"), "--config", str(side.config), "--list"]
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=scratch, env=_side_env(side.venv),
                          timeout=min(timeout, 300))
    if proc.returncode != 0:
        last = (proc.stderr.strip().splitlines() or ["?"])[-1]
        raise GateError(f"{side.name} {side.label}: its declared matrix cannot run here: {last}")
    listed = [line for line in proc.stdout.splitlines() if line.startswith(("mpi ", "local "))]
    if not listed:
        raise GateError(f"{side.name} {side.label}: its declared matrix has no case that can run here "
                        f"(`ipcbench run --config {side.config} --list` lists none)")
    return len(listed)


def run_round(side: Side, out: Path, run_args: Sequence[str], scratch: Path, log: Path,
              timeout: float, env: dict[str, str] | None = None) -> tuple[ResultSet, str]:
    """One ``ipcbench run`` of a side into ``out``: its ResultSet, and a warning ("" if none).

    The command runs in a scratch folder, never in the repository: there ``python -m`` would
    import the working tree's package instead of the side's installed one. Exit 1 with a
    results file means some cases failed (their results are missing): the others still count,
    and the report says so.
    """
    assert side.venv is not None
    if side.config is not None:  # another project: its declared matrix, our shared pytest_ipcbench
        cmd = [*consumer.run_command(side.bin / "python"), *run_args, "--config", side.config, "--out", out]
    else:
        cmd = [side.bin / "ipcbench", "run", *run_args, "--out", out]
    started = time.monotonic()
    code = _run_logged(cmd, log, timeout, cwd=scratch, env={**_side_env(side.venv), **(env or {})})
    took = time.monotonic() - started
    results = out / "results.json"
    if code not in (0, 1) or not results.is_file():
        why = f"exited with {code}" if code != -1 else f"did not finish within {timeout:g} s"
        raise GateError(f"`ipcbench run` of {side.name} {why} after {took:.0f} s; see {log}:\n{_tail(log)}")
    try:
        rs = ResultSet.load(results)
    except ValueError as exc:
        raise GateError(f"{side.name}: {exc}") from None
    rs.env["gate_round_s"] = round(took, 2)
    failed = rs.env.get("failures") or []
    warning = ""
    if code != 0:
        warning = (f"{side.name}, round {out.name.split('-')[0]}: `ipcbench run` reported "
                   f"{len(failed) or 'some'} failed case(s), e.g. {str(failed[:1])[:200]} (see {out / 'run.log'})")
    print(f"[gate]   {side.name}: {took:.1f} s, {len(rs.results)} cases" + (" (with failures)" if code else ""),
          flush=True)
    return rs, warning


def default_run_args() -> str:
    """The gate's matrix in this repository: the quick level at as many ranks as cores (2 to 4).

    Oversubscribed ranks measure the scheduler as much as the code: on 2 cores a case's median
    moved between runs of the same code by 32% at 4 ranks and by 7% at 2 (median over backends,
    docs/performance-history.md), and a gate cannot see through that.
    """
    return f"--quick --ranks {max(2, min(4, cores()))}"


def run_help(side: Side, scratch: Path, timeout: float) -> str:
    """``ipcbench run --help`` of a side, asked once: which options its version knows (a base
    may predate one)."""
    if not side.run_help:
        assert side.venv is not None
        cmd = [*consumer.run_command(side.bin / "python")] if side.config is not None else [str(side.bin / "ipcbench"), "run"]
        proc = subprocess.run([*cmd, "--help"], capture_output=True, text=True, cwd=scratch,
                              env=_side_env(side.venv), timeout=min(timeout, 300))
        side.run_help = proc.stdout or " "
    return side.run_help


def side_args(side: Side, run_args: Sequence[str], only: Sequence[str] | None, scratch: Path,
              timeout: float, count: bool = False) -> list[str]:
    """The arguments of one side's round: the gate's, ``--results-only`` when its version knows
    it (no plots to wait for), ``--count`` when asked and known (a side that predates it is
    not counted: its cases then get no counter verdict), and ``--only`` of the cases in doubt
    (None: every case)."""
    text = run_help(side, scratch, timeout)
    args = list(run_args)
    if "--results-only" in text:
        args.append("--results-only")
    if count and "--count" in text and "--count" not in args:
        args.append("--count")
    for label in only or ():
        args += ["--only", label]
    return args


#: The label of ``ipcbench run --only`` that selects a result's case, for results that are no case
#: of the matrix (the extras run as blocks).
EXTRA_LABELS = {"mpi-method": "seed004", "seed002": "seed002", "seed002-handle": "seed002"}


def doubtful(comparison: Comparison, head: ResultSet, threshold: float) -> list[str] | None:
    """The ``--only`` labels of the cases still in doubt (:data:`IN_DOUBT`). None when a doubtful
    case cannot be selected alone (results of a version that does not record its case label):
    then the whole matrix runs again."""
    by_key = head.by_key()
    labels: list[str] = []
    for case in comparison.cases:
        if case.interval is None or case.status not in IN_DOUBT:
            continue
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
    total = 0.0
    for rounds in sets.values():
        if rounds:
            total += float(rounds[-1].env.get("gate_round_s") or 0.0)
    return total


def round_order(rounds: int, first: int = 0) -> list[tuple[int, str]]:
    """(round, side) in run order: base head, head base, base head, ... (ABBA: drift cancels)."""
    order: list[tuple[int, str]] = []
    for i in range(first, first + rounds):
        pair = ("base", "head") if i % 2 == 0 else ("head", "base")
        order += [(i, s) for s in pair]
    return order


def _sides(repo: Path, opts: GateOptions) -> tuple[Side, Side]:
    base_commit = resolve_commit(repo, opts.base)
    base = Side("base", f"{opts.base} ({base_commit[:12]})", base_commit)
    head_path = Path(opts.head)
    if head_path.is_dir() and (head_path / "pyproject.toml").is_file():
        head_path = head_path.resolve()
        at = _git(head_path, "rev-parse", "--short=12", "HEAD", check=False) or "?"
        dirty = _git(head_path, "status", "--porcelain", "--untracked-files=no", check=False)
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
        has_run = _tree_has_run(side.source) if side.source else _commit_has_run(repo, side.commit or "")
        if not has_run:
            raise GateError(_no_run_message(side))
    return base, head


def _install(repo: Path, sides: Sequence[Side], cache: Path, log: Path, opts: GateOptions) -> None:
    """Install every side; a commit is checked out into a temporary worktree, removed right after."""
    _git(repo, "worktree", "prune", check=False)
    for side in sides:
        tree: Path | None = None
        try:
            if side.source is None:
                key = venv_key(side, opts.isolated)
                if not (cache / "venvs" / key / INSTALLED_STAMP).is_file():
                    tree = names.private_dir(f"gate-{side.name}") / "src"
                    _git(repo, "worktree", "add", "--detach", str(tree), side.commit or "")
                    side.source = tree / side.prefix if side.prefix else tree
            install_side(side, cache, log, opts.timeout, opts.isolated)
        finally:
            if tree is not None:
                _git(repo, "worktree", "remove", "--force", str(tree), check=False)
                names.remove(tree.parent)
                _git(repo, "worktree", "prune", check=False)


def check_sides_equal(base: Side, head: Side, out: Path, cache: Path) -> list[str]:
    """Record what each side runs on (out/environment.json) and compare: a difference of
    interpreter, environment variables or environment size is a bias between the sides, not a
    change of the code (docs/method.md rule 22), and the gate refuses it; a difference of installed
    distributions is reported (a pull request may change a dependency on purpose)."""
    import json

    records = {}
    for side in (base, head):
        assert side.venv is not None
        project = side.decl.name if side.decl is not None else consumer.SELF
        records[side.name] = consumer.side_record(side.bin / "python", _side_env(side.venv), cache, project)
        records[side.name]["venv"] = str(side.venv)
    (out / "environment.json").write_text(json.dumps(records, indent=1) + "\n")
    refuse, notes = consumer.record_differences(records["base"], records["head"])
    if refuse:
        raise GateError("base and head would not run on equal terms, so a difference of time could not be told "
                        "from the code's: " + "; ".join(refuse[:5]) + f" (both recorded in {out / 'environment.json'})")
    return [f"base and head run on different distributions (declared by the project?): {', '.join(notes[:6])}"] \
        if notes else []


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


def warm_up(sides: dict[str, "Side"], scratch: Path, log: Path, timeout: float) -> None:
    """Import each side's packages once before the first timed round, so that neither side pays
    for a cold file cache or a first compilation in a round the other does not."""
    for side in sides.values():
        assert side.venv is not None
        code = "import numpy, mpi4py, pytest_ipcbench.runner.job, pytest_ipcbench.harness.measure"
        if side.decl is not None:
            code += "; import importlib.metadata as m; m.distribution(%r)" % side.decl.name
        _run_logged([side.bin / "python", "-c", code], log, min(timeout, 300), cwd=scratch, env=_side_env(side.venv))


def budget_notice(calibration: Calibration, opts: GateOptions, effect: float = 1.5) -> list[str]:
    """Up front: the cases whose calibrated noise cannot decide ``effect`` within the gate's
    budget of rounds, and the rounds that would (docs/method.md rule 21)."""
    from statistics import NormalDist

    rounds = opts.rounds + opts.confirm_rounds
    m = max(1, len(calibration.cases))
    per_case = 1 - (1 - opts.decision.confidence) / m if opts.decision.family_wise else opts.decision.confidence
    z = NormalDist().inv_cdf(1 - (1 - per_case) / 2)
    cannot = undecidable(calibration, None, opts.decision.threshold, rounds, z, effect)
    if not cannot:
        return [f"every calibrated case can decide a {effect:g}x slowdown within {rounds} rounds per side"]
    worst = sorted(cannot, key=lambda c: c[2] or 10 ** 9, reverse=True)
    shown = "; ".join(f"{k} (detects {x:.3g}x, needs {n if n is not None else 'inf'} rounds)"
                      for k, x, n in worst[:3])
    return [f"{len(cannot)} of {len(calibration.cases)} calibrated cases cannot decide a {effect:g}x slowdown "
            f"within this budget ({rounds} rounds per side): their verdict will be inconclusive, not unchanged; "
            f"e.g. {shown}. --rounds/--confirm-rounds/--budget set the budget"]


def run_gate(opts: GateOptions) -> int:
    """Install, run interleaved, compare, write the report; the exit code of the comparison."""
    if opts.confirm_rounds < 0:
        raise GateError(f"--confirm-rounds must not be negative, got {opts.confirm_rounds}")
    started = time.monotonic()
    repo = repo_top()
    cache = Path(opts.cache_dir).resolve() if opts.cache_dir else repo / ".ipcbench-gate"
    out = Path(opts.out).resolve() if opts.out else cache / "report"
    try:
        base, head = _sides(repo, opts)
    except Unadopted as exc:
        if not opts.skip_unadopted_base:
            raise
        notice = f"ipcbench gate: not gated: {exc}"
        print(notice)
        out.mkdir(parents=True, exist_ok=True)
        md = f"## Perf gate: head vs {opts.base}\n\n:information_source: {notice}\n"
        (out / "compare.md").write_text(md)
        if opts.decision.markdown:
            Path(opts.decision.markdown).parent.mkdir(parents=True, exist_ok=True)
            Path(opts.decision.markdown).write_text(md)
        return 0
    project = head.decl is not None
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
    if out.exists():
        shutil.rmtree(out)
    (out / "rounds").mkdir(parents=True)
    log = out / "gate.log"
    run_args = shlex.split(run_text)
    print(f"[gate] base: {base.label}\n[gate] head: {head.label}\n[gate] log: {log}", flush=True)
    if project:
        for side in (base, head):
            assert side.decl is not None and side.decl.config is not None and side.decl.text is not None
            side.config = out / f"{side.name}.pyproject.toml"
            side.config.write_text(side.decl.text)
            print(f"[gate] {side.name} declares {side.decl.config.describe()}", flush=True)
    try:
        calibration = find_calibration(opts.decision.calibration)
    except ValueError as exc:
        raise GateError(str(exc)) from None
    _install(repo, (base, head), cache, log, opts)
    env_notes = check_sides_equal(base, head, out, cache)
    if calibration is not None:
        print(f"[gate] {calibration.describe()}", flush=True)
        budget_lines = budget_notice(calibration, opts)
        for line in budget_lines:
            print(f"[gate] {line}", flush=True)
        env_notes = env_notes + [calibration.describe()] + budget_lines[:1]

    sides = {"base": base, "head": head}
    sets: dict[str, list[ResultSet]] = {"base": [], "head": []}
    warnings: list[str] = []
    scratch = names.private_dir("gate-run")
    job = uuid.uuid4().hex
    if project:
        try:
            for side in (base, head):
                print(f"[gate] {side.name}: {check_matrix(side, scratch, opts.timeout)} cases declared", flush=True)
        except BaseException:
            names.remove(scratch)
            raise

    injected = {INJECT_ENV: format_injection(opts.inject)} if opts.inject else {}
    if injected:
        print(f"[gate] head's runs slowed on purpose: {injected[INJECT_ENV]} (measuring what the gate sees)", flush=True)

    def run_rounds(count: int, only: list[str] | None) -> tuple[Comparison, ResultSet]:
        for i, name in round_order(count, first=len(sets["base"])):
            what = f"{len(only)} case(s) in doubt" if only is not None else "every case"
            print(f"[gate] round {i + 1}: {name}, {what}", flush=True)
            dest = out / "rounds" / f"{i + 1}-{name}"
            args = side_args(sides[name], run_args, only, scratch, opts.timeout, opts.count)
            rs, warning = run_round(sides[name], dest, args, scratch, log, opts.timeout,
                                    env=injected if name == "head" else None)
            sets[name].append(rs)
            if warning:
                warnings.append(warning)
        merged = {name: merge_rounds(s) for name, s in sets.items()}
        for name, rs in merged.items():
            rs.env["gate_side"] = sides[name].label
            rs.env["gate_job"] = job  # one interleaved experiment: `ipcbench compare` of the two is paired
            rs.save(out / f"{name}.json")
        try:
            comparison = compare_sets(merged["base"], merged["head"], opts.decision.threshold,
                                      opts.decision.confidence, opts.decision.metric, opts.decision.family_wise,
                                      paired=True, calibration=calibration)
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
        comparison, merged_head = run_rounds(opts.rounds, None)
        # the confirming rounds measure only the cases in doubt, one round at a time, until none is
        # left, the rounds are spent or the budget would be; every verdict is taken on all the
        # rounds a case has
        while confirmed < opts.confirm_rounds:
            only = doubtful(comparison, merged_head, opts.decision.threshold)
            if only == []:
                break
            elapsed = time.monotonic() - started
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

    intro = (
        f"ipcbench gate: head {head.label} vs base {base.label}; {opts.rounds} interleaved rounds of "
        f"`ipcbench run{' ' + run_text if run_text else ''}`"
        f"{' over the matrix each side declares in [tool.ipcbench]' if project else ''} per side"
        f"{f', then {confirmed} more of the cases in doubt' if confirmed else ''}, in this job, on this machine"
        f"{f'; head slowed on purpose ({injected[INJECT_ENV]})' if injected else ''}"
        f"{'; with the counting pass (--count)' if opts.count else ''}"
        f"; {(time.monotonic() - started) / 60:.1f} min"
    )
    table = format_table(comparison)
    (out / "compare.txt").write_text(intro + "\n" + table + "\n")
    md = format_markdown(comparison, f"Perf gate: head vs {opts.base}") + f"\n{intro}.\n"
    (out / "compare.md").write_text(md)
    if opts.decision.markdown:
        Path(opts.decision.markdown).parent.mkdir(parents=True, exist_ok=True)
        Path(opts.decision.markdown).write_text(md)
    print(intro)
    print(table)
    print(f"[gate] report: {out}")
    return comparison.exit_code
