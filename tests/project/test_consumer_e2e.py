"""A fresh consumer project end to end (tools/consumer_e2e.py): slow (a fresh venv, installs, every
step a user runs), so it runs when asked: ``IPCBENCH_CONSUMER_E2E=1 pytest tests/project/test_consumer_e2e.py``
or ``python tools/consumer_e2e.py``. Once, never inside an MPI job."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from pytest_ipcbench.core.group import in_mpi_job

ROOT = Path(__file__).parents[2]


@pytest.mark.skipif(in_mpi_job(), reason="installs and runs a project: once, not on every MPI rank")
@pytest.mark.skipif(os.environ.get("IPCBENCH_CONSUMER_E2E") != "1",
                    reason="slow (a fresh venv and every step a user runs): IPCBENCH_CONSUMER_E2E=1 to run it")
def test_a_fresh_consumer_with_three_transports_passes_every_step() -> None:
    proc = subprocess.run([sys.executable, str(ROOT / "tools" / "consumer_e2e.py")], capture_output=True, text=True,
                          timeout=3600)
    assert proc.returncode == 0, proc.stdout[-6000:] + proc.stderr[-2000:]
    assert proc.stdout.rstrip().endswith("all steps passed, nothing left behind")
