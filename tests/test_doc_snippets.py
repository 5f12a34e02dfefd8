"""The documentation's runnable snippets, run as a user runs them: every ```python block that
follows a ``<!-- snippet: NAME -->`` line in README.md or docs/*.md is written to NAME in a fresh
project folder (no conftest of ours) and run with ``pytest NAME`` in a subprocess."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from pytest_ipcbench.core.group import in_mpi_job

ROOT = Path(__file__).parents[1]
_SNIPPET = re.compile(r"<!-- snippet: (\S+)[^>]*-->\s*\n```python\n(.*?)```", re.S)
pytestmark = pytest.mark.skipif(in_mpi_job(), reason="runs pytest in a subprocess: not inside an MPI job")


def snippets() -> list[tuple[str, str, str]]:
    """(document, file name, code) of every marked snippet."""
    found = []
    for doc in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        for name, code in _SNIPPET.findall(doc.read_text()):
            found.append((doc.relative_to(ROOT).as_posix(), name, code))
    return found


def test_the_snippets_are_found() -> None:
    names = {name for doc, name, _ in snippets() if doc == "README.md"}
    # the first result, latency from a test, a cost asserted from counters
    assert {"test_first.py", "test_latency.py", "test_costs.py"} <= names, names


@pytest.mark.timeout(600)
@pytest.mark.parametrize("doc, name, code", snippets(), ids=[f"{d}:{n}" for d, n, _ in snippets()])
def test_a_documented_snippet_runs(pytester: pytest.Pytester, doc: str, name: str, code: str) -> None:
    path = pytester.path / name
    path.write_text(code)
    if name.startswith("test_"):
        result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-rs", name, timeout=500)
        assert result.ret == 0, f"{doc}: {name}\n" + result.stdout.str()[-4000:] + result.stderr.str()[-2000:]
        outcomes = result.parseoutcomes()
        assert outcomes.get("passed", 0) >= 1 and not outcomes.get("skipped"), result.stdout.str()[-3000:]
    else:
        result = pytester.run(__import__("sys").executable, name, timeout=500)
        assert result.ret == 0, f"{doc}: {name}\n" + result.stdout.str()[-4000:] + result.stderr.str()[-2000:]
