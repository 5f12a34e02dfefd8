"""The MPI backends against their references, under MPI (every rank runs these tests):

    mpiexec -n 2 python -m pytest --with-mpi -m mpi tests/harness/test_references_mpi.py

A ratio measured interleaved in the same test (the harness's ping-pong on 2 ranks; a larger
world lends its first two ranks), never an absolute time. Assertions are collective: rank 0
decides, every rank raises the same error.
"""

from __future__ import annotations

from typing import Any

import pytest

from pytest_ipcbench.backends.base import BackendSpec
from pytest_ipcbench.backends.references import reference_of
from pytest_ipcbench.core.group import MPIGroup
from pytest_ipcbench.harness.measure import BenchSettings, BufferPayload, bench_interleaved
from pytest_ipcbench.harness.speed import SpeedAssertionError, assert_not_slower

pytestmark = pytest.mark.mpi

MPI_BACKENDS = ("mpi-p2p", "mpi-buffer", "mpi-bcast", "mpi-pkl5", "mpi-shm-win")
QUICK = BenchSettings(time_budget=0.15, warmup=3)
# before issue 11: mpi-p2p 3.9x its reference at 1 B and 4-10x at 1 MB, mpi-buffer 4.7x at 1 B
BOUNDS = {1: 4.0, 10**6: 3.0}


def _collective(check: Any) -> None:
    """Run ``check()`` on rank 0 only; every rank raises what it raised."""
    world = MPIGroup.world()
    error = None
    if world.rank == 0:
        try:
            check()
        except AssertionError as exc:
            error = str(exc)
    error = world.bcast(error)
    if error:
        raise AssertionError(error)


def _deliver(group: Any, name: str) -> list[str]:
    problems = []
    for mode in ("bytes", "native"):
        for size in (1, 70_000, 2_000_000):
            payload = BufferPayload(size)
            with BackendSpec(name, mode).open(group) as backend:
                for seed in (1, 2, 3):
                    obj = payload.build(seed=seed)
                    if group.rank == backend.root:
                        backend.write(obj)
                    elif not payload.equal(backend.read(), obj):
                        problems.append(f"rank {group.rank}: {name} {mode} {size} got something else")
                    group.barrier()
    return problems


@pytest.mark.parametrize("name", MPI_BACKENDS)
def test_reference_delivers(name: str) -> None:
    world = MPIGroup.world()
    problems = world.allgather(_deliver(world, reference_of(name)))
    assert not [p for ps in problems for p in ps]
    fresh = reference_of(name) + "-fresh"
    if name in ("mpi-p2p", "mpi-buffer"):
        problems = world.allgather(_deliver(world, fresh))
        assert not [p for ps in problems for p in ps]


@pytest.mark.parametrize("size", sorted(BOUNDS))
@pytest.mark.parametrize("name", MPI_BACKENDS)
def test_backend_is_not_far_slower_than_its_reference(name: str, size: int) -> None:
    if name == "mpi-shm-win" and size == 1:
        # measured 4-11x its reference at 1 B (pickle-5 header per message); issue 12's open item
        pytest.skip("mpi-shm-win at 1 B: the pickle-5 path is not yet within 4x of the raw window")
    world = MPIGroup.world()
    specs = [BackendSpec(name, "native"), BackendSpec(reference_of(name), "native")]
    got = bench_interleaved(world, specs, BufferPayload(size), "pingpong", QUICK, rounds=6)

    def check() -> None:
        ours, ref = got
        try:
            assert_not_slower(ours, ref, by_more_than=BOUNDS[size], names=(name, ref.backend))
        except SpeedAssertionError as exc:
            raise AssertionError(str(exc)) from None

    _collective(check)


@pytest.mark.parametrize("name", ["mpi-buffer", "mpi-p2p"])
def test_changing_sizes_grow_and_shrink_the_head(name: str) -> None:
    """The head carries small objects inline and announces the next head's size: objects that
    grow past it, shrink, and keep their size all arrive intact, and kept arrays are not recycled."""
    import numpy as np

    world = MPIGroup.world()
    sizes = [1, 5000, 5000, 100, 20000, 16000, 3, 70000, 8, 8]
    sent = [np.arange(n, dtype=np.uint8) + i for i, n in enumerate(sizes)]
    kept, bad = [], []
    with BackendSpec(name, "native").open(world) as backend:
        for i, obj in enumerate(sent):
            if world.rank == backend.root:
                backend.write(obj)
            else:
                got = backend.read()
                kept.append(got)  # held: the next read of this shape must not overwrite it
                bad += [] if np.array_equal(got, obj) else [i]
    if world.rank != 0:
        bad += [i for i, (k, o) in enumerate(zip(kept, sent)) if not np.array_equal(k, o)]
    assert not [b for bs in world.allgather(bad) for b in bs]
