"""Injected slowdowns under MPI: every rank runs these tests.

    mpiexec -n 4 python -m pytest --with-mpi -m mpi tests/harness/test_inject_mpi.py

The delivery's shared slots (harness/inject.py) are made, read and unlinked by MPI ranks of one
host; the last reader alone stretches the completion from the writer's start.
"""

from __future__ import annotations

import time

import numpy as np
import pytest

from pytest_ipcbench.backends.base import Backend, BackendSpec, register
from pytest_ipcbench.core.envinfo import INJECT_ENV
from pytest_ipcbench.core.group import MPIGroup
from pytest_ipcbench.core.names import SHM_DIR
from pytest_ipcbench.core.payloads import PayloadSpec
from pytest_ipcbench.harness import measure
from pytest_ipcbench.harness.measure import BenchSettings

pytestmark = pytest.mark.mpi

LAST_S = 0.01  # the last reader's delivery: long enough that the machine's load cannot hide 2x


@register
class MpiLateReader(Backend):
    """A channel over the group's bcast whose last rank gets the message ``LAST_S`` late."""

    name = "fake-mpi-late"
    delivery = "channel"
    node_local = False

    def write(self, obj):
        self.group.bcast(obj, root=self.root)

    def read(self):
        got = self.group.bcast(None, root=self.root)
        if self.group.rank == self.group.size - 1:
            time.sleep(LAST_S)
        return got


@pytest.fixture(scope="module")
def world():
    return MPIGroup.world()


def _bench(world, inject: str):
    import os

    os.environ[INJECT_ENV] = inject
    try:
        return measure.run_bench(world, BackendSpec("fake-mpi-late", "native"), PayloadSpec("dict", 1000), "broadcast",
                             BenchSettings(time_budget=0.1, min_iterations=10, max_iterations=200, warmup=2))
    finally:
        os.environ.pop(INJECT_ENV, None)


def test_the_last_reader_stretches_the_completion_by_the_factor(world):
    if world.size < 3:
        pytest.skip("needs 2 readers")
    before = set(SHM_DIR.glob("ipcb-*-inject"))
    ratios, fast_readers = [], []
    for _ in range(3):  # interleaved
        plain, slowed = _bench(world, ""), _bench(world, "fake-mpi-late=2")
        ratios.append(np.median(slowed.samples["completion"]) / np.median(plain.samples["completion"]))
        fast_readers.append(np.median(slowed.samples["read_min"]) / np.median(plain.samples["completion"]))
    ratio = float(np.median(ratios))
    assert 1.6 <= ratio <= 2.6, f"asked 2x, got {ratio:.2f}x (rounds {np.round(ratios, 2)})"
    # the readers that were not last did not spin: they hold the message long before the end
    assert float(np.median(fast_readers)) < 0.5, np.round(fast_readers, 2)
    world.barrier()
    assert set(SHM_DIR.glob("ipcb-*-inject")) <= before  # unlinked once every rank had mapped it
