"""A project's declared matrix: the ``[tool.ipcbench]`` table of its pyproject.toml (docs/options.md).

Every key is optional and an option of ``ipcbench run``'s table (core/options.py: RUN), checked
as its flag is; the command line overrides it. A file without the table declares nothing (None),
which the gate reports as "predates the adoption".
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

from .case_rules import KEYS as RULE_KEYS, CaseRules, parse_rules
from .checks import OptionError
from .errors import FileMissing, UsageError
from .options import RUN, TABLE, table_values, toml_text


class ProjectFileError(UsageError):
    """A pyproject.toml that cannot be read or parsed (names the file)."""

#: payloads of the scenarios that do not take a declared one (ping-pong and stream move bytes,
#: granularity a tiny object): ``payloads`` adds them, ``kinds`` (the run option as it is) does not
FIXED_KINDS = {"buffer": ("pingpong", "stream"), "tiny": ("granularity",)}

#: table key -> RunOptions field: derived from ``ipcbench run``'s option table (core/options.py)
KEYS: dict[str, str] = {opt.key: opt.field for opt in RUN if opt.key}


@dataclass(frozen=True)
class ProjectConfig:
    """The declared matrix of one project: RunOptions field -> value, and where it came from."""

    path: Path
    options: dict[str, Any] = field(default_factory=dict)
    table: dict[str, Any] = field(default_factory=dict)
    rules: CaseRules = field(default_factory=CaseRules)  # per-case thresholds and waivers (core/case_rules.py)

    def describe(self) -> str:
        keys = ", ".join(f"{k} = {v!r}" for k, v in self.table.items())
        return f"{self.path} {TABLE}: {keys or '(empty: the defaults)'}"


def parse_table(table: Any, path: Path) -> ProjectConfig:
    """The table's values as RunOptions fields; ValueError naming the file and key of a bad one."""
    if not isinstance(table, dict):
        raise OptionError(f"{TABLE} in {path}", f"must be a table, got {toml_text(table)}")
    if "payloads" in table and "kinds" in table:
        raise OptionError(f"{TABLE} in {path}", "has both payloads and kinds; keep one")
    options: dict[str, Any] = {"no_extras": True}  # a project measures its own matrix, not our extras
    rules = parse_rules(table, f"{TABLE} in {path}")  # what compare and the gate decide by, not the matrix
    options.update(table_values({k: v for k, v in table.items() if k not in RULE_KEYS}, path, RUN))
    if "payloads" in table:  # the broadcast payloads; ping-pong, stream, granularity keep their own
        scenarios = options.get("scenarios")
        fixed = [k for k, scenario in FIXED_KINDS.items()
                 if k not in options["kinds"] and (scenarios is None or set(scenario) & set(scenarios))]
        options["kinds"] = [*options["kinds"], *fixed]
    return ProjectConfig(path, options, dict(table), rules)


def read_config(path: str | Path) -> ProjectConfig | None:
    """The ``[tool.ipcbench]`` table of a pyproject.toml (None when the file has none)."""
    path = Path(path)
    try:
        data = tomllib.loads(path.read_text())
    except FileNotFoundError:
        raise FileMissing(f"no such file: {path}") from None
    except OSError as exc:
        raise ProjectFileError(f"cannot read {path}: {exc.strerror or exc}") from None
    except tomllib.TOMLDecodeError as exc:
        raise ProjectFileError(f"{path} is not valid TOML: {exc}") from None
    table = ipcbench_table(data, path)
    return None if table is None else parse_table(table, path)


def ipcbench_table(data: dict[str, Any], path: str | Path) -> Any:
    """``data["tool"]["ipcbench"]`` of a parsed pyproject.toml, None when absent; an error naming
    the file when ``tool`` is not a table (``tool = 1``)."""
    tool = data.get("tool", {})
    if not isinstance(tool, dict):
        raise OptionError(f"tool = {toml_text(tool)} in {path}", "must be a table ([tool] or [tool.ipcbench])")
    return tool.get("ipcbench")


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


def declared_rules(start: Path | None = None) -> CaseRules:
    """The per-case thresholds and waivers of the project around ``start`` (none: no rules), every
    waiver checked against today's date (RuleError naming an expired one: exit 2)."""
    config = discover(start)
    rules = config.rules if config is not None else CaseRules()
    rules.check_expiry()
    return rules
