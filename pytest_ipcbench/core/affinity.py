"""Pinning a rank to one CPU while a case runs (``pin``: auto, the default, core or none).

When ranks outnumber cores the kernel decides afresh in every run which ranks share a core, and
a broadcast's figures follow that choice (rule 23). Pinned, the node's ranks sit round-robin on
the CPUs this process may use (node rank ``i`` on the ``i % n``-th), as ``mpiexec -bind-to core``
places them; each rank pins itself (any launcher, plain mode too) and gets its old affinity back
when the case ends. ``auto`` pins when the node's ranks outnumber the CPUs a rank may use
(figures: docs/measurements/2026-11-harness.md). A rank a launcher bound to one CPU stays on it.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager

PIN_MODES = ("auto", "core", "none")


@contextmanager
def pinned(slot: int, mode: str = "core", ranks_here: int = 0) -> Iterator[int | None]:
    """Pin this process to the ``slot % n``-th of its allowed CPUs while inside; yields the CPU
    (None when not pinned: ``none``; ``auto`` with ``ranks_here`` (the node's ranks) no more than
    the allowed CPUs; no affinity call on this OS)."""
    if mode not in PIN_MODES:
        raise ValueError(f"pin must be one of {', '.join(PIN_MODES)}, not {mode!r}")
    getter = getattr(os, "sched_getaffinity", None)
    before = getter(0) if getter is not None else set()
    if mode == "none" or getter is None or (mode == "auto" and ranks_here <= len(before)):
        yield None
        return
    cpu = sorted(before)[slot % len(before)]
    os.sched_setaffinity(0, {cpu})
    try:
        yield cpu
    finally:
        os.sched_setaffinity(0, before)
