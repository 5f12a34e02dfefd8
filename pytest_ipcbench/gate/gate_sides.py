"""A side of the gate (base or head): where its source comes from, the environment it is
installed in, that both run on equal terms, and one ``ipcbench run`` of it."""

from __future__ import annotations

import hashlib
import json
import os
import shlex
import shutil
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from ..backends.base import declared_resources
from ..comparison.verdict import GateError
from ..core import names
from ..core.envinfo import cores
from ..core.launcher import ended_with_us
from ..core.outdir import write_text
from ..core.procs import kill_group
from ..results.results import ResultSet
from . import consumer


def git(repo: Path, *args: str, check: bool = True) -> str:
    proc = subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True)
    if check and proc.returncode != 0:
        raise GateError(f"git {' '.join(args)} failed: {proc.stderr.strip() or proc.stdout.strip()}")
    return proc.stdout.strip()


def repo_top(start: Path | None = None) -> Path:
    start = start or Path.cwd()
    top = git(start, "rev-parse", "--show-toplevel", check=False)
    if not top:
        raise GateError(f"{start} is not inside a git repository: the gate needs the project's history")
    return Path(top)


def resolve_commit(repo: Path, ref: str) -> str:
    commit = git(repo, "rev-parse", "--verify", "--quiet", f"{ref}^{{commit}}", check=False)
    if not commit:
        shallow = git(repo, "rev-parse", "--is-shallow-repository", check=False) == "true"
        hint = (" (this clone is shallow: fetch the full history, e.g. actions/checkout with fetch-depth: 0)"
                if shallow else "")
        raise GateError(f"cannot resolve {ref!r} to a commit{hint}")
    return commit


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
    decl: consumer.Declared | None = None  # another project: its pyproject.toml (None: pytest-ipcbench itself)
    config: Path | None = None  # another project: the copy of its pyproject.toml given to `ipcbench run --config`
    prefix: str = ""  # the project's folder inside the repository ("" at the top, else ending in "/")
    run_help: str = ""  # `ipcbench run --help` of this side: which options its version knows

    @property
    def bin(self) -> Path:
        assert self.venv is not None
        return self.venv / "bin"


def tree_has_run(source: Path) -> bool:
    return (source / RUN_MODULE).is_file()


def commit_has_run(repo: Path, commit: str) -> bool:
    proc = subprocess.run(["git", "-C", str(repo), "cat-file", "-e", f"{commit}:{RUN_MODULE}"], capture_output=True)
    return proc.returncode == 0


def no_run_message(side: Side, detail: str = "") -> str:
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
        # a gate killed mid-round takes the round with it (SIGTERM: the run ends its job the orderly way)
        proc = subprocess.Popen(ended_with_us(argv), stdout=out, stderr=subprocess.STDOUT, cwd=cwd, env=env,
                                start_new_session=True)
        try:
            return proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            _remove_left(kill_group(proc, grace=10))
            out.write(f"\n[ipcbench gate] killed after {timeout:g} s\n")
            return -1
        except BaseException:  # interrupted: take the whole group (mpiexec and its ranks) down
            _remove_left(kill_group(proc, grace=0))
            raise


def _remove_left(pids: set[int]) -> None:
    """Remove what a killed round's processes left (a before_ranks segment), once they are gone."""
    for item in names.find_ours(patterns=declared_resources(load_all=True)):
        if item.pid in pids and not item.alive:
            names.remove(item.path)


def _tail(path: Path, lines: int = 25) -> str:
    try:
        text = path.read_text(errors="replace").splitlines()
    except OSError:
        return ""
    return "\n".join("    " + line for line in text[-lines:])


