"""Compare the counters of two results files case by case (comparison/counters.counter_changes).

    .venv/bin/python tools/counter_compare.py BASE/results.json HEAD/results.json

Prints every case whose counters changed, in words, and a last line with how many cases and
counters were compared and how many changed: verdicts (exact counters that changed; a growth fails
compare and the gate) and notes (statistical). Two runs of identical code must show no verdict
(docs/method.md rule 22; tools/counter_aa.py compares every pair of many runs). Exit code 1 when an
exact counter changed.
"""

from __future__ import annotations

import argparse
import sys

from pytest_ipcbench.comparison.counters import counter_changes, explain
from pytest_ipcbench.results.results import ResultSet


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("base")
    parser.add_argument("head")
    args = parser.parse_args()
    base, head = ResultSet.load(args.base).by_key(), ResultSet.load(args.head).by_key()
    cases = counters = exact_changes = statistical_changes = 0
    for key in sorted(set(base) & set(head)):
        b, h = base[key], head[key]
        if b.counters is None or h.counters is None:
            continue
        cases += 1
        counters += sum(1 for r in b.counters.ranks for n in r.totals if n not in r.absent)
        changes = counter_changes(b, h)
        exact_changes += sum(c.exact for c in changes)
        statistical_changes += sum(not c.exact for c in changes)
        for line in explain(changes, h.nbytes):
            print(f"{key}: {line}")
    print(f"{cases} cases, {counters} rank counters compared: {exact_changes} exact changes (verdicts), "
          f"{statistical_changes} notes")
    return 1 if exact_changes else 0


if __name__ == "__main__":
    sys.exit(main())
