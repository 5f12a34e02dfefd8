"""Deep mode in ``ipcbench run``: after the timed run, valgrind's counters for the chosen cases."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any

from ..core.counters import Counters
from ..harness.deep import DeepCase, deep_counters, merge as merge_deep
from ..harness.measure import PAIR_SCENARIOS
from ..results.results import Result
from .matrix import Case


def deep_phase(cases: Sequence[Case], results: Sequence[Result], fail: Callable[[str, str], None],
           log: Callable[[str], None]) -> dict[str, Counters]:
    """Deep mode's counters (harness/deep.py) for the results of the chosen cases, by key (the
    run record puts them in when it builds the results); a failed deep run is ``fail``ed."""
    merged: dict[str, Counters] = {}
    for c in cases:
        found = [r for r in results if (r.scenario, r.backend, r.mode, r.payload, r.size) ==
                 (c.scenario, c.backend, c.mode, c.payload_kind, c.size) and not r.variant]
        if not found:
            log(f"deep {c.label}: no result to add to (the case failed or was skipped)")
            continue
        ranks = 2 if c.scenario in PAIR_SCENARIOS else c.ranks
        t0 = time.monotonic()
        print(f"deep {c.label}: under valgrind ...", flush=True)
        try:
            deep = deep_counters(DeepCase(c.backend, c.mode, c.payload_kind, c.size, c.scenario, ranks))
        except Exception as exc:  # a failed deep run fails that case's deep counters, not the run
            fail(f"deep {c.label}", str(exc))
            continue
        for r in found:
            merged[r.key] = merge_deep(r.counters, deep)
        absent = sorted({why for x in deep.ranks for why in x.absent.values()})
        log(f"deep {c.label}: {time.monotonic() - t0:.0f} s" + (f"; absent: {absent[0]}" if absent else ""))
        print(f"deep {c.label}: {time.monotonic() - t0:.0f} s " + (f"(absent: {absent[0]})" if absent else " | ".join(
            f"{x.role} {x.rank}: copied {_deep_cell(x, 'copied.bytes')} B, {_deep_cell(x, 'instructions')} instr"
            for x in deep.ranks)), flush=True)
    return merged


def _deep_cell(rank: Any, name: str) -> str:
    """A deep counter per message for the terminal: plain if exact, ``~`` if the repeats differed."""
    if not rank.has(name):
        return "n/a"
    value = rank.value(name)
    text = f"{value:,.0f}" if isinstance(value, (int, float)) else str(value)
    return text if rank.exact(name) else "~" + text
