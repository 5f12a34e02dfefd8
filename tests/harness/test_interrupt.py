"""Ctrl-C stops a run at any moment: pytest exits 2 (interrupted), the workers end, nothing is left.

A terminal's Ctrl-C sends SIGINT to the whole foreground process group: pytest and its local
worker processes. The run under test is a pytest subprocess in a session of its own, so the test
can signal its group like a terminal would.
"""

from __future__ import annotations

import os
import random
import re
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from pytest_ipcbench.core import names
from pytest_ipcbench.core.group import in_mpi_job
from pytest_ipcbench.core.procs import descendants, find_mpiexec, mapped_shm_names, running

# they start ipcbench or pytest processes of their own (an MPI job's environment would make
# those MPI singletons): never nested inside an MPI job
pytestmark = pytest.mark.skipif(in_mpi_job(), reason="starts its own processes: not inside an MPI job")

LOOP = textwrap.dedent("""
    import multiprocessing, os, time
    from pytest_ipcbench import BackendSpec, PayloadSpec, assert_delivered, deliver
    from pytest_ipcbench.backends import base
    from pytest_ipcbench.core import payloads

    BACKEND = os.environ["IPCB_TEST_BACKEND"]
    SLOW = float(os.environ.get("IPCB_TEST_SLOW", "0"))

    # Slow motion, for a Ctrl-C at a chosen moment: the writer (rank 0, the pytest process) is
    # inside write() while the readers (workers, which import this module to run run_deliver)
    # still build their expected payload; then SIGINT ends the readers before the next barrier.
    if SLOW and multiprocessing.current_process().name.startswith("ipcbench-rank"):
        build = payloads.PayloadSpec.build

        def slow_build(self, seed=0):
            time.sleep(2 * SLOW)
            return build(self, seed)

        payloads.PayloadSpec.build = slow_build
    elif SLOW:
        cls = base.get_backend(BACKEND)
        write = cls.write

        def slow_write(self, obj):
            open("writing", "w").close()
            time.sleep(SLOW)
            write(self, obj)

        cls.write = slow_write

    def run_deliver(group, spec, payload):
        return deliver(group, spec, payload)

    def test_deliver_until_interrupted(ipc_group):
        spec = BackendSpec(BACKEND, "native")
        payload = PayloadSpec("ndarray", 2_000_000)
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            assert_delivered(ipc_group.run(run_deliver, spec, payload))
            open("delivered", "w").close()
""")


def _as_from_a_terminal() -> None:
    """In the child, before exec: SIGINT back to its default.  A shell ignores SIGINT in what it
    starts in the background (``make test &`` in a script), exec keeps an ignored signal
    ignored, and Python then installs no KeyboardInterrupt handler: the run would never see the
    Ctrl-C this test sends.  A terminal's foreground job has the default. So for SIGTERM and
    SIGHUP (``nohup`` ignores SIGHUP), which the plugin takes only where they are the default."""
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, signal.SIG_DFL)


def interrupt_run(tmp_path: Path, backend: str, wait_for: str, delay: float, slow: float = 0,
                  sig: int = signal.SIGINT) -> dict:
    """Start the loop, wait for file ``wait_for`` and ``delay`` s more, then Ctrl-C its process group
    (or send it ``sig``: the run is a session of its own, so this is the whole session)."""
    (tmp_path / "test_loop.py").write_text(LOOP)
    # PYTHONFAULTHANDLER: every Python process of the run dumps its stacks on SIGABRT (below)
    env = dict(os.environ, IPCB_TEST_BACKEND=backend, IPCB_TEST_SLOW=str(slow), PYTHONFAULTHANDLER="1")
    proc = subprocess.Popen(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--ipc-ranks", "3", "test_loop.py"],
        cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True,
        preexec_fn=_as_from_a_terminal,
    )
    try:
        deadline = time.monotonic() + 120
        while not (tmp_path / wait_for).exists():
            if proc.poll() is not None or time.monotonic() > deadline:
                pytest.fail(f"the run did not get to {wait_for!r}:\n{proc.communicate()[0]}")
            time.sleep(0.02)
        time.sleep(delay)
        pids = [proc.pid, *sorted(descendants(proc.pid))]
        os.killpg(proc.pid, sig)  # what a terminal does on Ctrl-C (SIGINT); else the whole session
        start = time.monotonic()
        try:
            out, _ = proc.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            pytest.fail(f"the run did not stop within 60 s of {signal.Signals(sig).name}:\n{_why_stuck(proc, pids)}")
        took = time.monotonic() - start
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(10)
    time.sleep(0.5)
    return {
        "rc": proc.returncode, "out": out, "took": took,
        "alive": [pid for pid in pids if running(pid)],
        "left": [str(item.path) for pid in pids for item in names.find_ours(pid)],
    }


