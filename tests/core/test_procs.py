"""``core.procs.others_busy``: the CPU other processes took while a measurement ran."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from pytest_ipcbench.core import procs
from pytest_ipcbench.core.procs import _tree_cpu_ticks, cpu_mark, others_busy

SPIN = "import time\nend = time.monotonic() + 1.5\nwhile time.monotonic() < end: pass"


@pytest.mark.skipif(cpu_mark() is None, reason="no /proc/stat here")
def test_a_process_that_is_not_ours_and_spins_is_counted(monkeypatch: pytest.MonkeyPatch) -> None:
    """A spinner outside our process tree is someone else's job; while it runs it takes a whole
    CPU, or less only because other jobs take the rest: either way the share that is not ours
    reaches a CPU's worth of the machine, less the measurement's edges. (An orphan cannot stand in
    for it: the session may be a child subreaper, which adopts it; so our tree is made empty.)"""
    monkeypatch.setattr(procs, "_tree_cpu_ticks", lambda: 0)
    spinner = subprocess.Popen([sys.executable, "-c", SPIN])
    try:
        time.sleep(0.3)  # its interpreter is up
        mark = cpu_mark()
        time.sleep(1.0)
        share = others_busy(mark)
    finally:
        spinner.wait(timeout=30)
    assert share is not None and share >= 0.6 / (os.cpu_count() or 1), share


@pytest.mark.skipif(cpu_mark() is None, reason="no /proc/stat here")
def test_our_own_live_child_is_ours() -> None:
    """A rank still running (a live child) is part of the measurement, not a competitor: the CPU
    it uses while alive is counted in our tree (before it is reaped, which os.times would need)."""
    spinner = subprocess.Popen([sys.executable, "-c", SPIN])
    try:
        time.sleep(0.3)
        before = _tree_cpu_ticks()
        time.sleep(1.0)
        grew = _tree_cpu_ticks() - before
    finally:
        spinner.wait(timeout=30)
    assert grew >= 1, "a spinning child used no CPU our tree could see"


def test_no_mark_no_share() -> None:
    assert others_busy(None) is None
