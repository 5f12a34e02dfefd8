"""The gate in another project: measure what the project declares, with the same pytest-ipcbench.

Each side measures the ``[tool.ipcbench]`` matrix of its own pyproject.toml, installed into a venv
that sees the gate's packages: pytest-ipcbench, numpy, mpi4py and MPI are the same for both sides,
so a difference is the project's. A base without the table has nothing to compare with (exit 2, or
0 with ``--skip-unadopted-base``, which the workflow of ``ipcbench init-ci`` gives).
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import sysconfig
from dataclasses import dataclass
from pathlib import Path

from ..comparison.verdict import GateError
from ..core.project import ProjectConfig, ipcbench_table, parse_table, tomllib

SELF = "pytest-ipcbench"


def canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


@dataclass(frozen=True)
class Declared:
    """One side's pyproject.toml: the project's name, its dependencies, its declared matrix."""

    text: str | None  # None: no pyproject.toml at this side
    name: str = ""
    dependencies: tuple[str, ...] = ()
    config: ProjectConfig | None = None

    @property
    def is_self(self) -> bool:
        return canonical(self.name) == SELF


def declared(text: str | None, where: str) -> Declared:
    """Parse one side's pyproject.toml (``where`` names it in errors)."""
    if text is None:
        return Declared(None)
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise GateError(f"{where} is not valid TOML: {exc}") from None
    project = data.get("project", {}) if isinstance(data.get("project"), dict) else {}
    try:
        table = ipcbench_table(data, where)
        config = None if table is None else parse_table(table, Path(where))
    except ValueError as exc:
        raise GateError(str(exc)) from None
    return Declared(text, str(project.get("name", "")), tuple(project.get("dependencies", ()) or ()), config)


def read_declared(repo: Path, prefix: str, commit: str | None, tree: Path | None, label: str) -> Declared:
    """A side's pyproject.toml, from its working folder (``tree``: the project's own folder) or
    from its commit (at ``prefix``, the project's folder in the repository)."""
    if tree is not None:
        path = tree / "pyproject.toml"
        return declared(path.read_text() if path.is_file() else None, f"{label}: {path}")
    spec = f"{commit}:{prefix}pyproject.toml"
    proc = subprocess.run(["git", "-C", str(repo), "show", spec], capture_output=True, text=True)
    return declared(proc.stdout if proc.returncode == 0 else None, f"{label}: {prefix}pyproject.toml")


def unadopted_message(side_name: str, label: str, prefix: str) -> str:
    return (
        f"{side_name} {label} predates the adoption of pytest-ipcbench: its {prefix}pyproject.toml has no "
        f"[tool.ipcbench] table, so it declares nothing to measure and there is nothing to compare the head with. "
        f"This is expected on the pull request that adopts it; the gate measures every later one. To gate "
        f"anyway, choose a base that has the table (e.g. `git log -1 --format=%h -S'[tool.ipcbench]' -- "
        f"{prefix}pyproject.toml`), or pass --skip-unadopted-base to exit 0 with this notice"
    )


def no_matrix_message(label: str, prefix: str) -> str:
    return (
        f"head {label} declares nothing to measure: add a [tool.ipcbench] table to {prefix}pyproject.toml naming "
        f"the backends, payloads, sizes and scenarios to gate (see docs/performance-history.md), or run the gate "
        f"in pytest-ipcbench's own repository"
    )


def dependencies_besides_us(decl: Declared) -> list[str]:
    """The project's dependencies except pytest-ipcbench (that one is the gate's own, shared)."""
    return [req for req in decl.dependencies
            if canonical(re.split(r"[\s\[<>=!~;@(]", req.strip(), maxsplit=1)[0]) != SELF]


def self_location() -> Path:
    """Where this pytest_ipcbench is imported from: both sides must import the same one."""
    return Path(__file__).resolve().parents[1]  # gate/ is one floor inside the package


def probe_install(python: Path, project: str, env: dict[str, str], cwd: Path) -> tuple[Path | None, Path | None, str]:
    """(pytest_ipcbench's folder, the project's distribution folder, error text) as seen by ``python``."""
    code = (
        "import importlib.metadata as m, pathlib, pytest_ipcbench\n"
        "print(pathlib.Path(pytest_ipcbench.__file__).resolve().parent)\n"
        f"d = m.distribution({project!r})\n"
        "print(pathlib.Path(str(d.locate_file(''))).resolve())\n"
    )
    proc = subprocess.run([str(python), "-c", code], capture_output=True, text=True, env=env, cwd=cwd, timeout=120)
    lines = proc.stdout.split("\n")
    if proc.returncode != 0 or len(lines) < 2:
        return None, None, proc.stderr.strip()[-500:]
    return Path(lines[0]), Path(lines[1]), ""


SHARE_PTH = "_ipcbench_gate_shared.pth"


