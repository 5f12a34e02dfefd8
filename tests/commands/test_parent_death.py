"""A command killed with SIGKILL takes the processes it started with it (issue 42): calibrate's
``ipcbench run`` child, a gate's round."""

from __future__ import annotations

import glob
import os
import signal
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

import pytest

from pytest_ipcbench.core import names, procs
from pytest_ipcbench.core.group import in_mpi_job

pytestmark = pytest.mark.skipif(in_mpi_job(), reason="starts its own processes: not inside an MPI job")
MAIN = "import sys; from pytest_ipcbench.commands import main; sys.exit(main(sys.argv[1:]))"
TINY = "--quick --no-mpi --no-extras --scenarios broadcast --backends shm --kinds tiny --modes bytes --ranks 2 " \
       "--time-budget 600 --no-config"


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def _running(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False


def _gone_within(pids: set[int], seconds: float) -> set[int]:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        alive = {p for p in pids if _running(p)}
        if not alive:
            return set()
        time.sleep(0.1)
    return alive


def _kill_left(pids: set[int]) -> None:
    for p in pids:
        try:
            os.kill(p, signal.SIGKILL)
        except ProcessLookupError:
            pass


def test_calibrate_killed_takes_its_run_child_with_it(tmp_path: Path) -> None:
    calibrate = subprocess.Popen([sys.executable, "-c", MAIN, "calibrate", "--runs", "3", "--run-args", TINY,
                                  "--out", str(tmp_path / "c.json")], cwd=tmp_path, stdout=subprocess.DEVNULL,
                                 stderr=subprocess.DEVNULL, start_new_session=True)
    below: set[int] = set()
    try:
        deadline = time.monotonic() + 120
        # the run has claimed its folder (a SIGTERM while Python starts up runs no cleanup at all;
        # `ipcbench clean` takes what is left then)
        while time.monotonic() < deadline and not glob.glob(f"{tempfile.gettempdir()}/ipcb-{calibrate.pid}n*-calibrate/"
                                                              "aa-01/.ipcbench.lock"):
            time.sleep(0.1)
        below = set(procs.children_tree(calibrate.pid))
        assert below, "calibrate started no run"
        calibrate.kill()
        calibrate.wait()
        left = _gone_within(below, 15)
        assert left == set(), [_cmdline(p) for p in left]
    finally:
        calibrate.kill()
        _kill_left(set(procs.children_tree(calibrate.pid)) | below)
        # the run removes calibrate's scratch folder on its way out; under heavy load it was once
        # still there at the leak check: `ipcbench clean` takes it (its owner is dead), as here
        for item in names.find_ours(pid=calibrate.pid):
            names.remove(item.path)


ROUND = textwrap.dedent("""
    import sys
    from pathlib import Path
    from pytest_ipcbench.gate.gate_sides import _run_logged
    _run_logged([sys.executable, "-c", "import time; time.sleep(120)"], Path(sys.argv[1]), 300)
""")


def test_a_gate_killed_mid_round_takes_the_round_with_it(tmp_path: Path) -> None:
    gate = subprocess.Popen([sys.executable, "-c", ROUND, str(tmp_path / "gate.log")], start_new_session=True)
    round_pid = None
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and round_pid is None:
            round_pid = next((p for p in procs.children_tree(gate.pid) if "time.sleep(120)" in _cmdline(p)), None)
            time.sleep(0.05)
        assert round_pid is not None
        gate.kill()
        gate.wait()
        assert _gone_within({round_pid}, 10) == set()
    finally:
        gate.kill()
        if round_pid is not None:
            _kill_left({round_pid})
