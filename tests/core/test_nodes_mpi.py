"""Node layout and node-local backends across nodes, on (simulated) nodes.

``make test`` runs the MPI suite a third time on two simulated nodes::

    MPIR_CVAR_NUM_CLIQUES=2 MPIR_CVAR_CLIQUES_BY_BLOCK=1 mpiexec -n 4 python -m pytest --with-mpi -m mpi

(MPICH then splits ``COMM_TYPE_SHARED`` into ranks 0,1 and 2,3). On one node the tests that need
several are skipped, saying so. A simulated node still shares /dev/shm physically, so these tests
check what the hierarchy promises: each node's resources are created once, by that node's
writer, and every reader gets what was written.
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np
import pytest

from pytest_ipcbench.backends import BackendSpec
from pytest_ipcbench.backends.base import unavailable_reason
from pytest_ipcbench.core import names
from pytest_ipcbench.core.payloads import PayloadSpec
from pytest_ipcbench.harness.transfer import assert_delivered, deliver

pytestmark = pytest.mark.mpi

STORES = ("shm", "lmdb", "mpi-shm-win")


@pytest.fixture(scope="module")
def world() -> Any:
    from pytest_ipcbench.core.group import MPIGroup

    return MPIGroup.world()


def _several_nodes(world: Any) -> None:
    if world.nodes < 2:
        pytest.skip(f"needs ranks on 2 nodes or more; this world is {world.size} ranks on 1 node "
                    "(simulate 2: MPIR_CVAR_NUM_CLIQUES=2 MPIR_CVAR_CLIQUES_BY_BLOCK=1 mpiexec -n 4)")


def test_layout_is_consistent_on_every_rank(world: Any) -> None:
    from mpi4py import MPI

    layouts = world.comm.allgather((world.node, world.nodes, world.node_rank, world.node_size, world.node_of))
    assert len({lay[1] for lay in layouts}) == 1 and len({lay[4] for lay in layouts}) == 1
    assert sum(world.node_sizes) == world.size and len(world.node_sizes) == world.nodes
    assert {(lay[0], lay[2]) for lay in layouts} == {(n, i) for n, ranks in enumerate(world.node_ranks) for i in range(len(ranks))}
    assert world.node_of[world.rank] == world.node
    assert world.node_ranks[world.node][world.node_rank] == world.rank
    # the node communicator is MPI's: its ranks share memory
    assert world.node_comm.Get_size() == world.node_size
    assert (world.leaders_comm is not None) == (world.node_rank == 0)
    if world.leaders_comm is not None:
        assert world.leaders_comm.Get_size() == world.nodes and world.leaders_comm.Get_rank() == world.node
        leaders = world.leaders_group()
        assert leaders.size == world.nodes and leaders.allgather(world.rank) == [r[0] for r in world.node_ranks]
    else:
        assert world.leaders_group() is None
    expected = os.environ.get("MPIR_CVAR_NUM_CLIQUES")
    if expected and os.environ.get("MPIR_CVAR_CLIQUES_BY_BLOCK") == "1" and world.size >= int(expected):
        assert world.nodes == int(expected)
    if os.environ.get("MPIR_CVAR_NOLOCAL") == "1":
        assert world.nodes == world.size
    assert MPI.Get_processor_name()


def test_sub_group_knows_its_nodes(world: Any) -> None:
    sub = world.split(2)
    if sub is None:
        return
    assert sub.nodes == len({world.node_of[0], world.node_of[1]})
    assert sub.node_group().nodes == 1 and sub.node_group().size == sub.node_size


def test_local_group_is_one_node() -> None:
    from pytest_ipcbench.core.local import LocalWorld

    group = LocalWorld(3).group()
    assert (group.node, group.nodes, group.node_size, group.node_ranks) == (0, 1, 3, [[0, 1, 2]])


def _store_once_per_node(group: Any, spec: BackendSpec) -> tuple[int, int, int, Any]:
    """(node, node rank, what this rank created, what it read) over 2 rounds."""
    before = {item.path for item in names.find_ours(pid=os.getpid())}
    values = [{"round": r, "data": np.arange(1000 * (r + 1), dtype=np.float64) * (r + 1)} for r in range(2)]
    got = []
    with spec.open(group) as live:
        made = [item.path for item in names.find_ours(pid=os.getpid()) if item.path not in before]
        # mpi-shm-win's windows are MPI's own segments: count the memory this rank gave them
        created = _window_owner(live) if spec.name == "mpi-shm-win" else len(made)
        for value in values:
            group.barrier()
            if group.rank == spec.root:
                live.write(value)
                if live.delivery == "store":
                    group.barrier()
            else:
                if live.delivery == "store":
                    group.barrier()
                v = live.read()
                got.append(v["round"] == value["round"] and np.array_equal(v["data"], value["data"]))
                del v
        group.barrier()
    return group.node, group.node_rank, created, got


def _window_owner(live: Any) -> int:
    """mpi-shm-win: 1 if this rank's node windows hold memory of this rank (the node's writer)."""
    inner = getattr(live, "inner", live)  # HierarchicalStore across nodes
    return int(inner is not None and inner.owner_bytes > 0)


@pytest.mark.parametrize("root", [0, 1, 3])
@pytest.mark.parametrize("name", STORES)
def test_node_local_store_is_made_once_per_node(world: Any, name: str, root: int) -> None:
    _several_nodes(world)
    if root >= world.size:
        pytest.skip(f"needs {root + 1} ranks")
    spec = BackendSpec(name, "native", root=root)
    if reason := unavailable_reason(name, world):
        pytest.skip(reason)
    out = world.run(_store_once_per_node, spec)
    writers = {}
    for rank, (node, _node_rank, created, got) in enumerate(out):
        if rank != root:
            assert got == [True, True], f"rank {rank} (node {node}) read {got}"
        if created:
            assert node not in writers, f"node {node}: ranks {writers[node]} and {rank} both created resources"
            writers[node] = rank
    # every node with a reader besides its writer has its own store, made by its writer: the
    # root on its node, the lowest rank on the others
    for node, ranks in enumerate(world.node_ranks):
        writer = root if root in ranks else ranks[0]
        if len(ranks) > 1:
            assert writers.get(node) == writer, f"node {node}: made by {writers.get(node)}, expected rank {writer}"
        else:
            assert node not in writers, f"node {node} has one rank and needs no store"


@pytest.mark.parametrize("mode", ("bytes", "native"))
@pytest.mark.parametrize("name", STORES + ("mpi-pkl5",))
def test_every_reader_gets_every_value_across_nodes(world: Any, name: str, mode: str) -> None:
    _several_nodes(world)
    for kind, size in (("dict", 10**3), ("ragged2d", 10**5), ("ndarray", 3 * 10**6)):
        assert_delivered(world.run(deliver, BackendSpec(name, mode), PayloadSpec(kind, size), 3))


def test_channel_of_one_host_is_skipped_naming_the_layout(world: Any) -> None:
    _several_nodes(world)
    reason = unavailable_reason("zmq", world)
    assert reason and "zmq" in reason and f"{world.nodes} nodes" in reason
    with pytest.raises(Exception, match="one node only"):
        BackendSpec("zmq", "bytes").open(world)


def test_results_record_the_nodes(world: Any) -> None:
    from pytest_ipcbench.harness import measure
    from pytest_ipcbench.harness.measure import BufferPayload

    settings = measure.BenchSettings(time_budget=0.05, min_iterations=3, warmup=1)
    result = measure.run_bench(world, BackendSpec("shm", "native"), BufferPayload(4096), "broadcast", settings)
    if world.rank == 0:
        assert result is not None and result.nodes == world.nodes
        assert result.to_dict()["nodes"] == world.nodes
