import tempfile
import time
from pathlib import Path

import pytest

from pytest_ipcbench.core.cleanup import stale_hydra_files, stale_mpich_segments
from pytest_ipcbench.core.group import in_mpi_job
from pytest_ipcbench.core.names import SHM_DIR, remove

pytest_plugins = ["pytester"]

_MPICH_BEFORE = pytest.StashKey[set]()


def pytest_sessionstart(session: pytest.Session) -> None:
    session.config.stash[_MPICH_BEFORE] = {p.name for p in stale_mpich_segments(min_age=0)} | {
        p.name for p in stale_hydra_files(min_age=0)
    }


def pytest_sessionfinish(session: pytest.Session) -> None:
    # our watchdog tests end MPI jobs with MPI_Abort, after which MPICH leaves its segment in
    # /dev/shm and Hydra its topology file in /tmp: remove what this session's jobs left
    if in_mpi_job():  # the jobs that abort are launched from the plain run
        return
    before = session.config.stash.get(_MPICH_BEFORE, set())
    # ranks of an aborted job may take a few seconds to die and unmap: wait for them, bounded
    deadline = time.monotonic() + 20
    while True:
        for path in stale_mpich_segments(min_age=0, ignore=before) + stale_hydra_files(min_age=0, ignore=before):
            remove(path)
        pending = [
            p for p in [*SHM_DIR.glob("mpich_shm_*"), *Path(tempfile.gettempdir()).glob("hydra_hwloc_xmlfile_*")]
            if p.name not in before
        ]
        if not pending or time.monotonic() > deadline:
            break
        time.sleep(0.5)
