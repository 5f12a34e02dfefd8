"""A node-local store on a group that spans nodes: one copy per node, moved between nodes by MPI.

On a group over several nodes, ``BackendSpec.open`` makes a :class:`HierarchicalStore`: the
writer and one *forwarder* per other node (its lowest rank) form a leaders communicator; the
inner store is opened per node with the node's writer (the root, or the forwarder) as its root.
The writer writes its node's store and posts nonblocking broadcasts to the forwarders (pickled
bytes, or pickle-5 header and buffers), which the next ``write()`` or ``close()`` completes; a
forwarder waits for its broadcast (:class:`~.base.Backoff`, ``timeout``) and writes its node's
store. A failed write is announced and published in every node's store, so every reader raises
PayloadError instead of waiting.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np

from ..core.nodes import layout_of
from .base import Backend, Backoff, Delivery, PayloadError, dumps, dumps_oob, loads, loads_oob, set_across_nodes

if TYPE_CHECKING:
    from ..core.group import Group

_OK, _FAILED = 0, 1


class _WriterFailed:
    """Written to a node's store in place of a value the writer could not send: pickling it
    raises, so the inner store publishes the writer's message as its own write error."""

    def __init__(self, message: str) -> None:
        self.message = message

    def __reduce__(self) -> Any:
        raise PayloadError(self.message)


