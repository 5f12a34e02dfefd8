"""A SharedNDArray handle crosses no node boundary: refused with a clear error on another node,
delivered on the sender's node. Needs 2 (simulated) nodes; see tests/core/test_nodes_mpi.py."""

from __future__ import annotations

import gc
import os
from typing import Any

import numpy as np
import pytest

from pytest_ipcbench.core import names
from pytest_ipcbench.shared import OtherNodeError, SharedNDArray

pytestmark = pytest.mark.mpi


def test_handle_refused_on_another_node_delivered_on_the_same(tmp_path: Any) -> None:
    from pytest_ipcbench.core.group import MPIGroup

    world = MPIGroup.world()
    if world.nodes < 2 or world.node_size < 2:
        pytest.skip(f"needs 2 nodes of 2 ranks or more; this world is {world.size} ranks on {world.nodes} node(s)")
    comm = world.comm
    same, other = world.node_ranks[0][1], world.node_ranks[1][0]
    outcome = "idle"
    if world.rank == 0:
        a = SharedNDArray.from_numpy_array(np.arange(100_000, dtype=np.float64))
        assert a.is_shared
        comm.send(a, dest=same)
        comm.send(a, dest=other)
        comm.recv(source=same)
        comm.recv(source=other)  # both receivers are done with the handle
        del a
        gc.collect()
        outcome = "sent"
    elif world.rank in (same, other):
        try:
            got = comm.recv(source=0)
            outcome = "ok" if np.array_equal(got, np.arange(100_000, dtype=np.float64)) else "wrong"
            del got
        except OtherNodeError as exc:
            outcome = f"refused: {exc}"
        gc.collect()
        comm.send(None, dest=0)
    outcomes = comm.allgather(outcome)
    assert outcomes[same] == "ok"
    assert outcomes[other].startswith("refused: ") and "was received on node" in outcomes[other]
    assert "send the data instead" in outcomes[other]
    comm.Barrier()
    if world.rank == 0:  # the writer's segment went with its last reference: nothing in transit
        assert not [x for x in names.find_ours(pid=os.getpid())], names.find_ours(pid=os.getpid())
