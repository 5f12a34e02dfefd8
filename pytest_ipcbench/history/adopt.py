"""Files another project needs to adopt the gate and the asv history: written by ``ipcbench init-ci``.

* ``.github/workflows/perf-gate.yml``: on every pull request, install pytest-ipcbench (from a git
  URL or a wheel: it is not on PyPI), then ``ipcbench gate --base origin/BASE`` over the matrix the
  project declares in ``[tool.ipcbench]``; the verdict goes to the job summary, the report is an
  artifact. The pull request that adopts pytest-ipcbench is not gated (its base has no table).
* with ``--asv``: ``asv.conf.json`` and ``benchmarks/bench_ipcbench.py``, the asv suite of
  :mod:`.asv_suite` over the same declared matrix.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

from ..core.errors import UsageError

#: What the workflow installs when nothing else is said: the project's git repository.
DEFAULT_INSTALL = "pytest-ipcbench[mpi] @ git+https://github.com/OWNER/pytest-ipcbench"
DEFAULT_WORKFLOW = ".github/workflows/perf-gate.yml"
DEFAULT_PYTHON = "3.12"

WORKFLOW = """\
# Perf gate on pull requests (written by `ipcbench init-ci`): the base branch and the pull request
# are installed side by side and measured in this job, interleaved (base head, head base, ...),
# over the matrix declared in [tool.ipcbench] of {project_dir}pyproject.toml; a case fails the job
# only when it is slower than +10% with 95% confidence. pytest-ipcbench is not on PyPI: it is
# installed from {install_kind}, the same for both sides.
name: perf-gate

on:
  pull_request:

permissions:
  contents: read

concurrency:
  group: perf-gate-${{{{ github.event.pull_request.number }}}}
  cancel-in-progress: true

jobs:
  gate:
    runs-on: ubuntu-24.04
    timeout-minutes: 90
    env:
      BASE_REF: ${{{{ github.base_ref }}}}
      IPCBENCH_INSTALL: "{install}"
      PYTHONUNBUFFERED: "1"
    steps:
      - uses: actions/checkout@v4
        with:
          fetch-depth: 0  # the gate checks the base commit out into a worktree

      - uses: actions/setup-python@v5
        with:
          python-version: "{python}"

      - name: Install pytest-ipcbench (not from PyPI)
        run: |
          python -m pip install --upgrade pip
          python -m pip install "${{IPCBENCH_INSTALL}}"

      - name: Environments of earlier runs (keyed by the base commit)
        uses: actions/cache@v4
        with:
          path: {project_dir}.ipcbench-gate/venvs
          key: perf-gate-venvs-${{{{ runner.os }}}}-py{python}-${{{{ github.event.pull_request.base.sha }}}}
          restore-keys: perf-gate-venvs-${{{{ runner.os }}}}-py{python}-

      # the calibration (docs/calibration.md): `ipcbench calibrate` stores it in the user's cache under
      # the machine's and the matrix's digests and the gate finds it there; kept between runs per
      # runner type and pyproject, measured again only when the cache has none
      - name: Calibration of this runner type (kept between runs)
        id: calibration
        uses: actions/cache@v4
        with:
          path: ~/.cache/pytest-ipcbench
          key: ipcbench-calibration-${{{{ runner.os }}}}-${{{{ runner.arch }}}}-py{python}-${{{{ hashFiles('{project_dir}pyproject.toml') }}}}

      - name: Calibrate (only when the cache had none)
        if: steps.calibration.outputs.cache-hit != 'true'
        working-directory: {working_directory}
        run: ipcbench calibrate --plot none

      - name: Perf gate against the base branch
        working-directory: {working_directory}
        # --skip-unadopted-base: the pull request that adds [tool.ipcbench] has nothing to compare with
        run: ipcbench gate --base "origin/${{BASE_REF}}" --skip-unadopted-base{gate_args}

      - name: Job summary
        if: always()
        working-directory: {working_directory}
        run: |
          if [ -f .ipcbench-gate/report/compare.md ]; then
            cat .ipcbench-gate/report/compare.md >> "$GITHUB_STEP_SUMMARY"
          else
            echo "The perf gate did not produce a report; see the log of the gate step." >> "$GITHUB_STEP_SUMMARY"
          fi

      - name: Upload the report
        if: always()
        uses: actions/upload-artifact@v4
        with:
          name: perf-gate-report
          path: {project_dir}.ipcbench-gate/report/
          if-no-files-found: warn
          retention-days: 30
"""

ASV_CONF = {
    "version": 1,
    "project": "",
    "project_url": "",
    "repo": ".",
    "branches": ["HEAD"],
    "environment_type": "virtualenv",
    "benchmark_dir": "benchmarks",
    "env_dir": ".asv/env",
    "results_dir": ".asv/results",
    "html_dir": ".asv/html",
    "build_command": ["python -m pip wheel --no-deps -w {build_cache_dir} {build_dir}"],
    "install_command": ["in-dir={env_dir} python -m pip install {wheel_file}"],
    # one process per case and counter (~130 for a small matrix): forked from one that imported
    # the suite once, not a fresh Python each
    "launch_method": "forkserver",
}

ASV_MODULE = '''\
"""asv suite: times the matrix this project declares in [tool.ipcbench] (written by `ipcbench init-ci --asv`).

