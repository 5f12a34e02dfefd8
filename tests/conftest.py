import os
import time

import leakguard  # tests/ is on sys.path (rootdir conftest, no package)
import pytest

from pytest_ipcbench.core.group import in_mpi_job
from pytest_ipcbench.core.jobwatch import JobWatch
from pytest_ipcbench.core.names import remove

pytest_plugins = ["pytester"]
# tests/data holds whole projects (with tests of their own) that some tests install and run
collect_ignore = ["data"]

_WATCH = pytest.StashKey[JobWatch]()
# what an MPI launcher puts in its ranks' environment (Hydra's PMI, Open MPI's, PMIx)
_LAUNCHER_ENV = ("PMI_", "PMIX_", "HYDRA_", "HYDI_", "OMPI_", "MPI_LOCALNRANKS", "MPI_LOCALRANKID")


@pytest.fixture(autouse=True)
def _plain_environment(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch,
                       tmp_path_factory: pytest.TempPathFactory) -> None:
    """Each test gets a cache folder of its own (XDG_CACHE_HOME): a calibration one test stores is
    never found by another, nor by the user's own commands (history/calibration_store.py).

    Under MPI a test without the mpi marker runs on rank 0 alone (ipc_unmarked = rank0): the
    processes it starts must not inherit the job's PMI connection (their MPI_Init would fail on
    the rank's file descriptor), so they start as plain processes, as in a plain run.

    Under pytest-xdist (make test's plain phase) the pytest runs a test starts are not xdist
    workers: pytest-benchmark disables itself in any process that has ``PYTEST_XDIST_WORKER``."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path_factory.mktemp("xdg-cache")))
    for key in list(os.environ):
        if key.startswith("PYTEST_XDIST_"):
            monkeypatch.delenv(key)
    if in_mpi_job() and request.node.get_closest_marker("mpi") is None:
        for key in list(os.environ):
            if key.startswith(_LAUNCHER_ENV):
                monkeypatch.delenv(key)


def _rank() -> int:
    return int(os.environ.get("PMI_RANK", os.environ.get("OMPI_COMM_WORLD_RANK", "0")) or 0)


@pytest.fixture(autouse=True)
def _leaves_nothing(request: pytest.FixtureRequest) -> object:
    """Fail the test that leaves anything of ours behind (tests/leakguard.py), naming it, then
    remove it. First of the autouse fixtures, so its check runs after every other teardown.

    Under ``mpiexec ... --with-mpi`` rank 0 alone checks, with no barrier: what another rank
    still uses (its owner runs, a live process maps it) is never counted, so the ranks need not
    be idle at the same moment; and a barrier here would wait forever in a test that rank 0 runs
    alone (``ipc_unmarked = rank0``)."""
    if _rank() != 0:
        yield
        return
    before = leakguard.snapshot()
    yield
    own = getattr(request.config, "_tmp_path_factory", None)
    keep = {own._basetemp} if own is not None and own._basetemp is not None else set()
    found = leakguard.leaked(before, keep)
    if found:
        leakguard.remove(found)
        pytest.fail(f"left behind (still there {leakguard.GRACE:.0f} s after the test, now removed): "
                    + leakguard.describe(found), pytrace=False)


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
