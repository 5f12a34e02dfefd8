"""The README's own ``ipcbench selfcheck``, run the way the README writes it: no arguments, the
installed ``ipcbench`` script, in a folder of a new user's (it writes ``ipcbench-selfcheck/``).

Slow for a unit test (a bare selfcheck is the quick check: every backend against its reference at 1 B,
64 KiB and 16 MiB), minutes under load."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from pytest_ipcbench.core.group import in_mpi_job
from pytest_ipcbench.core.procs import find_mpiexec

pytestmark = pytest.mark.skipif(in_mpi_job(), reason="starts its own MPI job: not inside one")
IPCBENCH = Path(sys.executable).with_name("ipcbench")


def test_readme_says_the_command_as_this_test_runs_it() -> None:
    from test_readme_commands import readme_commands  # tests/commands is on sys.path (rootdir conftest)

    readme = (Path(__file__).parents[2] / "README.md").read_text()
    assert "`ipcbench selfcheck` holds the harness" in " ".join(readme.split())
    assert "ipcbench selfcheck" in readme_commands(readme)  # shown as a command, with no arguments


@pytest.mark.alone  # holds the harness to 15% of mpi4py.bench: under load it can only skip
@pytest.mark.skipif(find_mpiexec() is None, reason="no mpiexec (install pytest-ipcbench[mpi])")
@pytest.mark.timeout(1500)
def test_ipcbench_selfcheck_as_the_readme_writes_it_passes(tmp_path: Path) -> None:
    """The issue: it exited 1 with ``ValueError: the stream scenario keeps a window of values;
    mpi-shm-win's native values are views ...`` on a fresh machine."""
    proc = subprocess.run([str(IPCBENCH), "selfcheck"], cwd=tmp_path, capture_output=True, text=True, timeout=1400)
    out = proc.stdout + proc.stderr
    assert "Traceback" not in out and "problem:" not in proc.stdout, out[-6000:]
    assert proc.returncode in (0, 1), out[-6000:]
    # every backend has its rows, mpi-shm-win's stream in bytes mode, said so
    assert re.search(r"^stream +\d +mpi-shm-win +bytes ", proc.stdout, re.M), proc.stdout[-6000:]
    assert "note: mpi-shm-win: stream timed in bytes mode" in proc.stdout
    reports = list((tmp_path / "ipcbench-selfcheck").glob("*/summary.md"))
    assert len(reports) == 1
    if proc.returncode == 1:
        # the harness held to 15% against mpi4py.bench: a figure outside it is the machine's load,
        # said in the output ("busy"); on a quiet machine the command must pass
        assert "OUTSIDE" in proc.stdout.split("every backend against its reference")[0], out[-6000:]
        if "busy: other jobs share the cores" in proc.stdout:
            pytest.skip("a harness figure outside 15% on a busy machine: " + proc.stdout.splitlines()[3])
        # one figure against mpi4py.bench can miss 15% on a quiet machine too (16 MiB bandwidth read
        # -19.7% once in a fresh clone's make test): ask the harness checks alone once more
        again = subprocess.run([str(IPCBENCH), "selfcheck", "--backends", "none"], cwd=tmp_path,
                               capture_output=True, text=True, timeout=600)
        if again.returncode != 0:
            pytest.fail("ipcbench selfcheck exited 1 on a quiet machine, twice:\n" + proc.stdout[:3000]
                        + "\n--- again:\n" + again.stdout[:3000])