def _side_env(venv: Path) -> dict[str, str]:
    """The environment of a side's commands: its venv first on PATH, nothing leaking from ours; the
    gate's own bin folder follows (a venv that shares our packages finds the mpich wheel's mpiexec)."""
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
    mode = "isolated" if isolated else "gateenv"  # sees the gate's packages (share_packages)
    if side.decl is not None:
        mode = f"project-{hashlib.sha1(side.prefix.encode()).hexdigest()[:6]}"
    what = f"c-{side.commit}" if side.commit else f"w-{side.source}"
    return f"{hashlib.sha1(what.encode()).hexdigest()[:20]}-{py}-{mode}"


def _make_venv(side: Side, log: Path, timeout: float) -> bool:
    """The side's bare venv, made anew unless its python is there; whether it was made now."""
    assert side.venv is not None
    if (side.bin / "python").exists():
        return False
    shutil.rmtree(side.venv, ignore_errors=True)
    side.venv.parent.mkdir(parents=True, exist_ok=True)
    if _run_logged([sys.executable, "-m", "venv", side.venv], log, timeout) != 0:
        raise GateError(f"cannot create a virtual environment for {side.name}; see {log}:\n{_tail(log)}")
    return True


def install_side(side: Side, cache: Path, log: Path, timeout: float, isolated: bool = False) -> None:
    """Create (or reuse, for a commit) the side's venv and install its source with the mpi extra.

    By default the venv sees the gate's own packages after its own (:func:`.consumer.share_packages`:
    ``--system-site-packages`` would show the base interpreter's, not those of a venv the gate runs
    in): both sides run on the gate's numpy, mpi4py and MPI, and pip installs only the project.
    ``isolated`` makes a bare venv that installs everything.
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
    fresh = _make_venv(side, log, timeout)
    if not isolated:
        consumer.share_packages(side.bin / "python")
    env = _side_env(side.venv)
    pip = [side.bin / "python", "-m", "pip", "install", "--quiet"]
    steps = [pip + [f"{side.source}[mpi]"]]
    if not fresh:  # the version does not change between commits: force the project itself to be reinstalled
        steps.append(pip + ["--no-deps", "--force-reinstall", side.source])
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
        raise GateError(no_run_message(side, f"`ipcbench run --help` failed: {last}"))
    if side.commit:
        stamp.write_text(side.commit + "\n")


def install_project(side: Side, cache: Path, log: Path, timeout: float) -> None:
    """Another project at one side: a venv that sees the gate's packages (pytest-ipcbench, numpy,
    mpi4py, MPI: the same for both sides), the project's other dependencies, the project itself."""
    assert side.source is not None and side.venv is not None and side.decl is not None
    _make_venv(side, log, timeout)
    consumer.share_packages(side.bin / "python")
    env = _side_env(side.venv)
    pip = [side.bin / "python", "-m", "pip", "install", "--quiet"]
    deps = consumer.dependencies_besides_us(side.decl)
    if deps and _run_logged(pip + deps, log, timeout, cwd=cache, env=env) != 0:
        raise GateError(f"installing the dependencies of {side.name} ({side.label}) failed; see {log}:\n{_tail(log)}")
    # the version does not change between commits: force the project itself to be reinstalled,
    # built with pip's default build isolation, so both sides build alike
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
    """One ``ipcbench run`` of a side into ``out``: its ResultSet, and a warning ("" if none: exit 1
    with a results file, some cases failed, the others count). It runs in a scratch folder: in the
    repository ``python -m`` would import the working tree's package, not the side's."""
    assert side.venv is not None
    if side.config is not None:  # another project: its declared matrix, our shared pytest_ipcbench
        cmd = [*consumer.run_command(side.bin / "python"), *run_args, "--config", side.config, "--out", out]
    else:
        cmd = [side.bin / "ipcbench", "run", *run_args, "--out", out]
    started = time.monotonic()
    child_env = names.child_env(scratch, {**_side_env(side.venv), **(env or {})})
    code = _run_logged(cmd, log, timeout, cwd=scratch, env=child_env)
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
    """The gate's matrix in this repository: the quick level at as many ranks as cores (2 to 4):
    oversubscribed ranks measure the scheduler as much as the code (docs/performance-history.md)."""
    return f"--quick --ranks {max(2, min(4, cores()))}"


