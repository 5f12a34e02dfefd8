"""The option tables of README.md and docs/options.md are the ones the declarations give
(``tools/options_doc.py``): a new or changed option reaches the docs in the same commit."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _tool():
    spec = importlib.util.spec_from_file_location("options_doc", ROOT / "tools" / "options_doc.py")
    assert spec is not None and spec.loader is not None
    module = sys.modules["options_doc"] = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_generated_option_tables_are_current() -> None:
    tool = _tool()
    assert not tool.stale(), "run: python tools/options_doc.py --write"


def test_every_declared_option_is_in_the_docs() -> None:
    from pytest_ipcbench.core.options import RUN
    from pytest_ipcbench.plugin.settings import PYTEST_OPTIONS

    readme = (ROOT / "README.md").read_text()
    options = (ROOT / "docs" / "options.md").read_text()
    assert "<!-- options:pytest -->" in readme and "<!-- options:run -->" in options
    assert all(f"`{o.flag}`" in readme for o in PYTEST_OPTIONS)
    assert all(f"`{o.flag}`" in options for o in RUN if o.flag)
    assert all(f"`{o.key}`" in options for o in RUN if o.key)


def test_a_stale_table_is_found(tmp_path: Path) -> None:
    tool = _tool()
    doc = tmp_path / "doc.md"
    doc.write_text("<!-- options:pytest -->\n| old |\n<!-- /options:pytest -->\n")
    assert tool.stale([doc]) == [doc]
    doc.write_text(tool.regenerate(doc.read_text()))
    assert tool.stale([doc]) == []
