"""``ipcbench run`` times a backend in the processes it declares (``Backend.process_model``): a
plugin that does not use MPI in plain local workers (an MPI runtime in the process disturbed it:
45-48 us against 26-27 us), and ``--list`` labels each case where it will run, ``--no-mpi`` too."""

from __future__ import annotations

import inspect
import json
import os
import subprocess
import sys
from pathlib import Path

import plugin_support  # tests/ is on sys.path (rootdir conftest, no package)
import pytest

from pytest_ipcbench.backends.base import Backend, ExtensionError, get_backend
from pytest_ipcbench.core.group import in_mpi_job
from pytest_ipcbench.core.procs import find_mpiexec

pytestmark = pytest.mark.skipif(in_mpi_job(), reason="starts its own processes: not inside an MPI job")

PLUGIN = """\
import sys

from storeplugin import FileStore


class NoMPIStore(FileStore):
    '''Refuses to be timed in a process where MPI is loaded: what the issue measured went wrong.'''
    name = "nompistore"

    def setup(self):
        if "mpi4py.MPI" in sys.modules:
            raise RuntimeError("nompistore timed inside an MPI process")
        super().setup()


class MPIStore(FileStore):
    name = "mpistore"
    run_in = "mpi"
"""


def _plugin_env(tmp_path: Path) -> dict[str, str]:
    site = tmp_path / "site"
    dist = site / "ipcbench_model_plugin-1.0.dist-info"
    dist.mkdir(parents=True)
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: ipcbench-model-plugin\nVersion: 1.0\n")
    (dist / "entry_points.txt").write_text("[pytest_ipcbench.backends]\nnompistore = modelplugin:NoMPIStore\n"
                                           "mpistore = modelplugin:MPIStore\n")
    (site / "storeplugin.py").write_text(inspect.getsource(plugin_support))
    (site / "modelplugin.py").write_text(PLUGIN)
    return {**os.environ, "PYTHONPATH": str(site)}


def _run(args: list[str], env: dict[str, str], cwd: Path, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "pytest_ipcbench", "run", *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=timeout)


def test_each_backend_declares_its_process_model() -> None:
    assert {n: get_backend(n).process_model() for n in ("shm", "lmdb", "zmq", "mp-queue", "mpi-p2p")} == {
        "shm": "mpi", "lmdb": "mpi", "zmq": "mpi", "mp-queue": "local", "mpi-p2p": "mpi"}

    class Plain(Backend):
        name, delivery = "plain", "channel"

    class Odd(Plain):
        run_in = "threads"

    assert Plain.process_model() == "local"  # a plugin that needs no MPI: plain processes
    with pytest.raises(ExtensionError, match="run_in must be 'mpi' or 'local', not 'threads'"):
        Odd.process_model()


def test_list_labels_each_case_where_it_runs(tmp_path: Path) -> None:
    env = _plugin_env(tmp_path)
    common = ["--quick", "--scenarios", "pingpong", "--sizes", "1KB", "--modes", "bytes", "--list"]
    got = _run([*common, "--backends", "nompistore,mpistore,shm"], env, tmp_path)
    assert got.returncode == 0, got.stdout + got.stderr
    labels = {line.split()[2]: line.split()[0] for line in got.stdout.splitlines() if " pingpong " in f" {line} "}
    assert labels == {"nompistore/bytes": "local", "mpistore/bytes": "mpi", "shm/bytes": "mpi"}, got.stdout
    got = _run([*common, "--backends", "nompistore,shm", "--no-mpi"], env, tmp_path)
    assert got.returncode == 0, got.stdout + got.stderr
    assert [line.split()[0] for line in got.stdout.splitlines() if "pingpong" in line] == ["local", "local"], got.stdout


@pytest.mark.skipif(find_mpiexec() is None, reason="no mpiexec (install pytest-ipcbench[mpi])")
@pytest.mark.timeout(600)
def test_a_plugin_without_mpi_is_timed_in_plain_processes(tmp_path: Path) -> None:
    """The only plain-phase ``ipcbench run`` with its extras on (the MPI transfer methods, the
    shared-array experiment): they run beside the local case, on 2 ranks (the case's own r2; 4
    ranks on 2 cores cost twice the CPU), and their results land in the file."""
    env = _plugin_env(tmp_path)
    out = tmp_path / "out"
    got = _run(["--quick", "--ranks", "2", "--backends", "nompistore", "--scenarios", "pingpong", "--sizes", "1KB",
                "--modes", "bytes", "--progress", "plain", "--results-only", "--out", str(out)], env, tmp_path,
               timeout=500)
    assert got.returncode == 0, got.stdout[-3000:] + got.stderr[-3000:]
    results = json.loads((out / "results.json").read_text())["results"]
    case = [r for r in results if r["backend"] == "nompistore"]
    assert len(case) == 1 and case[0]["scenario"] == "pingpong", results
    assert "ok   MPI transfer methods" in got.stdout and "ok   shared arrays:" in got.stdout, got.stdout[-3000:]
    assert {"mpi-method", "shared-array", "shared-array-handle"} <= {r["scenario"] for r in results}, results
