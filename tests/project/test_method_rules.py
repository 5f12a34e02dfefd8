"""The measurement rules the code cites ("docs/method.md rule 18") are in the repository, and every
rule cited exists there."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CITE = re.compile(r"method\.md(?:\]\(method\.md\))? rules? (\d+)(?:\s*(?:-|and)\s*(\d+))?")


def _sources() -> list[Path]:
    return [p for d in ("pytest_ipcbench", "tests", "benchmarks", "tools", "docs") for p in (ROOT / d).rglob("*")
            if p.suffix in (".py", ".md") and p.name != "test_method_rules.py"]


def test_every_cited_rule_is_in_docs_method_md() -> None:
    rules = {int(n) for n in re.findall(r"^(\d+)\. \*\*", (ROOT / "docs" / "method.md").read_text(), re.M)}
    assert rules == set(range(1, len(rules) + 1)) and len(rules) >= 19
    cited, missing = 0, []
    for path in _sources():
        for lineno, line in enumerate(path.read_text().splitlines(), 1):
            for first, last in CITE.findall(line):
                cited += 1
                wanted = range(int(first), int(last or first) + 1)
                missing += [f"{path.relative_to(ROOT)}:{lineno}: rule {n}" for n in wanted if n not in rules]
    assert cited >= 20 and not missing, missing


def test_nothing_cites_a_file_outside_the_repository() -> None:
    outside = [f"{p.relative_to(ROOT)}:{i}" for p in _sources()
               for i, line in enumerate(p.read_text().splitlines(), 1) if re.search(r"\bMETHOD(\.md| rule)", line)]
    assert not outside, outside
