"""mpi-shm-win specifics under MPI (the common behaviour is in test_backends_mpi.py): growth of
the window, zero-copy read-only views in native mode, one slot (the writer waits for every
reader), the stream scenario in bytes mode only."""

from __future__ import annotations

import time
from typing import Any

import numpy as np
import pytest

from pytest_ipcbench.backends import BackendSpec
from pytest_ipcbench.harness import measure
from pytest_ipcbench.harness.measure import BenchSettings, BufferPayload

pytestmark = pytest.mark.mpi


@pytest.fixture(scope="module")
def world() -> Any:
    from pytest_ipcbench.core.group import MPIGroup

    return MPIGroup.world()


def _grow(group: Any, mode: str) -> list[Any]:
    from pytest_ipcbench.backends.mpi_shm_win import MPIShmWinBackend

    sizes = [10, MPIShmWinBackend.initial_capacity // 8 + 1000, 3 * 10**6, 100, 9 * 10**6]
    out = []
    with BackendSpec("mpi-shm-win", mode).open(group) as live:
        for n in sizes:
            want = np.arange(n, dtype=np.float64)
            if group.rank == live.root:
                live.write(want)
                out.append("sent")
            else:
                got = live.read()
                out.append(bool(np.array_equal(got, want)))
                if mode == "native" and group.nodes == 1:
                    out.append(not got.flags.writeable and not got.flags.owndata)  # a view of the window
                del got
        inner = getattr(live, "inner", live)
        out.append(len(inner._wins) if inner is not None else 0)
    return out


@pytest.mark.parametrize("mode", ("bytes", "native"))
def test_window_grows_collectively_and_views_are_zero_copy(world: Any, mode: str) -> None:
    results = world.run(_grow, mode)
    for rank, got in enumerate(results):
        if rank == 0 or world.node_size == 1:
            continue
        assert all(x is True for x in got[:-1]), (rank, got)
        assert got[-1] >= 4, f"rank {rank}: expected the control window and 3 or more data windows, got {got[-1]}"


def _one_slot(group: Any) -> list[float]:
    """The writer's second write returns only after the slow reader read the first."""
    with BackendSpec("mpi-shm-win", "bytes").open(group) as live:
        group.barrier()
        if group.rank == live.root:
            t0 = time.monotonic()
            live.write(1)
            live.write(2)
            return [time.monotonic() - t0]
        if group.rank == group.size - 1:
            time.sleep(0.3)
        got = [live.read(), live.read()]
        assert got == [1, 2], got
        return []


def test_writer_waits_for_every_reader(world: Any) -> None:
    group = world.split(2) if world.nodes > 1 else world
    if group is None:
        return
    waited = group.run(_one_slot)[0][0]
    assert waited >= 0.25, f"the second write returned after {waited:.3f} s, before the slow reader read"


def test_stream_in_bytes_mode_and_refused_in_native(world: Any) -> None:
    s = BenchSettings(time_budget=0.05, min_iterations=3, max_iterations=50, warmup=1, window=4)
    result = measure.run_bench(world, BackendSpec("mpi-shm-win", "bytes"), BufferPayload(4096), "stream", s)
    assert result.verified is not None and result.verified.failed == 0 and result.verified.checked > 0
    with pytest.raises(Exception, match="bytes mode"):
        measure.run_bench(world, BackendSpec("mpi-shm-win", "native"), BufferPayload(4096), "stream", s)