asv installs this project at each commit; pytest-ipcbench comes from the "matrix" of asv.conf.json
(a git URL or a wheel: it is not on PyPI). `asv run`, `asv continuous main HEAD`, `asv publish`.
"""

from pytest_ipcbench.history.asv_suite import *  # noqa: F401,F403 (Declared: one benchmark per declared case, setup_cache)
'''


#: what the gate and asv leave in a project (hundreds of MB): never to be committed
GATE_CACHE = ".ipcbench-gate/"
ASV_FOLDER = ".asv/"
PLACEHOLDER = "/OWNER/"


@dataclass(frozen=True)
class Written:
    path: Path
    what: str


def installed_spec(extra: str = "[mpi]") -> str | None:
    """How CI can install the pytest-ipcbench that runs here, from its install record (PEP 610):
    ``pytest-ipcbench[mpi] @ git+URL@COMMIT`` for a git install, ``... @ URL`` for a wheel or an
    archive fetched by URL; None when it came from a local folder or file (nothing CI can reach)."""
    from importlib import metadata

    try:
        text = metadata.distribution("pytest-ipcbench").read_text("direct_url.json")
    except metadata.PackageNotFoundError:
        return None
    if not text:
        return None
    try:
        record = json.loads(text)
    except ValueError:
        return None
    url = str(record.get("url", ""))
    vcs = record.get("vcs_info") or {}
    if vcs.get("vcs") == "git" and url and not url.startswith("file:"):
        commit = vcs.get("commit_id") or vcs.get("requested_revision")
        return f"pytest-ipcbench{extra} @ git+{url}" + (f"@{commit}" if commit else "")
    if url.startswith(("https://", "http://")) and "archive_info" in record:
        return f"pytest-ipcbench{extra} @ {url}"
    return None


def ignore_lines(project_dir: str = "", asv: bool = False) -> list[str]:
    """The .gitignore lines (at the top of the repository) for what the gate and asv write."""
    prefix = "/" + (project_dir.strip("/") + "/" if project_dir.strip("/") else "")
    return ["/" + GATE_CACHE] + ([prefix + ASV_FOLDER] if asv else [])


def add_ignores(gitignore: Path, lines: list[str]) -> list[str]:
    """Append the lines that ``gitignore`` lacks (made if missing); the lines added."""
    have = gitignore.read_text().splitlines() if gitignore.exists() else []
    missing = [ln for ln in lines if ln not in have and ln.lstrip("/") not in have]
    if missing:
        text = "\n".join(have)
        text = (text + "\n" if text else "") + "# written by `ipcbench init-ci`: the gate's environments and asv's results\n"
        gitignore.write_text(text + "\n".join(missing) + "\n")
    return missing


def _project_name(pyproject: Path) -> str:
    from ..core.project import tomllib

    try:
        return str(tomllib.loads(pyproject.read_text()).get("project", {}).get("name", ""))
    except (OSError, tomllib.TOMLDecodeError):
        return ""


def render_workflow(install: str = DEFAULT_INSTALL, python: str = DEFAULT_PYTHON, project_dir: str = "",
                    gate_args: str = "") -> str:
    """The perf-gate workflow; ``project_dir`` is the project's folder in its repository ("" or "sub/")."""
    if '"' in install or "\n" in install:
        raise UsageError(f"the install spec may not hold quotes or new lines: {install!r}")
    if PLACEHOLDER in install:
        raise UsageError(f"the install spec holds the placeholder OWNER: {install!r}; give the real git URL "
                         "(--install 'pytest-ipcbench[mpi] @ git+https://HOST/ACCOUNT/pytest-ipcbench@TAG') or a wheel's URL")
    if not re.fullmatch(r"3\.\d+", python):
        raise UsageError(f"bad Python version {python!r} (e.g. 3.12)")
    project_dir = project_dir.strip("/") + "/" if project_dir.strip("/") else ""
    kind = "a wheel" if install.endswith(".whl") else "git" if "git+" in install else f"'{install}'"
    return WORKFLOW.format(install=install, python=python, project_dir=project_dir, install_kind=kind,
                           working_directory=project_dir.rstrip("/") or ".",
                           gate_args=f" {gate_args}" if gate_args else "")


def write_files(root: Path, workflow: str | None = DEFAULT_WORKFLOW, install: str = DEFAULT_INSTALL,
                python: str = DEFAULT_PYTHON, asv: bool = False, force: bool = False,
                project_dir: str = "") -> list[Written]:
    """Write the workflow (relative to ``root``, the repository's top) and, ``asv``, the asv suite
    (in the project's folder); an existing file is kept unless ``force``."""
    project = root / project_dir
    pyproject = project / "pyproject.toml"
    if not pyproject.is_file():
        raise FileNotFoundError(f"no pyproject.toml in {project}: run `ipcbench init-ci` in the project")
    todo: list[tuple[Path, str, str]] = []
    if workflow:
        todo.append((root / workflow, render_workflow(install, python, project_dir), "perf gate workflow"))
    if asv:
        conf = dict(ASV_CONF, project=_project_name(pyproject) or project.name)
        # pytest-ipcbench is not on PyPI: every asv environment installs it first, then the project
        conf["install_command"] = [f'in-dir={{env_dir}} python -m pip install "{install}"',
                                   "in-dir={env_dir} python -m pip install {wheel_file}"]
        todo.append((project / "asv.conf.json", json.dumps(conf, indent=2) + "\n", "asv configuration"))
        todo.append((project / "benchmarks" / "bench_ipcbench.py", ASV_MODULE, "asv suite"))
        init = project / "benchmarks" / "__init__.py"
        if not init.exists():
            todo.append((init, "", "asv benchmark package"))
    existing = [p for p, _, _ in todo if p.exists() and p.name != "__init__.py"]
    if existing and not force:
        raise FileExistsError(f"{', '.join(map(str, existing))} exist(s); --force overwrites")
    out = []
    for path, text, what in todo:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        out.append(Written(path, what))
    added = add_ignores(root / ".gitignore", ignore_lines(project_dir, asv))
    if added:
        out.append(Written(root / ".gitignore", f"ignores {', '.join(added)}: the gate's environments and "
                                                 f"asv's results, hundreds of MB"))
    return out
