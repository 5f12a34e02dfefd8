"""A project's declared matrix: the ``[tool.ipcbench]`` table of its pyproject.toml.

Another project declares what ``ipcbench run``, ``ipcbench gate`` and the asv suite measure::

    [tool.ipcbench]
    backends = ["fifo", "shm"]         # its own backend (an entry point) and a built-in to compare with
    modes = ["bytes", "native"]
    payloads = ["records", "ndarray"]  # broadcast payload kinds (ping-pong, stream: bytes as always)
    sizes = ["1KB", "1MB"]
    scenarios = ["broadcast", "pingpong"]
    ranks = 2
    level = "quick"                    # quick | default | full: settings and default sizes
    only = ["*fifo*"]                  # label patterns (see ipcbench run --list)
    extras = false                     # seed 004's MPI methods and seed 002 (default: off here)
    time-budget = 0.2                  # seconds of timed iterations per case
    case-timeout = 120

Every key is optional; the command line overrides the table key by key. Names are checked by
:class:`~..runner.job.RunOptions` against the registry (built-ins and plugins), so a typo is an error
that names the file. A file without the table declares nothing (None), which the gate reports as
"predates the adoption".
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

from .units import parse_size

TABLE = "[tool.ipcbench]"
#: payloads of the scenarios that do not take a declared one (ping-pong and stream move bytes,
#: granularity a tiny object): ``payloads`` adds them, ``kinds`` (the run option as it is) does not
FIXED_KINDS = {"buffer": ("pingpong", "stream"), "tiny": ("granularity",)}

#: table key -> (RunOptions field, what it must be)
KEYS: dict[str, tuple[str, str]] = {
    "backends": ("backends", "names"),
    "modes": ("modes", "names"),
    "payloads": ("kinds", "names"),
    "kinds": ("kinds", "names"),
    "sizes": ("sizes", "sizes"),
    "scenarios": ("scenarios", "names"),
    "ranks": ("ranks", "int"),
    "level": ("level", "str"),
    "only": ("only", "names"),
    "extras": ("no_extras", "not-bool"),
    "time-budget": ("time_budget", "float"),
    "case-timeout": ("case_timeout", "float"),
}


@dataclass(frozen=True)
class ProjectConfig:
    """The declared matrix of one project: RunOptions field -> value, and where it came from."""

    path: Path
    options: dict[str, Any] = field(default_factory=dict)
    table: dict[str, Any] = field(default_factory=dict)

    def describe(self) -> str:
        keys = ", ".join(f"{k} = {v!r}" for k, v in self.table.items())
        return f"{self.path} {TABLE}: {keys or '(empty: the defaults)'}"


def _names(value: Any, where: str) -> list[str]:
    if isinstance(value, str):
        value = [v for v in value.split(",")]
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ValueError(f"{where}: expected a list of names (e.g. [\"shm\", \"fifo\"]), got {value!r}")
    names = [v.strip() for v in value if v.strip()]
    if not names:
        raise ValueError(f"{where}: the list is empty")
    return names


def _convert(key: str, kind: str, value: Any, where: str) -> Any:
    if kind == "names":
        return _names(value, where)
    if kind == "sizes":
        items = value if isinstance(value, list) else [value]
        out = []
        for item in items:
            try:
                size = item if isinstance(item, int) and not isinstance(item, bool) else parse_size(str(item))
            except ValueError:
                raise ValueError(f"{where}: bad size {item!r} (e.g. \"1KB\", \"1MB\" or a number of bytes)") from None
            if size <= 0:
                raise ValueError(f"{where}: bad size {item!r} (must be more than 0 bytes)")
            out.append(int(size))
        if not out:
            raise ValueError(f"{where}: the list is empty")
        return out
    if kind == "int":
        if not isinstance(value, int) or isinstance(value, bool):
            raise ValueError(f"{where}: expected a whole number, got {value!r}")
        return value
    if kind == "float":
        if not isinstance(value, (int, float)) or isinstance(value, bool) or value <= 0:
            raise ValueError(f"{where}: expected a number of seconds above 0, got {value!r}")
        return float(value)
    if kind == "str":
        if not isinstance(value, str):
            raise ValueError(f"{where}: expected a string, got {value!r}")
        return value
    if kind == "not-bool":
        if not isinstance(value, bool):
            raise ValueError(f"{where}: expected true or false, got {value!r}")
        return not value
    raise AssertionError(kind)


def parse_table(table: Any, path: Path) -> ProjectConfig:
    """The table's values as RunOptions fields; ValueError naming the file and key of a bad one."""
    if not isinstance(table, dict):
        raise ValueError(f"{path}: {TABLE} must be a table, got {type(table).__name__}")
    unknown = sorted(set(table) - set(KEYS))
    if unknown:
        raise ValueError(f"{path}: unknown key(s) {', '.join(unknown)} in {TABLE}; known: {', '.join(KEYS)}")
    if "payloads" in table and "kinds" in table:
        raise ValueError(f"{path}: {TABLE} has both payloads and kinds; keep one")
    options: dict[str, Any] = {"no_extras": True}  # a project measures its own matrix, not our seeds
    for key, value in table.items():
        name, kind = KEYS[key]
        options[name] = _convert(key, kind, value, f"{path}: {TABLE} {key}")
    if "payloads" in table:  # the broadcast payloads; ping-pong, stream, granularity keep their own
        scenarios = options.get("scenarios")
        fixed = [k for k, scenario in FIXED_KINDS.items()
                 if k not in options["kinds"] and (scenarios is None or set(scenario) & set(scenarios))]
        options["kinds"] = [*options["kinds"], *fixed]
    return ProjectConfig(path, options, dict(table))


def read_config(path: str | Path) -> ProjectConfig | None:
    """The ``[tool.ipcbench]`` table of a pyproject.toml (None when the file has none)."""
    path = Path(path)
    try:
        data = tomllib.loads(path.read_text())
    except FileNotFoundError:
        raise FileNotFoundError(f"no such file: {path}") from None
    except tomllib.TOMLDecodeError as exc:
        raise ValueError(f"{path} is not valid TOML: {exc}") from None
    table = data.get("tool", {}).get("ipcbench")
    return None if table is None else parse_table(table, path)


def find_pyproject(start: Path | None = None) -> Path | None:
    """The nearest pyproject.toml from ``start`` (default: the current folder) upwards."""
    here = (start or Path.cwd()).resolve()
    for folder in (here, *here.parents):
        candidate = folder / "pyproject.toml"
        if candidate.is_file():
            return candidate
        if (folder / ".git").exists():  # the top of a repository: no further
            return None
    return None


def discover(start: Path | None = None) -> ProjectConfig | None:
    """The declared matrix of the project around ``start`` (None: no pyproject.toml, or no table)."""
    path = find_pyproject(start)
    return read_config(path) if path is not None else None
