"""Every backend over MPI groups: run under mpiexec with pytest-mpi's ``--with-mpi``::

    mpiexec -n 4 python -m pytest --with-mpi tests/backends/test_backends_mpi.py

Without ``--with-mpi`` pytest-mpi skips these tests (the ``mpi`` marker). Every rank runs every
test; a test on ``ranks`` ranks runs on ``world.split(ranks)`` and the other ranks pass it idle.
``group.run`` gathers every rank's outcome, so a failure on one rank fails the test on all ranks
of its group. mpi4py is imported only inside fixtures: collecting this file does not start MPI.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
import support as progs  # tests/ is on sys.path (rootdir conftest, no package)

from pytest_ipcbench.backends import BackendSpec
from pytest_ipcbench.backends.base import unavailable_reason
from pytest_ipcbench.core import names
from pytest_ipcbench.core.payloads import PayloadSpec
from pytest_ipcbench.harness.transfer import assert_delivered, deliver

pytestmark = pytest.mark.mpi

MPI_BACKENDS = ("mpi-bcast", "mpi-pkl5", "mpi-buffer", "mpi-p2p", "mpi-shm-win")
OTHERS = ("lmdb", "shm", "zmq")  # need no MPI, but must work over an MPI group too
MODES = ("bytes", "native")
KB, MB = 10**3, 10**6


@pytest.fixture(scope="module")
def world() -> Any:
    from pytest_ipcbench.core.group import MPIGroup

    return MPIGroup.world()


def _group(world: Any, ranks: int) -> Any:
    """The first ``ranks`` ranks as a group (None on the others); skip if the world is smaller."""
    if world.size < ranks:
        pytest.skip(f"needs {ranks} MPI ranks, the world has {world.size}")
    return world.split(ranks)


@pytest.fixture(autouse=True)
def no_leftovers() -> Iterator[None]:
    """Every rank: nothing it created is left in /dev/shm or the temp dir."""
    before = {item.path for item in names.find_ours(pid=os.getpid())}
    yield
    left = [item.path for item in names.find_ours(pid=os.getpid()) if item.path not in before]
    for path in left:
        names.remove(path)
    assert not left, f"left behind: {left}"


def _run(world: Any, ranks: int, fn: Any, *args: Any) -> list[Any] | None:
    group = _group(world, ranks)
    if group is None:
        return None
    for spec in args:  # e.g. zmq's ipc sockets on a group that spans (simulated) nodes
        if isinstance(spec, BackendSpec) and (reason := unavailable_reason(spec.name, group)):
            pytest.skip(reason)
    return group.run(fn, *args)


# Delivery of every payload kind in both modes at 2 and 4 ranks is the conformance suite's
# (test_conformance.py, which runs under mpiexec too); this file covers what is beyond it.


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("name", MPI_BACKENDS + OTHERS)
def test_delivers_64mb(world: Any, name: str, mode: str) -> None:
    ranks = min(world.size, 4)
    results = _run(world, ranks, deliver, BackendSpec(name, mode), PayloadSpec("ndarray", 64 * MB), 1)
    if results is not None:
        assert_delivered(results)


@pytest.mark.parametrize("name", MPI_BACKENDS)
def test_writer_other_than_rank0(world: Any, name: str) -> None:
    ranks = min(world.size, 4)
    results = _run(world, ranks, deliver, BackendSpec(name, "native", root=1), PayloadSpec("ragged2d", 10 * KB))
    if results is not None:
        assert_delivered(results)
        assert results[1].role == "writer"


ODD_OBJECTS = [
    b"",
    np.empty(0),
    [],
    {},
    (),
    np.empty((0, 602), dtype=np.float32),
    [np.empty(0, dtype=np.int32), np.arange(3)],
    np.arange(24, dtype=np.int16).reshape(4, 6)[:, ::2],
    np.asfortranarray(np.arange(12.0).reshape(3, 4)),
    np.array(3.5),
    np.array([1, "a", None], dtype=object),
    np.zeros(3, dtype=[("x", np.int32), ("y", np.float64)]),
    np.arange(4).astype("datetime64[s]"),
    (np.arange(3), np.ones(2, dtype=np.uint8)),
    [np.arange(3), "not an array"],
    {"nested": [np.arange(5), {"b": b"\x00" * 100_000, "s": "text"}], "n": None},
    b"x" * 3_000_000,
]


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("name", MPI_BACKENDS + OTHERS)
def test_empty_and_odd_payloads(world: Any, name: str, mode: str) -> None:
    results = _run(world, min(world.size, 3), progs.roundtrip, BackendSpec(name, mode), ODD_OBJECTS)
    if results is not None:
        assert results[0] == ["sent"] * len(ODD_OBJECTS)
        for reader in results[1:]:
            assert reader == ["ok"] * len(ODD_OBJECTS)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("name", MPI_BACKENDS + OTHERS)
def test_unpicklable_raises_on_writer_and_readers(world: Any, name: str, mode: str) -> None:
    results = _run(world, min(world.size, 3), progs.unpicklable, BackendSpec(name, mode))
    if results is None:
        return
    writer_error, writer_next = results[0]
    assert writer_error.startswith("PayloadError: ") and "pickle" in writer_error, writer_error
    assert writer_next == "sent"
    for reader_error, reader_next in results[1:]:
        assert reader_error.startswith("PayloadError: ") and "could not send" in reader_error, reader_error
        assert reader_next == "ok"


@pytest.mark.parametrize("name", MPI_BACKENDS + OTHERS)
def test_read_before_write_waits(world: Any, name: str) -> None:
    results = _run(world, 2, progs.read_before_write, BackendSpec(name, "native", timeout=30), 0.5)
    if results is not None:
        result, waited = results[1]
        assert result == "ok" and waited >= 0.4


# mpi-bcast and mpi-pkl5 block in mpi4py's collective (no timeout); mpi-buffer's pending Ibcast
# would leave the communicator unusable after a timeout, so only these are tested here; mpi-p2p
# waits in MPI's Wait under the block strategy, so its timeout is the backoff strategy's
@pytest.mark.parametrize("name", ("mpi-p2p", "mpi-shm-win") + OTHERS)
def test_read_times_out_clearly(world: Any, name: str) -> None:
    wait = "backoff" if name == "mpi-p2p" else None
    results = _run(world, 2, progs.read_timeout, BackendSpec(name, "bytes", timeout=0.3, wait=wait))
    if results is not None:
        assert results[1].startswith("TimeoutError: ") and name in results[1] and "0.3 s" in results[1]


@pytest.mark.parametrize("name", MPI_BACKENDS + OTHERS)
def test_exception_inside_with_releases_everything(world: Any, name: str) -> None:
    results = _run(world, 2, progs.raise_inside, BackendSpec(name, "native"))
    if results is not None:
        assert results == ["boom", "boom"]


def test_mp_queue_is_unavailable_under_mpi(world: Any) -> None:
    reason = unavailable_reason("mp-queue", world)
    assert reason and "without --with-mpi" in reason and "one parent" in reason
