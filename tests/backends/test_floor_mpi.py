"""Per-message work under MPI, in exact counts (issue 40): one MPI message per small mpi-buffer or
mpi-p2p transfer, no pickling of bytes, bytearray or plain arrays through mpi-shm-win, and the
harness floor in an MPI job. Counts only, never times."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from pytest_ipcbench.backends import BackendSpec
from pytest_ipcbench.core.probes import PickleCounter

pytestmark = pytest.mark.mpi

CALLS = ("Send", "Isend", "Recv", "Irecv", "Bcast", "Ibcast")


@pytest.fixture(scope="module")
def world() -> Any:
    from pytest_ipcbench.core.group import MPIGroup

    return MPIGroup.world()


class _Counting:
    """The communicator, with its message calls counted (the rest passes through)."""

    def __init__(self, comm: Any) -> None:
        self._comm = comm
        self.calls = dict.fromkeys(CALLS, 0)

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._comm, name)
        if name not in CALLS:
            return attr

        def counted(*args: Any, **kwargs: Any) -> Any:
            self.calls[name] += 1
            return attr(*args, **kwargs)
        return counted


def _messages(group: Any, name: str, size: int) -> list[Any]:
    """Per transfer after the first (which sizes the head): the message calls on each rank."""
    obj = np.arange(size, dtype=np.uint8)
    n = 20
    with BackendSpec(name, "native", wait="block").open(group) as live:
        writer = group.rank == live.root
        for _ in range(2):  # the first transfers size the head
            live.write(obj) if writer else live.read()
        counting = live.comm = _Counting(live.comm)
        for _ in range(n):
            if writer:
                live.write(obj)
            else:
                assert np.array_equal(live.read(), obj)
        group.barrier()
        return [{k: v / n for k, v in counting.calls.items() if v}, type(live._head_request).__name__
                if getattr(live, "_head_request", None) is not None else None]


@pytest.mark.parametrize("size", (1, 1000, 65536))
def test_one_message_per_small_mpi_buffer_transfer(world: Any, size: int) -> None:
    # the head carries the data: one broadcast; above HEAD_CAP the array goes alone, one nonblocking
    # broadcast (the reader waits for it or the writer's notice)
    one = {"Ibcast": 1.0} if size > 16384 else {"Bcast": 1.0}
    results = world.run(_messages, "mpi-buffer", size)
    for calls, _ in results:
        assert calls == one, results


def _head_size(group: Any, name: str, size: int) -> int:
    obj = np.arange(size, dtype=np.uint8)
    with BackendSpec(name, "native", wait="block").open(group) as live:
        for _ in range(3):
            live.write(obj) if group.rank == live.root else live.read()
        return int(live._head_size)


def test_a_large_mpi_buffer_transfer_has_a_small_head(world: Any) -> None:
    # the data go on their own above HEAD_CAP: the head before them holds the status and meta only
    from pytest_ipcbench.backends.mpi import MPIBufferBackend

    assert set(world.run(_head_size, "mpi-buffer", 1_000_000)) == {MPIBufferBackend.HEAD_MAX}


def test_one_receive_per_large_mpi_p2p_transfer(world: Any) -> None:
    # the steady data alone, received with one plain Recv into the array (no probe), as the reference
    if world.size != 2:
        pytest.skip("one reader: a plain Send")
    results = world.run(_messages, "mpi-p2p", 1_000_000)
    assert results[0][0] == {"Send": 1.0} and results[1][0] == {"Recv": 1.0}, results


@pytest.mark.parametrize("size", (1, 1000))
def test_one_message_per_small_mpi_p2p_transfer(world: Any, size: int) -> None:
    if world.size != 2:
        pytest.skip("one reader: a plain Send")
    results = world.run(_messages, "mpi-p2p", size)
    assert results[0][0] == {"Send": 1.0}, results
    calls, request = results[1]
    assert calls == {} and request == "Prequest", results  # the reader's head: one persistent request


def _pickles(group: Any) -> list[Any]:
    values = [b"x", b"y" * 70_000, bytearray(b"z" * 100), np.arange(10, dtype=np.float32),
              np.zeros((3, 4), dtype=np.int16)]
    with BackendSpec("mpi-shm-win", "native").open(group) as live:
        writer = group.rank == live.root
        for v in values:  # once each: the arrays' descriptions are pickled (and cached) here
            live.write(v) if writer else live.read()
        counter = PickleCounter()
        counter.patch()
        got = []
        try:
            for _ in range(3):
                for v in values:
                    if writer:
                        live.write(v)
                    else:
                        r = live.read()
                        got.append(type(r) is type(v) and bytes(memoryview(r).cast("B")) == bytes(memoryview(v).cast("B")))
                        del r
                    group.barrier()  # a native value is a view of the window until the next write
        finally:
            counter.restore()
        return [counter.counts["pickle.dumps"], counter.counts["pickle.loads"], all(got)]


def test_mpi_shm_win_moves_bytes_and_arrays_without_pickling(world: Any) -> None:
    if world.nodes > 1:
        pytest.skip("one window per node: across nodes the hierarchy moves the value over MPI")
    for rank, (dumps, loads, ok) in enumerate(world.run(_pickles)):
        assert (dumps, loads) == (0, 0), f"rank {rank}: {dumps} dumps, {loads} loads"
        assert ok, rank


def _floor(group: Any) -> Any:
    from pytest_ipcbench.harness.floor import measure_floor

    return measure_floor(group, rounds=1)


def test_the_floor_in_an_mpi_job(world: Any) -> None:
    floor = world.run(_floor)[0]
    assert floor["group"] == "mpi" and floor["ranks"] == world.size
    assert set(floor["seconds"]) == {"pingpong", "broadcast"} and min(floor["seconds"].values()) > 0


def _steady(group: Any, name: str, wait: str) -> list[Any]:
    """A sequence that enters and leaves the steady fast path of mpi-buffer and mpi-p2p: every
    value read equals what was sent, and a value the reader keeps is never overwritten."""
    from pytest_ipcbench.backends.base import PayloadError

    base = [np.arange(6, dtype=np.uint8)] * 4 + [np.arange(6, dtype=np.int8), np.arange(3, dtype=np.int16),
                                                  np.arange(6, dtype=np.uint8).reshape(2, 3),
                                                  np.asfortranarray(np.arange(6, dtype=np.uint8).reshape(2, 3))]
    big = [np.full(70_000, 1, dtype=np.float64)] * 4
    # large arrays go alone: leave that by another large layout, a small one and a failure
    other = [np.full(3000, 1, dtype=np.int64)] * 3
    sent = ([a + i for i, a in enumerate(base * 2 + big + other + big)] + [np.arange(6, dtype=np.uint8)]
            + big[:3] + ["unpicklable"] + [a + 1 for a in base])
    problems: list[str] = []
    with BackendSpec(name, "native", wait=wait).open(group) as live:
        writer = group.rank == live.root
        kept: list[tuple[Any, Any]] = []
        for i, obj in enumerate(sent):
            if isinstance(obj, str):  # a lambda cannot be pickled: the readers fail too
                try:
                    live.write(lambda: None) if writer else live.read()
                except PayloadError:
                    continue
                problems.append(f"message {i}: no PayloadError")
                continue
            if writer:
                live.write(obj)
                continue
            got = live.read()
            if not (type(got) is np.ndarray and got.dtype == obj.dtype and got.shape == obj.shape
                    and np.array_equal(got, obj) and got.flags.f_contiguous == obj.flags.f_contiguous):
                problems.append(f"message {i}: got {got!r}, sent {obj!r}")
            if i % 3 == 0:
                kept.append((got, obj.copy()))
            del got
        problems += [f"a kept value changed: {got!r}" for got, obj in kept if not np.array_equal(got, obj)]
    return problems


@pytest.mark.parametrize("wait", ("block", "backoff"))
@pytest.mark.parametrize("name", ("mpi-buffer", "mpi-p2p"))
def test_steady_fast_path_delivers_and_keeps_values(world: Any, name: str, wait: str) -> None:
    for rank, problems in enumerate(world.run(_steady, name, wait)):
        assert not problems, f"rank {rank}: {problems}"
