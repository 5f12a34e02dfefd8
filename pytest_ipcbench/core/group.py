"""Process groups: rank, size and the few collectives the harness needs.

:class:`MPIGroup` wraps an mpi4py communicator (SPMD); :class:`~.local.LocalGroup`
(core/local.py) joins the calling process (rank 0, the hub) with spawned workers, so backends
that do not need MPI run with several ranks under plain ``pytest`` too. Code that runs on every
rank is a function ``fn(group, *args)`` started with :meth:`Group.run`: under MPI every rank
already runs the caller; locally rank 0 ships ``fn`` (module level, picklable) to the workers.
"""

from __future__ import annotations

import os
import traceback
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from .errors import IpcbenchError

REDUCE_OPS: dict[str, Callable[[Sequence[Any]], Any]] = {
    "max": max,
    "min": min,
    "sum": sum,
    "and": all,
    "or": any,
}

DEFAULT_TIMEOUT = 300.0


class GroupError(IpcbenchError, RuntimeError):
    """A rank of the group failed, died or did not answer in time."""


@dataclass
class RankFailure:
    """What a failing rank reports to the others."""

    rank: int
    message: str


class Group(ABC):
    """A set of ranks that run the same function; collectives are called by every rank.

    Node layout: ``node`` (index of this rank's node), ``nodes`` (how many), ``node_rank`` and
    ``node_size`` (this rank's place on its node). A local group is one node; an MPI group asks
    MPI which ranks share memory (``COMM_TYPE_SHARED``).
    """

    rank: int
    size: int
    node: int = 0
    nodes: int = 1
    node_rank: int = 0
    node_size: int = 1
    node_of: tuple[int, ...] = (0,)  # the node of each rank, by rank

    @property
    def node_ranks(self) -> list[list[int]]:
        """The ranks on each node, by node index (nodes numbered by their lowest rank)."""
        out: list[list[int]] = [[] for _ in range(self.nodes)]
        for rank, node in enumerate(self.node_of):
            out[node].append(rank)
        return out

    @property
    def node_sizes(self) -> list[int]:
        return [len(r) for r in self.node_ranks]

    @property
    def is_mpi(self) -> bool:
        return False

    @property
    def readers(self) -> list[int]:
        """Every rank but rank 0 (the writer of the broadcast scenario)."""
        return list(range(1, self.size))

    @abstractmethod
    def barrier(self) -> None: ...

    @abstractmethod
    def bcast(self, obj: Any, root: int = 0) -> Any: ...

    @abstractmethod
    def gather(self, obj: Any, root: int = 0) -> list[Any] | None: ...

    def allgather(self, obj: Any) -> list[Any]:
        return self.bcast(self.gather(obj, root=0), root=0)

    def allreduce(self, value: Any, op: str = "sum") -> Any:
        try:
            reduce = REDUCE_OPS[op]
        except KeyError:
            raise ValueError(f"unknown reduction {op!r}; choose one of {sorted(REDUCE_OPS)}") from None
        return reduce(self.allgather(value))

    @abstractmethod
    def run(self, fn: Callable[..., Any], *args: Any) -> list[Any]:
        """Run ``fn(group, *args)`` on every rank; return every rank's result, by rank.

        If a rank raises, every rank raises :class:`GroupError` naming it.
        """


# ------------------------------------------------------------------------------- observers


class GroupObserver(Protocol):
    """Told where an MPI rank waits, so a watchdog can name the rank that did not arrive."""

    def collective(self, what: str | None) -> None:
        """Entering collective ``what`` (``None``: it returned)."""

    def raised(self, text: str) -> None:
        """This rank's own error, caught by :meth:`Group.run` to be reported to every rank."""


_observers: list[GroupObserver] = []


def observe(observer: GroupObserver) -> None:
    _observers.append(observer)


def unobserve(observer: GroupObserver) -> None:
    if observer in _observers:
        _observers.remove(observer)


