"""pytest-ipcbench's conformance kit against each of our three transports."""

from pytest_ipcbench.testing import BackendConformance


class TestUds(BackendConformance):
    backend = "uds"


class TestPosixMq(BackendConformance):
    backend = "posixmq"


class TestInheritedShm(BackendConformance):
    """Made before the ranks start: local workers only, skipped under mpiexec with the reason."""

    backend = "ishm"
