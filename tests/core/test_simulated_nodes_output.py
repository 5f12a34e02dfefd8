"""``make test``'s phase on 2 simulated nodes prints no UCX warnings: the Makefile's
``SIMULATED_NODES`` environment, over the conformance timeout checks that leave an Ibcast MPI
cannot cancel (UCX listed them at exit as ``UCX WARN ... not returned to mpool``)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from pytest_ipcbench.core.group import in_mpi_job

ROOT = Path(__file__).parents[2]
MPIEXEC = Path(sys.executable).with_name("mpiexec")
pytestmark = [pytest.mark.skipif(in_mpi_job(), reason="starts its own MPI job: not inside one"),
              pytest.mark.skipif(not MPIEXEC.exists(), reason=f"no mpiexec next to {sys.executable}")]


def _makefile_environment() -> dict[str, str]:
    line = next(ln for ln in (ROOT / "Makefile").read_text().splitlines() if ln.startswith("SIMULATED_NODES :="))
    return dict(re.findall(r"(\w+)=(\S+)", line.split(":=", 1)[1]))


@pytest.mark.timeout(600)
def test_the_simulated_nodes_phase_prints_no_ucx_warnings() -> None:
    env_vars = _makefile_environment()
    assert env_vars["MPIR_CVAR_NUM_CLIQUES"] == "2" and env_vars["UCX_LOG_LEVEL"] == "error"
    proc = subprocess.run(
        [str(MPIEXEC), "-n", "4", sys.executable, "-m", "pytest", "--with-mpi", "-m", "mpi", "-q", "-p",
         "no:cacheprovider", "tests/backends/test_conformance.py", "-k", "times_out and (lmdb or shm)"],
        cwd=ROOT, env={**os.environ, **env_vars}, capture_output=True, text=True, timeout=500,
    )
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0 and " passed" in proc.stdout, out[-4000:]
    assert "UCX" not in out.replace("ch4:ucx", ""), out[-4000:]
