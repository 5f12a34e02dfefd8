"""``core.procs.others_busy``: the CPU other processes took while a measurement ran."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from pytest_ipcbench.core.procs import cpu_mark, others_busy

SPIN = "import time\nend = time.monotonic() + 1.5\nwhile time.monotonic() < end: pass"


@pytest.mark.skipif(cpu_mark() is None, reason="no /proc/stat here")
def test_a_process_that_is_not_ours_and_spins_is_counted() -> None:
    """A spinner we have not reaped is, for the accounting, someone else's job; while it runs it
    takes a whole CPU, or less only because other jobs take the rest: either way the share that is
    not ours reaches a CPU's worth of the machine, less the measurement's edges."""
    spinner = subprocess.Popen([sys.executable, "-c", SPIN])
    try:
        time.sleep(0.3)  # its interpreter is up
        mark = cpu_mark()
        time.sleep(1.0)
        share = others_busy(mark)
    finally:
        spinner.wait(timeout=30)
    assert share is not None and share >= 0.6 / (os.cpu_count() or 1), share


def test_no_mark_no_share() -> None:
    assert others_busy(None) is None
