"""The conformance suite that plugin authors run (pytest_ipcbench.testing), run against every
built-in backend: plain pytest runs the local ones at 2 and 4 ranks, and mpiexec -n 4 / -n 2 with
--with-mpi runs all that work over MPI. A backend that cannot run here is skipped with the reason.

That the suite can fail is shown in tests/plugin/test_extensions.py, against broken backends.
"""

from __future__ import annotations

from pytest_ipcbench.testing import BackendConformance


class TestLMDB(BackendConformance):
    backend = "lmdb"


class TestSharedMemory(BackendConformance):
    backend = "shm"


class TestZMQ(BackendConformance):
    backend = "zmq"


class TestMPQueue(BackendConformance):
    backend = "mp-queue"


class TestMPIBcast(BackendConformance):
    backend = "mpi-bcast"


class TestMPIPkl5(BackendConformance):
    backend = "mpi-pkl5"


class TestMPIBuffer(BackendConformance):
    backend = "mpi-buffer"


class TestMPIP2P(BackendConformance):
    backend = "mpi-p2p"


class TestMPIShmWin(BackendConformance):
    backend = "mpi-shm-win"
