"""The documents count the built-in backends as pyproject.toml declares them (issue 39: "eight
backends" beside a list of nine). README.md is checked by its own owner's tests; docs/ here."""

from __future__ import annotations

import re
from pathlib import Path

import tomllib

ROOT = Path(__file__).parents[2]
WORDS = {w: n for n, w in enumerate("zero one two three four five six seven eight nine ten eleven twelve".split())}
# "its nine built-ins", "all nine backends", "pytest-ipcbench's nine backends" (not "mpi (four backends)")
_COUNT = re.compile(r"\b(?:its|all|the|our|pytest-ipcbench's)\s+(" + "|".join(WORDS) + r")\s+(?:built-in\s+)?(?:backends|built-ins)\b",
                    re.I)


def test_the_docs_count_the_declared_backends() -> None:
    declared = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["entry-points"]["pytest_ipcbench.backends"]
    wrong = []
    for doc in sorted((ROOT / "docs").glob("*.md")):
        for number, line in enumerate(doc.read_text().splitlines(), 1):
            for m in _COUNT.finditer(line):
                if WORDS[m.group(1).lower()] != len(declared):
                    wrong.append(f"{doc.name}:{number}: {m.group(0)!r}")
    assert not wrong, f"pyproject.toml declares {len(declared)} backends: " + "; ".join(wrong)
