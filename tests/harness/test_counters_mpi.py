"""Exact costs of the MPI built-in backends (and shm under MPI), counted on every rank.

    mpiexec -n 4 python -m pytest --with-mpi -m mpi tests/harness/test_counters_mpi.py

Collective: every rank gets the Result and asserts the same facts. Only counters measured exact
are asserted exactly. On simulated nodes (MPIR_CVAR_NUM_CLIQUES) messages between nodes go through
the network module, so the node-local facts are not asserted there.
"""

from __future__ import annotations

import pytest

from pytest_ipcbench.backends.base import BackendSpec, unavailable_reason
from pytest_ipcbench.core.counters import RankCounters
from pytest_ipcbench.core.group import MPIGroup
from pytest_ipcbench.core.payloads import PayloadSpec
from pytest_ipcbench.core.syscalls import syscall_unavailable
from pytest_ipcbench.harness import measure
from pytest_ipcbench.harness.measure import BenchSettings

pytestmark = pytest.mark.mpi

FAST = BenchSettings(time_budget=0.05, min_iterations=5, max_iterations=200, warmup=2)
KIB, MIB = 1024, 2**20
NO_SYSCALLS = syscall_unavailable()


@pytest.fixture(scope="module")
def world():
    return MPIGroup.world()


def counted(world, name, mode, size):
    reason = unavailable_reason(name, world)
    if reason:
        pytest.skip(reason)
    result = measure.run_bench(world, BackendSpec(name, mode), PayloadSpec("ndarray", size), "broadcast", FAST)
    if result.nodes > 1:
        pytest.skip(f"{result.nodes} nodes: messages between nodes take the network module's path")
    c = result.counters
    assert c is not None and len(c.ranks) == world.size and len(c.readers) == world.size - 1
    return result, c


def exactly(ranks: list[RankCounters], name: str, value: int | float) -> None:
    for rank in ranks:
        assert rank.exact(name), f"rank {rank.rank} {name} is not exact: {rank.totals[name]}"
        assert rank.value(name) == value, f"rank {rank.rank} {name}: {rank.value(name)} per message, expected {value}"


def data_calls(ranks: list[RankCounters], value: int) -> None:
    if NO_SYSCALLS is None:
        exactly(ranks, "syscalls.data", value)
    else:
        assert all("syscalls.data" in r.absent for r in ranks)


@pytest.mark.parametrize("size", [KIB, MIB])
@pytest.mark.parametrize("name", ["mpi-p2p", "mpi-buffer", "mpi-shm-win", "shm"])
def test_native_paths_make_no_data_system_call_on_the_writer(world, name, size):
    _, c = counted(world, name, "native", size)
    data_calls([c.writer], 0)
    exactly([c.writer], "io.wchar", 0)


@pytest.mark.parametrize("size", [KIB, MIB])
@pytest.mark.parametrize("name", ["mpi-shm-win", "shm"])
def test_shared_memory_readers_make_no_data_system_call(world, name, size):
    _, c = counted(world, name, "native", size)
    data_calls(c.readers, 0)
    exactly(c.readers, "io.rchar", 0)


def test_p2p_above_the_eager_limit_is_one_cross_memory_read_per_reader(world):
    # MPICH's CMA path: the reader copies the payload out of the writer with one
    # process_vm_readv (a data system call); below the eager limit it goes through shared memory
    _, small = counted(world, "mpi-p2p", "native", KIB)
    data_calls(small.readers, 0)
    _, big = counted(world, "mpi-p2p", "native", MIB)
    data_calls(big.readers, 1)


@pytest.mark.parametrize("size", [KIB, MIB])
def test_mpi_bcast_pickles_once_on_the_writer_and_unpickles_once_per_reader(world, size):
    result, c = counted(world, "mpi-bcast", "native", size)
    exactly([c.writer], "pickle.dumps", 1)
    exactly(c.readers, "pickle.loads", 1)
    exactly(c.readers, "pickle.dumps", 0)
    assert c.writer.value("pickle.dumps_bytes") >= result.nbytes


@pytest.mark.parametrize("name", ["mpi-p2p", "mpi-buffer"])
def test_buffer_paths_never_pickle(world, name):
    _, c = counted(world, name, "native", MIB)
    exactly(c.ranks, "pickle.dumps", 0)
    exactly(c.ranks, "pickle.loads", 0)


def test_shm_win_moves_an_array_without_pickling(world):
    result, c = counted(world, "mpi-shm-win", "native", MIB)
    exactly([c.writer], "pickle.dumps", 0)  # an array's dtype and shape go in the window's head
    exactly(c.readers, "pickle.loads", 0)
