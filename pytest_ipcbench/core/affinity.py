"""Pinning a rank to one CPU while a case runs (``pin = core``).

When ranks outnumber cores (4 ranks on 2), the kernel decides afresh in every run which ranks
share a core, and a broadcast's figures follow that choice: the same case reads one way in one
run and another way in the next. Pinned, the node's ranks sit round-robin on the CPUs this
process may use (node rank ``i`` on the ``i % n``-th), the same way in every run, as
``mpiexec -bind-to core`` places them; each rank pins itself, so it works in plain mode and under
any launcher. The old affinity comes back when the case ends.
"""

from __future__ import annotations

import os
from contextlib import contextmanager
from typing import Iterator

PIN_MODES = ("none", "core")


@contextmanager
def pinned(slot: int, mode: str = "core") -> Iterator[int | None]:
    """Pin this process to the ``slot % n``-th of its allowed CPUs while inside; yields the CPU
    (None when not pinned: ``mode`` none, or no affinity call on this OS)."""
    if mode not in PIN_MODES:
        raise ValueError(f"pin must be one of {', '.join(PIN_MODES)}, not {mode!r}")
    getter = getattr(os, "sched_getaffinity", None)
    if mode == "none" or getter is None:
        yield None
        return
    before = getter(0)
    cpu = sorted(before)[slot % len(before)]
    os.sched_setaffinity(0, {cpu})
    try:
        yield cpu
    finally:
        os.sched_setaffinity(0, before)
