"""pytest-ipcbench's conformance suite, run against our backend: delivery of every payload kind
(ours and the built-in ones) in both modes at 2 and 4 ranks, writer errors, timeouts, cleanup."""

from pytest_ipcbench.testing import BackendConformance


class TestFifo(BackendConformance):
    backend = "fifo"


class TestPipe(BackendConformance):
    """Pipes made before the ranks start (before_ranks): local workers only, skipped under mpiexec."""

    backend = "pipe"