def _why_stuck(proc: subprocess.Popen, pids: list[int]) -> str:
    """What a run that ignored Ctrl-C was doing: its processes' states, then every Python stack
    (SIGABRT makes each process's faulthandler dump them) and the run's output."""
    ps = subprocess.run(["ps", "-o", "pid,ppid,pgid,stat,wchan:24,etime,args", "-s", str(proc.pid)],
                        capture_output=True, text=True).stdout
    os.killpg(proc.pid, signal.SIGABRT)
    try:
        out = proc.communicate(timeout=20)[0]
    except subprocess.TimeoutExpired:
        out = "(no output within 20 s of SIGABRT)"
    return f"processes {pids}, then:\n{ps}\noutput and stacks:\n{out}"


def assert_stopped_cleanly(run: dict) -> None:
    assert run["rc"] == pytest.ExitCode.INTERRUPTED, f"rc {run['rc']}\n{run['out']}"
    assert "KeyboardInterrupt" in run["out"], run["out"]
    assert "resources left behind" not in run["out"], run["out"]
    assert run["left"] == [] and run["alive"] == [], run
    assert run["took"] < 30, run["took"]


@pytest.mark.parametrize("backend", ["lmdb", "shm"])
def test_ctrl_c_inside_a_store_write_stops_the_run(tmp_path: Path, backend: str) -> None:
    """The writer is inside write() when Ctrl-C comes; its readers, not yet at the barrier after
    the write, die of the same signal (the barrier's broken pipe used to replace the Ctrl-C)."""
    assert_stopped_cleanly(interrupt_run(tmp_path, backend, "writing", 0.3, slow=1.0))


@pytest.mark.parametrize("backend", ["lmdb", "shm", "zmq", "mp-queue"])
def test_ctrl_c_at_any_moment_stops_the_run(tmp_path: Path, backend: str) -> None:
    assert_stopped_cleanly(interrupt_run(tmp_path, backend, "delivered", random.uniform(0, 0.3)))


@pytest.mark.parametrize("sig, backend", [(signal.SIGTERM, "shm"), (signal.SIGHUP, "lmdb")])
def test_sigterm_or_sighup_to_the_session_inside_a_store_write_leaves_nothing(
        tmp_path: Path, sig: int, backend: str) -> None:
    """A whole session ended by SIGTERM (``timeout``, a cancelled CI job, ``pkill -s``) or SIGHUP
    (its terminal closed): pytest and its workers died by the default action, which runs no
    cleanup, and the store rank 0 was writing stayed in /dev/shm or the temp folder (a plain run
    has no reaper). Now the signal is taken like a Ctrl-C and the run exits 128 + the signal."""
    semaphores = set(_semaphores())
    run = interrupt_run(tmp_path, backend, "writing", 0.3, slow=1.0, sig=sig)
    assert run["left"] == [] and run["alive"] == [], run
    # its queues' semaphores: SIGHUP killed multiprocessing's resource tracker too, which unlinks them.
    # Another job's show up unmapped for a moment when it ends (12 of a 4-rank run, seen here), until
    # its own tracker removes them: only those that stay count
    deadline = time.monotonic() + 10
    while (new := set(_semaphores()) - semaphores - mapped_shm_names()) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert sorted(new) == [], run["out"]
    assert run["rc"] == 128 + sig, f"rc {run['rc']}\n{run['out']}"
    assert f"terminated by {signal.Signals(sig).name}" in run["out"] and "Traceback" not in run["out"], run["out"]
    assert "resources left behind" not in run["out"], run["out"]
    assert run["took"] < 30, run["took"]


def _semaphores() -> list[str]:
    """multiprocessing's named semaphores (``sem.mp-*``) in /dev/shm."""
    return [n for n in os.listdir("/dev/shm") if n.startswith("sem.mp-")] if os.path.isdir("/dev/shm") else []


# ------------------------------------------------------------------------------- under mpiexec

