"""Files another project needs to adopt the gate and the asv history: written by ``ipcbench init-ci``.

The workflows of :mod:`.workflows`; with ``--asv``, ``asv.conf.json`` and the suite of
:mod:`..runner.asv_suite`; the .gitignore lines. pytest-ipcbench is not on PyPI: every file installs
it from the one spec given (``--install``), or from where the running one was installed from.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlparse

from ..core.errors import UsageError
from ..core.project import tomllib
from . import workflows

DEFAULT_WORKFLOW = ".github/workflows/perf-gate.yml"
DEFAULT_PYTHON = "3.12"

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
(a git URL, a wheel or a checkout: it is not on PyPI). `asv run`, `asv continuous main HEAD`, `asv publish`.
"""

from pytest_ipcbench.runner.asv_suite import *  # noqa: F401,F403 (Declared: one benchmark per declared case, setup_cache)
'''


#: what pytest-ipcbench writes into a project (the gate's environments and asv's: hundreds of MB;
#: run and selfcheck reports): never to be committed
WRITTEN_FOLDERS = (".ipcbench-gate/", "ipcbench-results/", "ipcbench-selfcheck/")
ASV_FOLDER = ".asv/"
PLACEHOLDER = "/OWNER/"
_URL = re.compile(r"(git\+)?[a-z][a-z0-9+.-]*://\S+", re.I)


@dataclass(frozen=True)
class Written:
    path: Path
    what: str


@dataclass(frozen=True)
class Install:
    """How pytest-ipcbench is installed: ``ci`` in the workflows (None: CI cannot reach it),
    ``asv`` in asv.conf.json (run on this machine or in CI), ``kind`` in words."""

    ci: str | None
    asv: str
    kind: str


def installed_spec(extra: str = "[mpi]") -> str | None:
    """Where the pytest-ipcbench that runs here was installed from, from its install record (PEP
    610): ``pytest-ipcbench[mpi] @ git+URL@COMMIT`` for a git install, ``... @ URL`` for a wheel or
    an archive fetched by URL, the local folder or file it came from; None when unknown (PyPI)."""
    try:
        record = json.loads(metadata.distribution("pytest-ipcbench").read_text("direct_url.json") or "")
    except (metadata.PackageNotFoundError, ValueError):  # not installed, no record, a broken one
        return None
    url = str(record.get("url", ""))
    vcs = record.get("vcs_info") or {}
    if url.startswith("file:"):
        return unquote(urlparse(url).path)
    if vcs.get("vcs") == "git" and url:
        commit = vcs.get("commit_id") or vcs.get("requested_revision")
        return f"pytest-ipcbench{extra} @ git+{url}" + (f"@{commit}" if commit else "")
    if url.startswith(("https://", "http://")) and "archive_info" in record:
        return f"pytest-ipcbench{extra} @ {url}"
    return None


def resolve_install(spec: str, root: Path, project: Path, extra: str = "[mpi]") -> Install:
    """What the workflows and asv.conf.json install for ``spec``: a requirement with a URL
    (``pytest-ipcbench[mpi] @ git+https://...``), a git URL, a wheel's URL, or a local checkout
    or wheel. A local one inside the repository is installed from the checkout in CI too; one
    outside it serves asv on this machine only (``ci`` None). UsageError for what cannot work."""
    spec = spec.strip()
    if not spec or '"' in spec or "\n" in spec:
        raise UsageError(f"--install {spec!r}: expected a git URL, a wheel (URL or path) or a local checkout")
    if PLACEHOLDER in spec:
        raise UsageError(f"--install {spec!r} holds the placeholder OWNER: give the real git URL "
                         "(--install git+https://HOST/ACCOUNT/pytest-ipcbench@TAG), a wheel or a local checkout")
    if " @ " in spec:  # a requirement with its URL: as it is
        return Install(spec, spec, "git" if "git+" in spec else "a URL")
    if _URL.fullmatch(spec):
        url = spec if spec.startswith("git+") or spec.lower().endswith((".whl", ".zip", ".tar.gz")) else f"git+{spec}"
        req = f"pytest-ipcbench{extra} @ {url}"
        return Install(req, req, "git" if url.startswith("git+") else "a URL")
    path = Path(spec).expanduser().resolve()
    if not path.exists():
        raise UsageError(f"--install {spec}: no such folder or wheel (expected a git URL, a wheel or a local checkout)")
    if path.is_dir() and not (path / "pyproject.toml").is_file():
        raise UsageError(f"--install {spec}: {path} has no pyproject.toml: not a checkout of pytest-ipcbench")
    if path.is_file() and path.suffix != ".whl":
        raise UsageError(f"--install {spec}: expected a wheel (.whl), a folder or a URL")
    try:
        in_repo = path.relative_to(root.resolve()).as_posix()
    except ValueError:
        return Install(None, f"{path}{extra}", f"{path} (this machine)")
    from_project = os.path.relpath(path, project.resolve())
    return Install(f"./{in_repo}{extra}" if in_repo != "." else f".{extra}",
                   f"{{conf_dir}}/{from_project}{extra}", f"./{in_repo} in the repository")


def ignore_lines(project_dir: str = "", asv: bool = False) -> list[str]:
    """The .gitignore lines (at the top of the repository) for what pytest-ipcbench writes: the
    gate's cache at the top, run and selfcheck reports and asv's folder in the project."""
    prefix = "/" + (project_dir.strip("/") + "/" if project_dir.strip("/") else "")
    folders = ["/" + WRITTEN_FOLDERS[0]] + [prefix + f for f in WRITTEN_FOLDERS[1:]]
    return folders + ([prefix + ASV_FOLDER] if asv else [])


def add_ignores(gitignore: Path, lines: list[str]) -> list[str]:
    """Append the lines that ``gitignore`` lacks (made if missing); the lines added."""
    have = gitignore.read_text().splitlines() if gitignore.exists() else []
    missing = [ln for ln in lines if ln not in have and ln.lstrip("/") not in have]
    if missing:
        text = "\n".join(have)
        text = (text + "\n" if text else "") + "# written by `ipcbench init-ci`: what pytest-ipcbench writes here\n"
        gitignore.write_text(text + "\n".join(missing) + "\n")
    return missing


def _project_name(pyproject: Path) -> str:
    try:
        return str(tomllib.loads(pyproject.read_text()).get("project", {}).get("name", ""))
    except (OSError, tomllib.TOMLDecodeError):
        return ""


def default_branch(root: Path) -> str:
    """origin's default branch (refs/remotes/origin/HEAD), else ``main``."""
    proc = subprocess.run(["git", "-C", str(root), "symbolic-ref", "--short", "refs/remotes/origin/HEAD"],
                          capture_output=True, text=True)
    name = proc.stdout.strip().split("/", 1)[-1] if proc.returncode == 0 else ""
    return name if re.fullmatch(r"[A-Za-z0-9._/-]+", name) else "main"


def render_workflows(install: Install, python: str = DEFAULT_PYTHON, project_dir: str = "", gate_args: str = "",
                     asv: bool = False, branch: str = "main") -> dict[str, str]:
    """{file name: text} of the workflows, the gate's first; ``project_dir`` is "" or "sub/"."""
    if install.ci is None:
        raise UsageError(f"CI cannot install pytest-ipcbench from {install.asv.removesuffix('[mpi]')} (a folder "
                         "outside this repository): give --install a git URL (git+https://HOST/ACCOUNT/"
                         "pytest-ipcbench@TAG), a wheel's URL or a wheel committed in the repository; "
                         "or --no-workflow to write the asv files only")
    if not re.fullmatch(r"3\.\d+", python):
        raise UsageError(f"bad Python version {python!r} (e.g. 3.12)")
    project_dir = project_dir.strip("/") + "/" if project_dir.strip("/") else ""
    local = install.ci.startswith(".")
    common: dict[str, Any] = dict(install=install.ci, install_kind=install.kind, python=python, project_dir=project_dir)
    out = {"gate": workflows.render(workflows.GATE, gate_args=gate_args, **common),
           workflows.COMMENT_FILE: workflows.render(workflows.COMMENT, checkout=local, **common)}
    if asv:
        out[workflows.ASV_FILE] = workflows.render(workflows.ASV, branch=branch, **common)
    return out


def write_files(root: Path, workflow: str | None, install: str, python: str = DEFAULT_PYTHON, asv: bool = False,
                force: bool = False, project_dir: str = "") -> list[Written]:
    """Write the workflows (the gate's at ``workflow``, relative to ``root``, the repository's top;
    the others beside it) and, ``asv``, the asv suite (in the project's folder); an existing file is
    kept unless ``force``. UsageError (nothing written) for what cannot work."""
    project = root / project_dir
    pyproject = project / "pyproject.toml"
    if not pyproject.is_file():
        raise UsageError(f"no pyproject.toml in {project}: run `ipcbench init-ci` in the folder of your project's "
                         "pyproject.toml (its [tool.ipcbench] table declares what CI measures)")
    spec = resolve_install(install, root, project)
    todo: list[tuple[Path, str, str]] = []
    if workflow:
        texts = render_workflows(spec, python, project_dir, asv=asv, branch=default_branch(root))
        gate_path = root / workflow
        todo.append((gate_path, texts.pop("gate"), "perf gate workflow (pull_request)"))
        for name, text in texts.items():
            what = (
                "its pull request comment (workflow_run)" if "comment" in name else "asv history to GitHub Pages (push)"
            )
            todo.append((gate_path.with_name(name), text, what))
    if asv:
        conf = dict(ASV_CONF, project=_project_name(pyproject) or project.name)
        # pytest-ipcbench first in every asv environment (the spec given to init-ci), then the project
        conf["install_command"] = [f'in-dir={{env_dir}} python -m pip install "{spec.asv}"',
                                   "in-dir={env_dir} python -m pip install {wheel_file}"]
        todo.append((project / "asv.conf.json", json.dumps(conf, indent=2) + "\n", "asv configuration"))
        todo.append((project / "benchmarks" / "bench_ipcbench.py", ASV_MODULE, "asv suite"))
        init = project / "benchmarks" / "__init__.py"
        if not init.exists():
            todo.append((init, "", "asv benchmark package"))
    existing = [p for p, _, _ in todo if p.exists() and p.name != "__init__.py"]
    if existing and not force:
        raise UsageError(f"{', '.join(map(str, existing))} exist(s); --force overwrites")
    out = []
    for path, text, what in todo:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        out.append(Written(path, what))
    added = add_ignores(root / ".gitignore", ignore_lines(project_dir, asv))
    if added:
        out.append(Written(root / ".gitignore", f"ignores {', '.join(added)}: what pytest-ipcbench writes "
                                                 "(the gate's environments and asv's: hundreds of MB)"))
    return out
