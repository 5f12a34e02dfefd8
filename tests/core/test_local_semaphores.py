"""multiprocessing's named semaphores of a local world's queues (``/dev/shm/sem.mp-*``): a SIGKILL
of the whole process group (the parent, its workers and multiprocessing's resource tracker, which
would have unlinked them) leaves none of those the world's processes mapped (issue 42)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from pytest_ipcbench.core.group import in_mpi_job

pytestmark = pytest.mark.skipif(in_mpi_job() or not os.path.isdir("/dev/shm"),
                                reason="starts a local world in a subprocess; needs /dev/shm")

SCRIPT = textwrap.dedent("""
    import sys, time
    from pytest_ipcbench.core.local import LocalWorld
    from pytest_ipcbench.runner.worker import noop

    world = LocalWorld(3, timeout=60)
    world.run(noop)
    print(" ".join(map(str, world.pids)), flush=True)
    time.sleep(120)
""")


def _tree(root: int) -> set[int]:
    """``root`` and every process below it."""
    found = {root}
    for _ in range(4):
        for entry in os.listdir("/proc"):
            if not entry.isdigit():
                continue
            try:
                with open(f"/proc/{entry}/stat") as f:
                    ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            except (OSError, ValueError, IndexError):
                continue
            if ppid in found:
                found.add(int(entry))
    return found


def _mapped_semaphores(pids: set[int]) -> set[str]:
    names = set()
    for pid in pids:
        try:
            with open(f"/proc/{pid}/maps") as f:
                for line in f:
                    if "/dev/shm/sem." in line:
                        names.add(line.split(None, 5)[5].strip().removesuffix(" (deleted)"))
        except OSError:
            continue
    return names


def test_a_sigkill_of_a_local_worlds_whole_process_group_leaves_none_of_its_semaphores() -> None:
    """Before the fix: the 9 names of its 3 queues stayed (the tracker died with them)."""
    proc = subprocess.Popen([sys.executable, "-c", SCRIPT], stdout=subprocess.PIPE, text=True,
                            start_new_session=True)
    try:
        line = proc.stdout.readline()  # the world runs: every worker has its queues
        assert line.strip(), "the world did not start"
        pids = _tree(proc.pid)
        used = _mapped_semaphores(pids)
        assert len(used) >= 9, used  # 3 queues of 3 semaphores: what the test is about
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        proc.stdout.close()
    deadline = time.monotonic() + 20
    while any(os.path.exists(f"/proc/{p}") for p in pids) and time.monotonic() < deadline:
        time.sleep(0.1)
    left = sorted(name for name in used if os.path.exists(name))
    for name in left:
        os.unlink(name)  # leave nothing, then fail
    assert not left, f"left after the SIGKILL: {left}"