BLOCKED = textwrap.dedent("""
    import time
    import numpy as np
    import pytest
    from mpi4py import MPI

    @pytest.mark.mpi(min_size=2)
    def test_rank_1_blocked_inside_mpi():
        comm = MPI.COMM_WORLD
        if comm.rank == 0:
            open("started", "w").close()
            time.sleep(120)  # Python code: sees the Ctrl-C at once
        else:
            comm.Recv(np.empty(1), source=0)  # inside MPI: never sees it
""")

LONG_MPI = textwrap.dedent("""
    import os, time
    import pytest
    from pytest_ipcbench import BackendSpec, PayloadSpec, assert_delivered, deliver

    def run_deliver(group, spec, payload):
        return deliver(group, spec, payload)

    @pytest.mark.mpi(min_size=2)
    @pytest.mark.parametrize("backend", ["shm", "mpi-bcast", "zmq"])
    def test_deliver_until_interrupted(ipc_group, backend):
        spec, payload = BackendSpec(backend, "native"), PayloadSpec("ndarray", 1_000_000)
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            assert_delivered(ipc_group.run(run_deliver, spec, payload))
            if ipc_group.rank == 0:
                open("started", "w").close()
""")


def interrupt_mpi_run(tmp_path: Path, test_source: str, delay: float) -> dict:
    """``mpiexec -n 3 pytest --with-mpi`` of ``test_source`` in a session of its own; once rank 0
    wrote ``started``, ``delay`` s more, then Ctrl-C to its process group as a terminal would."""
    mpiexec = find_mpiexec()
    if mpiexec is None:
        pytest.skip("no mpiexec")
    (tmp_path / "test_mpi_loop.py").write_text(test_source)
    before = set(os.listdir("/dev/shm")) if os.path.isdir("/dev/shm") else set()
    proc = subprocess.Popen(
        [mpiexec, "-n", "3", sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--with-mpi",
         "test_mpi_loop.py"],
        cwd=tmp_path, env=dict(os.environ, PYTHONFAULTHANDLER="1"), stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT, text=True, start_new_session=True, preexec_fn=_as_from_a_terminal,
    )
    try:
        deadline = time.monotonic() + 120
        while not (tmp_path / "started").exists():
            if proc.poll() is not None or time.monotonic() > deadline:
                pytest.fail(f"the run did not start:\n{proc.communicate()[0]}")
            time.sleep(0.02)
        time.sleep(delay)
        pids = [proc.pid, *sorted(descendants(proc.pid))]
        os.killpg(proc.pid, signal.SIGINT)
        start = time.monotonic()
        try:  # hung before the watchdog heard Ctrl-C too
            out, _ = proc.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            pytest.fail(f"the run did not stop within 60 s of Ctrl-C:\n{_why_stuck(proc, pids)}")
        took = time.monotonic() - start
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(10)
    time.sleep(0.5)
    after = set(os.listdir("/dev/shm")) if os.path.isdir("/dev/shm") else set()
    for name in after - before:  # an aborted MPICH job leaves its own segments: this job's, remove them
        if name.startswith("mpich_shm_") and not mapped_shm_names().intersection({name}):
            os.unlink(os.path.join("/dev/shm", name))
    # this job's resources only: another test run on the machine makes and removes its own meanwhile
    return {"rc": proc.returncode, "out": out, "took": took, "alive": [p for p in pids if running(p)],
            "left": sorted(n for n in after - before if n.startswith(names.PREFIX) and names.owner_pid(n) in pids)}


def test_ctrl_c_under_mpiexec_ends_a_rank_blocked_inside_mpi(tmp_path: Path) -> None:
    run = interrupt_mpi_run(tmp_path, BLOCKED, 0.5)
    assert run["rc"] == pytest.ExitCode.INTERRUPTED, f"rc {run['rc']}\n{run['out']}"
    # the blocked rank is ended and named: by its watchdog after 10 s, or sooner by Hydra or by its
    # reaper when the other ranks and the launcher have left (the reaper names how it ended)
    ended = re.search(r"still running 10 s after Ctrl-C|rank 1 \(pid \d+\) was (killed by signal|ended by its reaper)",
                      run["out"])
    assert ended, run["out"]
    assert run["alive"] == [] and run["took"] < 30, run


def test_ctrl_c_under_mpiexec_at_any_moment_stops_the_run(tmp_path: Path) -> None:
    run = interrupt_mpi_run(tmp_path, LONG_MPI, random.uniform(0, 2.0))
    assert run["rc"] == pytest.ExitCode.INTERRUPTED, f"rc {run['rc']}\n{run['out']}"
    assert run["alive"] == [] and run["left"] == [] and run["took"] < 30, run
