"""A killed launcher (issue 24, item 2): SIGKILL of ``ipcbench run`` itself, or of ``mpiexec`` while
the ranks run, ends the job and leaves nothing of it within seconds: no process, none of our
resources, no ``mpich_shm_*`` segment, no Hydra topology file.

Before the ranks' reapers watched their launchers, killing ``ipcbench run`` left the job's MPICH
segment and Hydra's file behind, and a rank with nothing to print ran on with nobody to end it.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import leakguard  # tests/ is on sys.path (rootdir conftest, no package)
import pytest

from pytest_ipcbench.core import names, procs
from pytest_ipcbench.core.group import in_mpi_job

pytestmark = pytest.mark.skipif(in_mpi_job(), reason="starts its own processes: not inside an MPI job")
MPIEXEC = procs.find_mpiexec()
MAIN = "import sys; from pytest_ipcbench.commands import main; sys.exit(main(sys.argv[1:]))"
BOUND = 20.0  # seconds from the kill until nothing of the job may be left


class Job:
    """What one MPI job below ``root`` is made of, recorded while it runs."""

    def __init__(self, root: int) -> None:
        self.root = root
        self.pids: dict[int, str] = {}  # every process below root: mpiexec, proxy, ranks, reapers
        self.ranks: set[int] = set()
        self.files: set[Path] = set()  # MPICH segments the ranks map, Hydra's file the proxy holds

    def look(self) -> None:
        for pid in procs.children_tree(self.root):
            # the latest name: mpiexec is started through setpriv (core/launcher.py), and a look
            # before its exec sees "setpriv"
            self.pids[pid] = procs.comm(pid) or self.pids.get(pid, "")
            if procs.comm(pid).startswith("hydra_pmi_prox"):
                self.files |= set(procs.open_files(pid, "hydra_hwloc_xmlfile_"))
                for rank in procs.children(pid):
                    self.ranks.add(rank)
                    self.files |= set(procs.mapped_files(rank, "/dev/shm/mpich_shm_"))

    def ours(self) -> list[Path]:
        return [item.path for pid in self.ranks for item in names.find_ours(pid=pid)]

    def ready(self) -> bool:
        """Mid-run: ranks with resources of ours and MPICH segments."""
        return bool(self.ours()) and any(f.name.startswith("mpich_shm_") for f in self.files)

    def reapers_up(self) -> bool:
        """A python child of each rank (its reaper)."""
        return all(any(procs.comm(c).startswith("python") for c in procs.children(r)) for r in self.ranks)

    def left(self) -> list[str]:
        return ([f"process {p} ({c})" for p, c in self.pids.items() if procs.running(p)]
                + [str(p) for p in self.ours()] + [str(f) for f in self.files if f.exists()])

    def wait_gone(self, bound: float) -> tuple[float, list[str]]:
        t0 = time.monotonic()
        while time.monotonic() - t0 < bound and self.left():
            self.look()  # ranks still starting make their segments now
            time.sleep(0.1)
        return time.monotonic() - t0, self.left()

    def scrub(self) -> None:
        """Never left behind by the test itself, whatever failed."""
        for pid in self.pids:
            if procs.running(pid):
                try:
                    os.kill(pid, signal.SIGKILL)
                except OSError:
                    pass
        time.sleep(0.5)
        for path in [*self.ours(), *self.files, *self.pytest_temp()]:
            if path.exists():
                names.remove(path)

    def pytest_temp(self) -> list[Path]:
        """The temp folders of the job's pytest ranks (``pytest-N``, its ``.lock`` their pid): a
        killed session never runs its retention policy, so the test that killed it removes them."""
        roots = leakguard._pytest_roots()
        found = []
        for root in roots:
            for folder in root.glob("pytest-*"):
                try:
                    if int((folder / ".lock").read_text()) in self.pids:
                        found.append(folder)
                except (OSError, ValueError):
                    continue
        return found


def _wait_ready(job: Job, proc: subprocess.Popen, limit: float = 90) -> None:
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline and proc.poll() is None:
        job.look()
        if job.ready():
            up = time.monotonic() + 3  # every rank's reaper (none before they existed), every segment
            while time.monotonic() < up and not job.reapers_up():
                time.sleep(0.05)
            time.sleep(0.3)
            job.look()
            return
        time.sleep(0.05)
    raise AssertionError("the MPI job never got going")


def _run_cmd(out: Path) -> list[str]:
    return [sys.executable, "-c", MAIN, "run", "--quick", "--no-extras", "--scenarios", "broadcast", "--backends",
            "lmdb,zmq,shm", "--kinds", "ndarray", "--modes", "bytes", "--ranks", "3", "--sizes", "1MB",
            "--time-budget", "3", "--progress", "none", "--out", str(out)]


@pytest.mark.skipif(MPIEXEC is None, reason="no mpiexec")
def test_ipcbench_run_killed_while_its_ranks_start_leaves_nothing_of_its_job(tmp_path: Path) -> None:
    """Killed before the ranks' reapers are up: a reaper that starts after its launcher is gone
    (no pidfd to open any more) ends its rank at once."""
    pytest.importorskip("mpi4py")
    log = (tmp_path / "stderr").open("w+")
    run = subprocess.Popen(_run_cmd(tmp_path / "out"), stdout=subprocess.DEVNULL, stderr=log, start_new_session=True)
    job = Job(run.pid)
    try:
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline and run.poll() is None and not job.ranks:
            job.look()
            time.sleep(0.01)
        assert job.ranks, "the MPI job never started"
        os.kill(run.pid, signal.SIGKILL)
        took, left = job.wait_gone(BOUND)
        log.seek(0)
        assert left == [], f"after {took:.1f} s still {left}\n" + log.read()[-3000:]
    finally:
        if run.poll() is None:
            os.killpg(run.pid, signal.SIGKILL)
        run.wait()
        job.scrub()


@pytest.mark.skipif(MPIEXEC is None, reason="no mpiexec")
@pytest.mark.parametrize("victim", ["ipcbench run", "mpiexec"])
def test_a_killed_launcher_of_ipcbench_run_leaves_nothing_of_its_job(tmp_path: Path, victim: str) -> None:
    pytest.importorskip("mpi4py")
    log = (tmp_path / "stderr").open("w+")
    run = subprocess.Popen(_run_cmd(tmp_path / "out"), stdout=subprocess.DEVNULL, stderr=log, start_new_session=True)
    job = Job(run.pid)
    try:
        _wait_ready(job, run)
        target = run.pid if victim == "ipcbench run" else next(p for p, c in job.pids.items() if c == "mpiexec")
        os.kill(target, signal.SIGKILL)
        took, left = job.wait_gone(BOUND)
        log.seek(0)
        assert left == [], f"{victim} killed: after {took:.1f} s still {left}\n" + log.read()[-3000:]
        if victim == "mpiexec":  # ipcbench run lives on: it says the job ended and goes on
            assert run.wait(timeout=240) is not None
            log.seek(0)
            assert "ipcbench: the MPI job's" in log.read()
    finally:
        if run.poll() is None:
            os.killpg(run.pid, signal.SIGKILL)
        run.wait()
        job.scrub()


SLEEPER = textwrap.dedent("""
    import time
    from mpi4py import MPI
    from pytest_ipcbench.core import names

    def test_sleeps(tmp_path):
        names.private_dir("sleeper")  # a resource of ours on every rank
        MPI.COMM_WORLD.Barrier()
        time.sleep(60)
