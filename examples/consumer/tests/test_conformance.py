"""pytest-ipcbench's conformance suite, run against our backend: delivery of every payload kind
(ours and the built-in ones) in both modes at 2 and 4 ranks, writer errors, timeouts, cleanup."""

import pytest
from pytest_ipcbench.testing import BackendConformance


class TestFifo(BackendConformance):
    backend = "fifo"


# bytes mode only: the pipe sends the same pickle in both modes (src/fifo_channel/pipes.py), so its
# native cases would run the same code again (each case starts a rank 0 and its workers of its own)
@pytest.mark.ipcbench(modes="bytes")
class TestPipe(BackendConformance):
    """Pipes made before the ranks start (before_ranks): local workers only, skipped under mpiexec."""

    backend = "pipe"