def _observed(what: str, call: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """``call(*args, **kwargs)``, the observers told that this rank waits in collective ``what``."""
    if not _observers:
        return call(*args, **kwargs)
    for o in _observers:
        o.collective(what)
    try:
        return call(*args, **kwargs)
    finally:
        for o in _observers:
            o.collective(None)


# ---------------------------------------------------------------------------------- failures


class PeerFailed(IpcbenchError):
    """Raised on a rank when another rank failed: its failure, passed along."""

    def __init__(self, failure: RankFailure) -> None:
        super().__init__(failure.message)
        self.failure = failure


def describe_failure(exc: BaseException, at: str = " at {}") -> str:
    """One line for a rank's failure: the exception and where it was raised (a peer's is marked)."""
    if isinstance(exc, PeerFailed):
        return f"(peer) {exc.failure.message}"
    text = "".join(traceback.format_exception_only(type(exc), exc)).strip()
    tb = traceback.extract_tb(exc.__traceback__)
    return text + (at.format(f"{os.path.basename(tb[-1].filename)}:{tb[-1].lineno}") if tb else "")


def raise_failures(outcomes: Sequence[tuple[str, Any]]) -> None:
    """GroupError naming the failed ranks of ``outcomes`` (their own failures first), if any."""
    failures = [value for tag, value in outcomes if tag == "error"]
    own = [f for f in failures if not f.message.startswith("(peer)")]
    if failures:
        shown = own or failures
        lines = "; ".join(f"rank {f.rank}: {f.message}" for f in shown)
        raise GroupError(f"failed on rank {', '.join(str(f.rank) for f in shown)}: {lines}")


# --------------------------------------------------------------------------------------- MPI


class MPIGroup(Group):
    """A group over an mpi4py communicator."""

    def __init__(self, comm: Any) -> None:
        self.comm = comm
        self.rank = comm.Get_rank()
        self.size = comm.Get_size()
        self._splits: dict[int, MPIGroup | None] = {}
        self._node_group: MPIGroup | None = None
        self._leaders_group: MPIGroup | None = None
        # the node layout, collective over comm (every member builds its MPIGroup together):
        # see core/nodes.py
        from .nodes import node_layout

        self.node_comm, self.leaders_comm, layout = node_layout(comm)
        self.node, self.nodes, self.node_rank, self.node_size, self.node_of = layout

    @classmethod
    def world(cls) -> MPIGroup:
        from mpi4py import MPI

        return cls(MPI.COMM_WORLD)

    @property
    def is_mpi(self) -> bool:
        return True

    def barrier(self) -> None:
        _observed("a barrier", self.comm.Barrier)

    def bcast(self, obj: Any, root: int = 0) -> Any:
        return _observed(f"a bcast from rank {root}", self.comm.bcast, obj, root=root)

    def gather(self, obj: Any, root: int = 0) -> list[Any] | None:
        return _observed(f"a gather to rank {root}", self.comm.gather, obj, root=root)

    def allgather(self, obj: Any) -> list[Any]:
        return _observed("an allgather", self.comm.allgather, obj)

    def split(self, n: int) -> MPIGroup | None:
        """Ranks ``< n`` form a new group (collective over them only); the others get None.

        The ranks outside take no part (``MPI_Comm_create_group``), so a rank that is idle for a
        test never has to join it. Made once per ``n``, then cached.
        """
        if not 1 <= n <= self.size:
            raise ValueError(f"cannot make a group of {n} ranks out of {self.size}")
        if self.rank >= n:
            return None
        if n not in self._splits:
            if n == self.size:
                sub = self.comm.Dup()
            else:
                whole = self.comm.Get_group()
                members = whole.Incl(list(range(n)))
                sub = self.comm.Create_group(members, tag=n)
                members.Free()
                whole.Free()
            self._splits[n] = MPIGroup(sub)
        return self._splits[n]

    def run(self, fn: Callable[..., Any], *args: Any) -> list[Any]:
        try:
            outcome: Any = ("ok", fn(self, *args))
        except Exception as exc:  # reported to every rank below
            outcome = ("error", RankFailure(self.rank, describe_failure(exc)))
            for o in _observers:  # shown even if the exchange below never completes
                o.raised(describe_failure(exc, " ({})"))
        outcomes = _observed("the exchange of Group.run's outcomes", self.comm.allgather, outcome)
        raise_failures(outcomes)
        return [value for _, value in outcomes]

    def node_group(self) -> MPIGroup:
        """The ranks of this rank's node as a group (collective over the node; made once)."""
        if self._node_group is None:
            self._node_group = MPIGroup(self.node_comm)
        return self._node_group

    def leaders_group(self) -> MPIGroup | None:
        """The lowest rank of each node as a group (None on the other ranks; collective over the
        leaders; made once)."""
        if self.leaders_comm is None:
            return None
        if self._leaders_group is None:
            self._leaders_group = MPIGroup(self.leaders_comm)
        return self._leaders_group

    def free(self) -> None:
        if self._leaders_group is not None:
            self._leaders_group.free()  # frees leaders_comm, which it wraps
            self.leaders_comm = self._leaders_group = None
        for sub in self._splits.values():
            if sub is not None:
                sub.free()
        self._splits.clear()
        if self._node_group is not None:
            self._node_group.free()  # frees node_comm, which it wraps
            self.node_comm = self._node_group = None
        for c in (self.node_comm, self.leaders_comm):
            if c is not None:
                c.Free()
        self.node_comm = self.leaders_comm = None
        from mpi4py import MPI

        if self.comm is not None and self.comm != MPI.COMM_WORLD:
            self.comm.Free()
        self.comm = None


def comm_of(group: Group) -> Any:
    """The mpi4py communicator of ``group``: the backends that need MPI run on an :class:`MPIGroup`."""
    if not isinstance(group, MPIGroup):
        raise TypeError(f"an MPI backend runs on an MPIGroup, not on a {type(group).__name__}")
    return group.comm


def in_mpi_job() -> bool:
    """True when this process was started by an MPI launcher (Hydra or Open MPI)."""
    keys = ("PMI_RANK", "PMI_SIZE", "PMIX_RANK", "OMPI_COMM_WORLD_SIZE", "MPI_LOCALNRANKS")
    return any(k in os.environ for k in keys)


def launcher_rank_size() -> tuple[int, int] | None:
    """(rank, size) of this process in its MPI launcher's job, read from the environment the
    launcher set (Hydra's PMI, Open MPI's); None outside a job or when the launcher says no size."""
    for rank_key, size_key in (("PMI_RANK", "PMI_SIZE"), ("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE")):
        try:
            return int(os.environ[rank_key]), int(os.environ[size_key])
        except (KeyError, ValueError):
            continue
    return None


__all__ = [
    "Group",
    "GroupError",
    "MPIGroup",
    "comm_of",
    "in_mpi_job",
    "launcher_rank_size",
]
