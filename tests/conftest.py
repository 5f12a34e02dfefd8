import os
import time

import pytest

from pytest_ipcbench.core.jobwatch import JobWatch
from pytest_ipcbench.core.group import in_mpi_job
from pytest_ipcbench.core.names import remove

pytest_plugins = ["pytester"]

_WATCH = pytest.StashKey[JobWatch]()
# what an MPI launcher puts in its ranks' environment (Hydra's PMI, Open MPI's, PMIx)
_LAUNCHER_ENV = ("PMI_", "PMIX_", "HYDRA_", "HYDI_", "OMPI_", "MPI_LOCALNRANKS", "MPI_LOCALRANKID")


@pytest.fixture(autouse=True)
def _plain_environment(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    """Under MPI a test without the mpi marker runs on rank 0 alone (ipc_unmarked = rank0): the
    processes it starts must not inherit the job's PMI connection (their MPI_Init would fail on
    the rank's file descriptor), so they start as plain processes, as in a plain run."""
    if in_mpi_job() and request.node.get_closest_marker("mpi") is None:
        for key in list(os.environ):
            if key.startswith(_LAUNCHER_ENV):
                monkeypatch.delenv(key)


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
