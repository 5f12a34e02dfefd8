"""Node layout without MPI: descriptions, the records, and what BackendSpec.open does with a
group that spans nodes (a stand-in group; the real thing is in test_nodes_mpi.py)."""

from __future__ import annotations

import pytest

from pytest_ipcbench.backends import BackendSpec, BackendUnavailable
from pytest_ipcbench.backends.base import get_backend, unavailable_reason
from pytest_ipcbench.backends.hierarchy import HierarchicalStore, needs_hierarchy
from pytest_ipcbench.core.envinfo import collect, describe as describe_env
from pytest_ipcbench.core.nodes import describe, this_node
from pytest_ipcbench.results.results import Result


class TwoNodes:
    """What BackendSpec.open looks at: an MPI group of 4 ranks on 2 nodes."""

    rank, size, is_mpi = 0, 4, True
    nodes, node, node_rank, node_size = 2, 0, 0, 2
    node_of = (0, 0, 1, 1)
    node_sizes = [2, 2]


def test_describe_layouts() -> None:
    assert describe([4]) == "1 node (4 ranks)"
    assert describe([2, 2]) == "2 nodes x 2 ranks"
    assert describe([1, 1, 1]) == "3 nodes x 1 rank"
    assert describe([3, 1]) == "2 nodes (3+1 ranks)"
    assert this_node()


def test_records_carry_the_layout() -> None:
    env = collect(4, node_sizes=[2, 2])
    assert env["nodes"] == 2 and env["ranks_per_node"] == [2, 2]
    assert "nodes: 2 (ranks per node: 2, 2)" in describe_env(env)
    assert "nodes" not in collect(4)  # not known: not claimed
    r = Result("broadcast", "shm", "bytes", "tiny", 64, 4, {"completion": [1.0]}, nodes=2)
    assert Result.from_dict(r.to_dict()).nodes == 2
    old = r.to_dict()
    del old["nodes"]
    assert Result.from_dict(old).nodes == 1  # files from before the field: one node


def test_node_local_channel_is_unavailable_naming_the_layout() -> None:
    reason = unavailable_reason("zmq", TwoNodes())
    assert reason == ("zmq connects ranks of one node only; this group spans 2 nodes x 2 ranks "
                      "(a backend that reaches other nodes declares node_local = False)")
    with pytest.raises(BackendUnavailable, match="2 nodes x 2 ranks"):
        BackendSpec("zmq").open(TwoNodes())


@pytest.mark.parametrize("name, hierarchical", [("shm", True), ("lmdb", True), ("mpi-shm-win", True),
                                                ("mpi-bcast", False), ("mpi-buffer", False)])
def test_which_backends_run_once_per_node(name: str, hierarchical: bool) -> None:
    if reason := unavailable_reason(name):
        pytest.skip(reason)  # e.g. mpi4py not installed
    cls = get_backend(name)
    assert needs_hierarchy(cls, TwoNodes()) is hierarchical
    assert unavailable_reason(name, TwoNodes()) is None
    live = BackendSpec(name, "native").open(TwoNodes())  # not set up: no collective here
    assert isinstance(live, HierarchicalStore) is hierarchical
    assert live.name == name and live.delivery == cls.delivery
    one_node = TwoNodes()
    one_node.nodes, one_node.node_sizes = 1, [4]
    assert not needs_hierarchy(cls, one_node)
