"""Process groups: LocalWorld collectives and failures locally; MPIGroup under mpiexec (-m mpi)."""

from __future__ import annotations

import os
import time

import pytest

from pytest_ipcbench.core.group import GroupError, in_mpi_job
from pytest_ipcbench.core.local import LocalGroup, LocalWorld

# ----------------------------------------------------- functions the ranks run (module level)


def collectives(group, token):
    rank, size = group.rank, group.size
    group.barrier()
    return {
        "bcast0": group.bcast(token if rank == 0 else None),
        "bcast_last": group.bcast(f"from {rank}" if rank == size - 1 else None, root=size - 1),
        "gather0": group.gather(rank * 10),
        "gather1": group.gather(rank, root=1),
        "allgather": group.allgather(rank),
        "sum": group.allreduce(rank + 1),
        "max": group.allreduce(rank, "max"),
        "min": group.allreduce(rank, "min"),
        "and": group.allreduce(rank < size, "and"),
        "or": group.allreduce(rank == 2, "or"),
        "size": size,
    }


def fail_on(group, bad_rank):
    group.barrier()
    if group.rank == bad_rank:
        raise ValueError(f"broken on purpose on {group.rank}")
    group.barrier()  # the others wait here for the broken one
    return group.rank


def raise_on(group, bad_rank):
    if group.rank == bad_rank:
        raise ValueError(f"broken on purpose on {group.rank}")
    return group.rank


def sleep_on(group, bad_rank, seconds):
    if group.rank == bad_rank:
        time.sleep(seconds)
    return group.rank


def sleep_in_collective(group, bad_rank, seconds):
    if group.rank == bad_rank:
        time.sleep(seconds)
    group.barrier()
    return group.rank


def die_on(group, bad_rank):
    if group.rank == bad_rank:
        os._exit(3)
    return group.allreduce(1)


def rank_and_pid(group):
    return group.rank, os.getpid()


# ------------------------------------------------------------------------------ local world


@pytest.fixture(scope="module")
def world():
    with LocalWorld(4, timeout=20) as w:
        yield w


def test_collectives_on_four_ranks(world: LocalWorld) -> None:
    results = world.group(4).run(collectives, "tok")
    assert len(results) == 4
    for rank, r in enumerate(results):
        assert r["bcast0"] == "tok"
        assert r["bcast_last"] == "from 3"
        assert r["gather0"] == ([0, 10, 20, 30] if rank == 0 else None)
        assert r["gather1"] == ([0, 1, 2, 3] if rank == 1 else None)
        assert r["allgather"] == [0, 1, 2, 3]
        assert (r["sum"], r["max"], r["min"], r["and"], r["or"]) == (10, 3, 0, True, True)


def test_a_smaller_group_uses_the_first_ranks(world: LocalWorld) -> None:
    results = world.group(2).run(collectives, 7)
    assert [r["size"] for r in results] == [2, 2]
    assert results[0]["allgather"] == [0, 1]
    ranks = [rank for rank, _ in world.run(rank_and_pid, ranks=3)]
    assert ranks == [0, 1, 2]


def test_every_rank_is_its_own_process(world: LocalWorld) -> None:
    pids = [pid for _, pid in world.run(rank_and_pid)]
    assert len(set(pids)) == 4 and pids[0] == os.getpid()
    assert set(pids[1:]) <= set(world.pids)


def test_a_failure_on_one_rank_names_it_and_the_world_recovers(world: LocalWorld) -> None:
    with pytest.raises(GroupError) as info:
        world.run(fail_on, 2)
    message = str(info.value)
    assert "failed on rank 2: rank 2: ValueError: broken on purpose on 2" in message
    assert "rank 1:" not in message  # the ranks that only waited are not blamed
    assert world.run(rank_and_pid, ranks=4)[3][0] == 3  # restarted, works again


def test_a_failure_on_rank_0_names_it(world: LocalWorld) -> None:
    with pytest.raises(GroupError, match=r"failed on rank 0: rank 0: ValueError: broken on purpose on 0"):
        world.run(fail_on, 0)


def test_a_hung_rank_is_a_timeout_error() -> None:
    with LocalWorld(3, timeout=60.0) as w:
        w.run(rank_and_pid)  # started and warm: the short timeout below is for the run alone
        start = time.monotonic()
        with pytest.raises(GroupError, match=r"failed on rank 2: rank 2: did not finish within 1 s \(hung\? in sleep_on, "):
            w.group(3, timeout=1.0).run(sleep_on, 2, 60)
        w.run(rank_and_pid)
        with pytest.raises(GroupError, match=r"failed on rank 1: rank 1: did not answer within 1 s \(hung\? in sleep_in_collective, "):
            w.group(3, timeout=1.0).run(sleep_in_collective, 1, 60)
        assert time.monotonic() - start < 30


def test_a_dead_rank_is_an_error(world: LocalWorld) -> None:
    with pytest.raises(GroupError, match=r"failed on rank 1: rank 1: died"):
        world.run(die_on, 1)
    assert len(world.run(rank_and_pid)) == 4


def test_collectives_only_inside_run(world: LocalWorld) -> None:
    group = world.group(2)
    with pytest.raises(GroupError, match="only inside group.run"):
        group.barrier()
    with pytest.raises(GroupError, match="started from rank 0"):
        LocalGroup(1, 2, {}).run(rank_and_pid)
    with pytest.raises(GroupError, match="no worker processes"):
        LocalGroup(0, 2, {}).run(rank_and_pid)


def test_bad_sizes_and_reductions() -> None:
    with pytest.raises(ValueError, match="at least 1 rank"):
        LocalWorld(0)
    with pytest.raises(ValueError, match="cannot make a group of 5 ranks out of 4"):
        LocalWorld(4).group(5)
    with pytest.raises(GroupError, match="rank 0: ValueError: unknown reduction 'avg'"):
        LocalWorld(1).run(lambda g: g.allreduce(1, "avg"))


def test_one_rank_needs_no_process() -> None:
    w = LocalWorld(1)
    assert w.run(rank_and_pid) == [(0, os.getpid())]
    assert w.pids == []


# --------------------------------------------------------- MPI (mpiexec ... pytest --with-mpi)


@pytest.mark.mpi(min_size=2)
def test_mpi_split_leaves_the_others_out() -> None:
    from pytest_ipcbench.core.group import MPIGroup

    world = MPIGroup.world()
    assert in_mpi_job() or world.size == 1
    sub = world.split(2)
    if world.rank >= 2:
        assert sub is None  # these ranks took no part: they go straight on
    else:
        assert sub is not None and sub.size == 2 and sub.rank == world.rank
        assert sub.allreduce(sub.rank + 1) == 3
        assert world.split(2) is sub  # cached
        with pytest.raises(GroupError, match=r"failed on rank 1: rank 1: ValueError: broken on purpose on 1"):
            sub.run(raise_on, 1)
    whole = world.split(world.size)
    assert whole is not None and whole.allgather(world.rank) == list(range(world.size))