class HierarchicalStore(Backend):
    """``inner_cls`` run once per node, fed over MPI; see the module docstring."""

    delivery: ClassVar[Delivery] = "store"
    needs_mpi = True

    def __init__(self, inner_cls: type[Backend], group: Group, mode: str = "bytes", root: int = 0,
                 timeout: float = 120.0, wait: str | None = None) -> None:
        # reported as the backend it runs: a class attribute of every other backend, this one's per instance
        self.name = inner_cls.name  # type: ignore[misc]
        self.delivery = inner_cls.delivery  # type: ignore[misc]
        super().__init__(group, mode, root, timeout, wait=wait)
        self.inner_cls = inner_cls
        self.native_views_until_next_write = inner_cls.native_views_until_next_write
        self.inner: Backend | None = None  # this node's store (None on a node of one rank)
        self.leaders: Any = None  # communicator: root (rank 0) + one forwarder per other node
        self._pending: tuple[list[Any], list[Any]] | None = None  # writer: (requests, buffers)

    def __repr__(self) -> str:
        return f"HierarchicalStore({self.name}, {self.mode}, {layout_of(self.group)})"

    # ------------------------------------------------------------------ setup and close

    @property
    def node_root(self) -> int:
        """The node rank of this node's writer: the root on its node, the lowest rank elsewhere."""
        group: Any = self.group
        if group.node == group.node_of[self.root]:
            return group.node_ranks[group.node].index(self.root)
        return 0

    @property
    def forwards(self) -> bool:
        """True on a rank that receives the object from the root and writes its node's store."""
        group: Any = self.group
        return group.rank != self.root and group.node != group.node_of[self.root] and group.node_rank == 0

    def setup(self) -> None:
        from mpi4py import MPI

        self.MPI = MPI
        group: Any = self.group
        leader = group.rank == self.root or self.forwards
        comm = group.comm.Split(0 if leader else MPI.UNDEFINED, key=0 if group.rank == self.root else group.rank + 1)
        self.leaders = None if comm == MPI.COMM_NULL else comm
        node = group.node_group()
        error = None
        if node.size > 1:
            self.inner = self.inner_cls(node, self.mode, self.node_root, self.timeout, wait=self.wait)
            try:
                self.inner.setup()
            except Exception as exc:  # collective over the node: every rank of it raises
                error = f"{type(exc).__name__}: {exc}"
                self.inner = None
        failed = [(r, e) for r, e in enumerate(group.allgather(error)) if e]
        if failed:
            self.close()
            where = "; ".join(f"rank {r}: {e}" for r, e in failed)
            raise RuntimeError(f"{self.name} on {layout_of(group)}: a node's store could not be set up: {where}")

    def close(self) -> None:
        try:
            self._complete_pending()
        except TimeoutError:
            pass  # the readers stopped reading (a failed test): nothing more to deliver
        finally:
            if self.inner is not None:
                self.inner.close()
                self.inner = None
            if self.leaders is not None and self._pending is None:
                self.leaders.Free()
            self.leaders = None

    def _complete_pending(self) -> None:
        if self._pending is None:
            return
        requests, _keep = self._pending
        backoff = Backoff(self.timeout)
        while not self.MPI.Request.Testall(requests):
            if not backoff.wait():
                raise TimeoutError(
                    f"{self.name} on {layout_of(self.group)}: the other nodes did not take the previous "
                    f"value within {self.timeout:g} s"
                )
        self._pending = None

    # ------------------------------------------------------------------ writer

    def write(self, obj: Any) -> None:
        if self.group.rank != self.root:
            raise RuntimeError(f"{self.name}: write() is for the root (rank {self.root})")
        if self.leaders is not None and self.leaders.Get_size() > 1:
            self._complete_pending()
            try:
                parts = self._encode(obj)
                status = _OK
            except PayloadError as exc:
                parts, status = [str(exc).encode("utf-8", "replace")], _FAILED
            self._post(status, parts)
            if status == _FAILED:
                if self.inner is not None:
                    self.inner.write(_WriterFailed(parts[0].decode()))  # publishes, then raises
                raise PayloadError(parts[0].decode())
        if self.inner is not None:
            self.inner.write(obj)

    def _encode(self, obj: Any) -> list[Any]:
        if self.mode == "bytes":
            return [dumps(obj)]
        head, buffers = dumps_oob(obj)
        try:
            return [head] + [b.raw() for b in buffers]
        except BufferError as exc:
            raise PayloadError(f"cannot send a non-contiguous buffer of {type(obj).__name__}: {exc}") from exc

    def _post(self, status: int, parts: list[Any]) -> None:
        """Nonblocking broadcasts from the root: (status, count), the sizes, then each part."""
        sizes = np.array([memoryview(p).nbytes for p in parts], dtype=np.int64)
        head = np.array([status, len(parts)], dtype=np.int64)
        comm = self.leaders
        requests = [comm.Ibcast(head, root=0), comm.Ibcast(sizes, root=0)]
        requests += [comm.Ibcast(p, root=0) for p in parts if memoryview(p).nbytes]
        self._pending = (requests, [head, sizes, parts])

    # ------------------------------------------------------------------ readers

    def read(self) -> Any:
        if self.group.rank == self.root:
            raise RuntimeError(f"{self.name}: read() is for the readers")
        if not self.forwards:
            if self.inner is None:
                raise RuntimeError(f"{self.name}: use read() after setup() and before close()")
            return self.inner.read()
        try:
            obj = self._receive()
        except PayloadError as exc:
            if self.inner is not None:
                try:
                    self.inner.write(_WriterFailed(str(exc)))
                except PayloadError:
                    pass
            raise
        if self.inner is not None:
            self.inner.write(obj)
        return obj

    def _receive(self) -> Any:
        comm, MPI = self.leaders, self.MPI
        head = np.zeros(2, dtype=np.int64)
        request = comm.Ibcast(head, root=0)
        backoff = self.pacer()
        while not request.Test():
            if not backoff.wait():
                raise self.timeout_error(f"the value sent to node {self.group.node} (Ibcast)")
        status, count = int(head[0]), int(head[1])
        sizes = np.zeros(count, dtype=np.int64)
        comm.Ibcast(sizes, root=0).Wait()
        parts = [bytearray(int(n)) for n in sizes]
        MPI.Request.Waitall([comm.Ibcast(p, root=0) for p in parts if len(p)])
        if status == _FAILED:
            raise self.writer_failed(parts[0].decode("utf-8", "replace"))
        if self.mode == "bytes":
            return loads(parts[0])
        return loads_oob(parts[0], parts[1:])


def needs_hierarchy(cls: type[Backend], group: Group | None) -> bool:
    """True when ``group`` spans several nodes and ``cls`` is node-local: a store, or a channel
    that needs MPI (``mpi-shm-win``); another node-local channel is unavailable there instead."""
    return (group is not None and getattr(group, "nodes", 1) > 1 and cls.is_node_local()
            and (cls.delivery == "store" or cls.needs_mpi))


def _open_across_nodes(cls: type[Backend], group: Group, mode: str, root: int, timeout: float,
                       wait: str | None) -> Backend | None:
    """BackendSpec.open's choice: a HierarchicalStore where ``cls`` needs one on ``group``."""
    if needs_hierarchy(cls, group):
        return HierarchicalStore(cls, group, mode, root, timeout, wait=wait)
    return None


set_across_nodes(_open_across_nodes)

__all__ = ["HierarchicalStore", "needs_hierarchy"]
