import time

import pytest

from pytest_ipcbench.core.cleanup import JobWatch
from pytest_ipcbench.core.group import in_mpi_job
from pytest_ipcbench.core.names import remove

pytest_plugins = ["pytester"]

_WATCH = pytest.StashKey[JobWatch]()


def pytest_sessionstart(session: pytest.Session) -> None:
    # our watchdog tests end MPI jobs with MPI_Abort, after which MPICH leaves its segment in
    # /dev/shm and Hydra its topology file in /tmp, named without an owner: record what the jobs
    # started below this process use while they run (the jobs that abort are launched from the
    # plain run), so that only those are removed at the end, never another job's
    if not in_mpi_job():
        session.config.stash[_WATCH] = JobWatch().start()


def pytest_sessionfinish(session: pytest.Session) -> None:
    watch = session.config.stash.get(_WATCH, None)
    if watch is None:
        return
    watch.stop()
    # ranks of an aborted job may take a few seconds to die and unmap: wait for them, bounded
    deadline = time.monotonic() + 20
    while True:
        for path in watch.leftovers():
            remove(path)
        if not watch.pending() or time.monotonic() > deadline:
            break
        time.sleep(0.5)
