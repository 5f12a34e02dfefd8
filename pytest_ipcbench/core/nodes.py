"""Which ranks share a node: MPI's ``COMM_TYPE_SHARED`` split, and how to describe the layout.

A rank's *node* is the set of ranks that can share memory with it (one host, or one simulated
host: MPICH splits one machine into ``N`` "nodes" with ``MPIR_CVAR_NUM_CLIQUES=N`` and
``MPIR_CVAR_CLIQUES_BY_BLOCK=1``, or one node per rank with ``MPIR_CVAR_NOLOCAL=1``). Nodes are
numbered by their lowest rank; the lowest rank of each node is its *leader*.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Sequence
from typing import Any

from .errors import UsageError

NodeLayout = tuple[int, int, int, int, tuple[int, ...]]  # node, nodes, node_rank, node_size, node_of


def node_layout(comm: Any) -> tuple[Any, Any, NodeLayout]:
    """Collective over ``comm``: (node communicator, leaders communicator or None, layout).

    The node communicator orders ranks as ``comm`` does, so its rank 0 is the node's lowest rank;
    the leaders communicator joins those rank-0s (None on every other rank), ordered by rank.
    """
    from mpi4py import MPI

    node_comm = comm.Split_type(MPI.COMM_TYPE_SHARED, key=comm.Get_rank())
    leader = node_comm.Get_rank() == 0
    leaders = comm.Split(0 if leader else MPI.UNDEFINED, key=comm.Get_rank())
    if leaders == MPI.COMM_NULL:
        leaders = None
    node = node_comm.bcast(leaders.Get_rank() if leader else None, root=0)
    node_of = tuple(comm.allgather(node))
    if MPI.Comm.Compare(comm, MPI.COMM_WORLD) in (MPI.IDENT, MPI.CONGRUENT):
        # in the environment too: processes this rank starts (spawned workers) are on its node
        _set_node(f"{socket.gethostname()}#{node}")
    return node_comm, leaders, (node, max(node_of) + 1, node_comm.Get_rank(), node_comm.Get_size(), node_of)


NODE_ENV = "IPCBENCH_NODE"  # set once the world's layout is known; inherited by child processes


def this_node() -> str:
    """This process's node: the host name, and the node index in MPI's world once an MPI group
    over the world was made here or in a parent process (simulated nodes share a host name)."""
    return _node


def _set_node(node: str) -> None:
    global _node
    os.environ[NODE_ENV] = _node = node


def check_node_env() -> None:
    """``$IPCBENCH_NODE``, when set, is what :func:`_set_node` writes for this host (``host#index``):
    any other value (``nan``, another host's) would make shared arrays of different nodes look
    local. UsageError naming the variable."""
    value = os.environ.get(NODE_ENV)
    host, sep, index = (value or "").rpartition("#")
    if value is not None and not (sep and host == socket.gethostname() and index.isascii() and index.isdigit()):
        raise UsageError(f"env {NODE_ENV}={value!r}: set by ipcbench itself for its child processes as "
                         f"{socket.gethostname()}#<node index>; unset it")


# Read once: every shared-array handle carries it, and the environment lookup plus
# gethostname() cost more than the rest of pickling one.  Only node_layout() changes it.
_node = os.environ.get(NODE_ENV) or socket.gethostname()


def describe(node_sizes: Sequence[int]) -> str:
    """``[2, 2]`` -> ``"2 nodes x 2 ranks"``; ``[3, 1]`` -> ``"2 nodes (3+1 ranks)"``."""
    sizes = list(node_sizes)
    if len(sizes) == 1:
        return f"1 node ({sizes[0]} rank{'s' if sizes[0] != 1 else ''})"
    if len(set(sizes)) == 1:
        return f"{len(sizes)} nodes x {sizes[0]} rank{'s' if sizes[0] != 1 else ''}"
    return f"{len(sizes)} nodes ({'+'.join(map(str, sizes))} ranks)"


def layout_of(group: Any) -> str:
    """The node layout of a group, for skip reasons and error messages."""
    return describe(getattr(group, "node_sizes", [group.size]))


__all__ = ["NodeLayout", "describe", "layout_of", "node_layout", "this_node"]