""")


@pytest.mark.skipif(MPIEXEC is None, reason="no mpiexec")
def test_a_killed_mpiexec_under_pytest_with_mpi_is_named_and_leaves_nothing(tmp_path: Path) -> None:
    pytest.importorskip("mpi4py")
    (tmp_path / "test_s.py").write_text(SLEEPER)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PMI", "MPI", "HYDRA", "PYTEST_"))}
    log = (tmp_path / "stderr").open("w+")
    mpiexec = subprocess.Popen(
        [str(MPIEXEC), "-n", "3", sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "--with-mpi", "-q",
         "test_s.py"], cwd=tmp_path, env=env, stdout=subprocess.DEVNULL, stderr=log, start_new_session=True)
    job = Job(mpiexec.pid)
    job.pids[mpiexec.pid] = "mpiexec"
    try:
        _wait_ready(job, mpiexec)
        mpiexec.kill()
        mpiexec.wait()
        took, left = job.wait_gone(BOUND)
        log.seek(0)
        err = log.read()
        assert left == [], f"after {took:.1f} s still {left}\n" + err[-3000:]
        # each rank's reaper says which rank ended and why (the launcher, pid and name)
        assert re.search(rf"ipcbench: rank \d \(pid \d+\).*its launcher mpiexec,? \(?pid {mpiexec.pid}", err), err
    finally:
        if mpiexec.poll() is None:
            mpiexec.kill()
            mpiexec.wait()
        job.scrub()


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace")
    except OSError:
        return ""


def test_a_killed_plain_ipcbench_run_ends_its_local_workers_and_they_remove_what_it_left(tmp_path: Path) -> None:
    """``ipcbench run --no-mpi`` killed by SIGKILL mid-case: rank 0 (the run itself) runs no
    cleanup. Its spawned workers used to poll on for a peer that never came, holding their
    folders and the run's segments; now each ends when its parent does and removes what the
    parent named that no other process maps."""
    cmd = [*_run_cmd(tmp_path / "out"), "--no-mpi"]
    log = (tmp_path / "stderr").open("w+")
    run = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=log, start_new_session=True)
    workers: set[int] = set()
    try:
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline and run.poll() is None:
            # the spawned workers and multiprocessing's resource tracker: every one must end
            workers |= {p for p in procs.children(run.pid) if "multiprocessing" in _cmdline(p)}
            mid_case = [item for pid in (run.pid, *workers) for item in names.find_ours(pid=pid)]
            spawned = [p for p in workers if "spawn_main" in _cmdline(p)]
            if len(spawned) >= 2 and any(item.path.parent == names.SHM_DIR for item in mid_case):
                break
            time.sleep(0.05)
        assert len(spawned) >= 2 and run.poll() is None, "the local workers never got going"
        time.sleep(0.3)
        os.kill(run.pid, signal.SIGKILL)
        t0 = time.monotonic()

        def left() -> list[str]:
            return ([f"worker {p}" for p in workers if procs.running(p)]
                    + [str(item.path) for pid in (run.pid, *workers) for item in names.find_ours(pid=pid)])

        while time.monotonic() - t0 < BOUND and left():
            time.sleep(0.1)
        log.seek(0)
        assert left() == [], f"after {time.monotonic() - t0:.1f} s still {left()}\n" + log.read()[-3000:]
    finally:
        if run.poll() is None:
            os.killpg(run.pid, signal.SIGKILL)
        run.wait()
        for pid in workers:
            if procs.running(pid):
                os.kill(pid, signal.SIGKILL)
        for item in [i for pid in (run.pid, *workers) for i in names.find_ours(pid=pid)]:
            names.remove(item.path)