def share_packages(python: Path) -> Path:
    """Make the gate's own site-packages visible to the venv of ``python``, after its own: a
    ``.pth`` file of ``site.addsitedir`` lines (``--system-site-packages`` would show the base
    interpreter's, not the gate's environment's, editable installs included)."""
    ours = dict.fromkeys(sysconfig.get_paths()[key] for key in ("purelib", "platlib"))
    probe = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                           capture_output=True, text=True, check=True, timeout=60)
    site_dir = Path(probe.stdout.strip())
    pth = site_dir / SHARE_PTH
    pth.write_text("".join(f"import site; site.addsitedir({p!r})\n" for p in ours))
    # the mpich wheel keeps libmpi in the environment's lib/, where mpi4py looks for it (under
    # sys.prefix): show the gate's there too
    lib = Path(sys.prefix) / "lib"
    side_lib = site_dir.parents[1]  # <venv>/lib/pythonX.Y/site-packages -> <venv>/lib
    for item in sorted(lib.glob("libmpi*")) + sorted(lib.glob("mpich*")) if lib.is_dir() else ():
        link = side_lib / item.name
        if not link.exists() and not link.is_symlink():
            link.symlink_to(item)
    return pth


def run_command(python: Path) -> list[str]:
    """``ipcbench run`` of a side: the shared pytest_ipcbench, under the side's Python."""
    return [str(python), "-m", "pytest_ipcbench", "run"]


def build_requirements(source: Path) -> list[str]:
    """``[build-system] requires`` of the project at ``source`` (setuptools' default when absent)."""
    path = source / "pyproject.toml"
    try:
        data = tomllib.loads(path.read_text())
    except (OSError, tomllib.TOMLDecodeError):
        return []
    requires = data.get("build-system", {}).get("requires")
    return [str(r) for r in requires] if isinstance(requires, list) else ["setuptools>=40.8.0"]


def missing_build_requirements(source: Path, python: Path, env: dict[str, str]) -> list[str]:
    """The build requirements of ``source`` that ``python``'s environment does not satisfy."""
    reqs = build_requirements(source)
    if not reqs:
        return []
    code = (
        "import sys, importlib.metadata as m\n"
        "from packaging.requirements import Requirement\n"
        "for line in sys.argv[1:]:\n"
        "    r = Requirement(line)\n"
        "    try:\n"
        "        v = m.version(r.name)\n"
        "    except m.PackageNotFoundError:\n"
        "        print(line); continue\n"
        "    if r.specifier and not r.specifier.contains(v, prereleases=True):\n"
        "        print(f'{line} (has {v})')\n"
    )
    proc = subprocess.run([str(python), "-c", code, *reqs], capture_output=True, text=True, env=env, timeout=120)
    if proc.returncode != 0:  # no packaging there: name them all
        return reqs
    return [line for line in proc.stdout.splitlines() if line.strip()]


#: Environment variables that differ between the sides by design (each side's own venv).
SIDE_VARIABLES = ("PATH", "VIRTUAL_ENV", "IPCBENCH_INJECT")


def side_record(python: Path, env: dict[str, str], cwd: Path, project: str | None) -> dict[str, object]:
    """What a side runs on: the interpreter, pip, the installed distributions (the project's
    version left out: it is what is compared), the environment's variables (values of the ones
    that differ by design left out) and the length of the environment (it moves stack alignment)."""
    code = (
        "import sys, json, platform, importlib.metadata as m\n"
        "d = sorted({(x.metadata['Name'] or '?').lower(): x.version for x in m.distributions()}.items())\n"
        "print(json.dumps({'python': sys.version, 'implementation': platform.python_implementation(),\n"
        "                  'distributions': d}))\n"
    )
    proc = subprocess.run([str(python), "-c", code], capture_output=True, text=True, env=env, cwd=cwd, timeout=120)
    if proc.returncode != 0:
        return {"error": proc.stderr.strip()[-300:]}
    data = json.loads(proc.stdout)
    skip = canonical(project) if project else None
    data["distributions"] = {n: v for n, v in data["distributions"] if canonical(n) != skip}
    data["environment"] = {k: ("(side's own)" if k in SIDE_VARIABLES else v) for k, v in sorted(env.items())}
    data["environment_size"] = sum(len(k) + len(v) + 2 for k, v in env.items() if k != "IPCBENCH_INJECT")
    return data


def record_differences(base: dict[str, object], head: dict[str, object]) -> tuple[list[str], list[str]]:
    """(differences that make the sides unequal: refuse; differences of installed distributions:
    say so -- a pull request may change a dependency on purpose)."""
    refuse, notes = [], []
    for key in ("python", "implementation", "environment_size", "error"):
        if base.get(key) != head.get(key):
            refuse.append(f"{key}: base {str(base.get(key))[:80]!r}, head {str(head.get(key))[:80]!r}")
    eb, eh = base.get("environment") or {}, head.get("environment") or {}
    assert isinstance(eb, dict) and isinstance(eh, dict)
    for k in sorted(eb.keys() | eh.keys()):
        if eb.get(k) != eh.get(k):
            refuse.append(f"environment variable {k}: base {str(eb.get(k))[:60]!r}, head {str(eh.get(k))[:60]!r}")
    db, dh = base.get("distributions") or {}, head.get("distributions") or {}
    assert isinstance(db, dict) and isinstance(dh, dict)
    for k in sorted(db.keys() | dh.keys()):
        if db.get(k) != dh.get(k):
            notes.append(f"{k} {db.get(k) or '(none)'} at base, {dh.get(k) or '(none)'} at head")
    return refuse, notes
