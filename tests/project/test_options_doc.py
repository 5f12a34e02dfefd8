"""docs/options.md is generated from the option tables and kept current; a new option is one entry."""

from __future__ import annotations

from pathlib import Path

from pytest_ipcbench.commands.options import TABLES, markdown

DOC = Path(__file__).resolve().parents[2] / "docs" / "options.md"


def test_docs_options_md_is_what_ipcbench_options_prints() -> None:
    assert DOC.read_text() == markdown() + "\n", "regenerate: ipcbench options --markdown > docs/options.md"


def test_every_flag_env_and_ini_key_is_declared_once() -> None:
    for title, options in TABLES:
        for attr in ("flag", "env", "ini"):
            given = [getattr(o, attr) for o in options if getattr(o, attr)]
            assert len(given) == len(set(given)), (title, attr)
