"""The option tables of README.md and docs/options.md, generated from the option declarations.

``python tools/options_doc.py`` prints what is stale; ``--write`` rewrites the generated blocks
(between ``<!-- options:NAME -->`` and ``<!-- /options:NAME -->``). ``tests/project/test_options_doc.py``
fails when a block differs from what the declarations give, so a new option reaches the docs in
the same commit. Sources: ``plugin/settings.PYTEST_OPTIONS`` (pytest), ``core/options.RUN``
(``ipcbench run`` and ``[tool.ipcbench]``) and each command's table (``commands/*.py``).
"""

from __future__ import annotations

import re
import sys
from collections.abc import Iterable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BLOCK = re.compile(r"(<!-- options:(?P<name>[\w-]+) -->\n)(?P<body>.*?)(<!-- /options:(?P=name) -->)", re.S)


def _cell(text: str) -> str:
    return " ".join(str(text).split()).replace("|", "\\|")


def _default(value: object) -> str:
    if value is None or value == "":
        return ""
    if isinstance(value, (tuple, list)):
        return ",".join(map(str, value))
    if isinstance(value, bool):
        return "yes" if value else "no"
    return str(value)


def pytest_table() -> str:
    """The plugin's options: flag, ini key, environment variable, what it does."""
    from pytest_ipcbench.plugin.settings import PYTEST_OPTIONS

    rows = ["| flag | ini key | environment | what it sets |", "|---|---|---|---|"]
    for o in PYTEST_OPTIONS:
        rows.append(f"| `{o.flag}` | `{o.ini}` | `{o.env}` | {_cell(o.help)} |")
    return "\n".join(rows) + "\n"


def run_table() -> str:
    """``ipcbench run``'s options: flag, ``[tool.ipcbench]`` key, what it does (one row per field)."""
    from pytest_ipcbench.core.options import RUN

    by_field: dict[str, list] = {}
    for o in RUN:
        by_field.setdefault(o.field, []).append(o)
    rows = ["| flag | `[tool.ipcbench]` key | what it sets |", "|---|---|---|"]
    for options in by_field.values():
        flags = ", ".join(f"`{o.flag}`" for o in options if o.flag) or "-"
        keys = ", ".join(f"`{o.key}`" for o in options if o.key) or "-"
        helps = _cell(next(o.help for o in options if o.help))
        rows.append(f"| {flags} | {keys} | {helps} |")
    return "\n".join(rows) + "\n"


def command_table(module: str, table: str) -> callable:
    """A command's own options (compare, gate, calibrate, ...): flag, what it sets."""
    def make() -> str:
        import importlib

        rows = ["| flag | what it sets |", "|---|---|"]
        for o in getattr(importlib.import_module(f"pytest_ipcbench.commands.{module}"), table):
            rows.append(f"| `{o.flag}` | {_cell(o.help.replace('%%', '%'))} |")
        return "\n".join(rows) + "\n"

    return make


TABLES = {"pytest": pytest_table, "run": run_table, "compare": command_table("compare", "DECISION"),
          "gate": command_table("gate", "GATE"), "calibrate": command_table("calibrate", "CALIBRATE"),
          "selfcheck": command_table("selfcheck", "SELFCHECK"), "comment": command_table("comment", "COMMENT"),
          "clean": command_table("clean", "CLEAN")}
FILES = (ROOT / "README.md", ROOT / "docs" / "options.md")


def regenerate(text: str) -> str:
    """``text`` with every generated block replaced by what the declarations give now."""
    return BLOCK.sub(lambda m: m.group(1) + TABLES[m.group("name")]() + m.group(4), text)


def stale(files: Iterable[Path] = FILES) -> list[Path]:
    return [f for f in files if f.exists() and regenerate(f.read_text()) != f.read_text()]


def main(argv: list[str]) -> int:
    if "--write" in argv:
        for f in FILES:
            f.write_text(regenerate(f.read_text()))
        return 0
    old = stale()
    for f in old:
        print(f"{f.relative_to(ROOT)}: the option table is stale (python tools/options_doc.py --write)")
    return 1 if old else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