def run_help(side: Side, scratch: Path, timeout: float) -> str:
    """``ipcbench run --help`` of a side, asked once: which options its version knows (a base
    may predate one)."""
    if not side.run_help:
        assert side.venv is not None
        cmd = ([*consumer.run_command(side.bin / "python")] if side.config is not None
               else [str(side.bin / "ipcbench"), "run"])
        proc = subprocess.run([*cmd, "--help"], capture_output=True, text=True, cwd=scratch,
                              env=_side_env(side.venv), timeout=min(timeout, 300))
        side.run_help = proc.stdout or " "
    return side.run_help


def side_args(side: Side, run_args: Sequence[str], only: Sequence[str] | None, scratch: Path,
              timeout: float, count: bool = False) -> list[str]:
    """The arguments of one side's round: the gate's, then ``--results-only`` and ``--count`` or
    ``--no-count`` where the side's version knows them, and ``--only`` of the cases in doubt."""
    text = run_help(side, scratch, timeout)
    args = list(run_args)
    if "--results-only" in text:
        args.append("--results-only")
    flag = "--count" if count else "--no-count"
    if flag in text and not {"--count", "--no-count"} & set(args):
        args.append(flag)
    for label in only or ():
        args += ["--only", label]
    return args


def install_sides(repo: Path, sides: Sequence[Side], cache: Path, log: Path, timeout: float, isolated: bool) -> None:
    """Install every side; a commit is checked out into a temporary worktree, removed right after."""
    git(repo, "worktree", "prune", check=False)
    for side in sides:
        tree: Path | None = None
        try:
            if side.source is None:
                key = venv_key(side, isolated)
                if not (cache / "venvs" / key / INSTALLED_STAMP).is_file():
                    tree = names.private_dir(f"gate-{side.name}") / "src"
                    git(repo, "worktree", "add", "--detach", str(tree), side.commit or "")
                    side.source = tree / side.prefix if side.prefix else tree
            install_side(side, cache, log, timeout, isolated)
        finally:
            if tree is not None:
                git(repo, "worktree", "remove", "--force", str(tree), check=False)
                names.remove(tree.parent)
                git(repo, "worktree", "prune", check=False)


def check_sides_equal(base: Side, head: Side, out: Path, cache: Path) -> list[str]:
    """Record what each side runs on (out/environment.json): a different interpreter, environment or
    environment size is a bias, refused (docs/method.md rule 22); different distributions are notes."""
    records = {}
    for side in (base, head):
        assert side.venv is not None
        project = side.decl.name if side.decl is not None else consumer.SELF
        records[side.name] = consumer.side_record(side.bin / "python", _side_env(side.venv), cache, project)
        records[side.name]["venv"] = str(side.venv)
    write_text(out / "environment.json", json.dumps(records, indent=1) + "\n")
    refuse, notes = consumer.record_differences(records["base"], records["head"])
    if refuse:
        raise GateError("base and head would not run on equal terms, so a difference of time could not be told "
                        "from the code's: " + "; ".join(refuse[:5]) + f" (both recorded in {out / 'environment.json'})")
    return [f"base and head run on different distributions (declared by the project?): {', '.join(notes[:6])}"] \
        if notes else []


def warm_up(sides: dict[str, Side], scratch: Path, log: Path, timeout: float) -> None:
    """Import each side's packages once before the first timed round, so that neither side pays
    for a cold file cache or a first compilation in a round the other does not."""
    for side in sides.values():
        assert side.venv is not None
        code = "import numpy, mpi4py, pytest_ipcbench.runner.job, pytest_ipcbench.harness.measure"
        if side.decl is not None:
            code += f"; import importlib.metadata as m; m.distribution({side.decl.name!r})"
        _run_logged([side.bin / "python", "-c", code], log, min(timeout, 300), cwd=scratch, env=_side_env(side.venv))
