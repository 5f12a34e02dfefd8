"""``pipe``: a channel over ``multiprocessing`` pipes, one per reader, made *before* the ranks start.

A pipe (like a ``multiprocessing.Queue`` or a faster-fifo queue) can only reach another process by
inheritance, when that process is started: it cannot be created in ``setup()`` and sent to ranks
that already run. ``before_ranks(size)`` is pytest-ipcbench's hook for that: it runs in the parent
before the local worker processes start and its result reaches every rank as ``self.inherited``.
Such a backend runs in local workers (plain ``pytest``, ``ipcbench run``'s local phase); under
``mpiexec`` its tests are skipped with the reason.

The pipes outlive one test (``after_ranks`` closes the parent's ends once the ranks ended):
``setup()`` empties this reader's pipe (a failed test may have left a
message in it) before the ranks agree to start. There is one pipe per rank, so two live instances
whose writers send to the same reader would share it: a ping-pong's two directions (writers rank 0
and rank 1) are fine, two instances with the same root open at once are not. ``native`` mode sends
the same pickle as ``bytes`` (a pipe moves bytes).
"""

from __future__ import annotations

import multiprocessing as mp
from typing import Any

from pytest_ipcbench import Backend, PayloadError
from pytest_ipcbench.backends.base import dumps, loads

_OK, _ERROR = b"O", b"E"


class PipeBackend(Backend):
    """See the module docstring."""

    name = "pipe"
    delivery = "channel"

    @classmethod
    def before_ranks(cls, size: int) -> list[tuple[Any, Any]]:
        """In the parent, before the ranks exist: one one-way pipe per rank, (read end, write end)."""
        ctx = mp.get_context("spawn")  # the local workers are spawned
        return [ctx.Pipe(duplex=False) for _ in range(size)]

    @classmethod
    def after_ranks(cls, made: list[tuple[Any, Any]]) -> None:
        """In the parent, once the ranks ended: close its ends of the pipes."""
        for read_end, write_end in made:
            read_end.close()
            write_end.close()

    def setup(self) -> None:
        pipes = self.inherited
        if pipes is None or len(pipes) < self.group.size:
            raise RuntimeError("pipe: no pipes inherited from before the ranks started (a LocalWorld group is needed)")
        self._pipes = pipes
        if self.group.rank != self.root:
            mine = pipes[self.group.rank][0]
            while mine.poll(0):  # what an earlier, failed test left
                mine.recv_bytes()
        self.group.barrier()

    def write(self, obj: Any) -> None:
        try:
            message = _OK + dumps(obj)
        except PayloadError as exc:
            message = _ERROR + str(exc).encode("utf-8", "replace")
            self._send(message)
            raise
        self._send(message)

    def _send(self, message: bytes) -> None:
        for rank in self.readers:
            self._pipes[rank][1].send_bytes(message)

    def read(self) -> Any:
        mine = self._pipes[self.group.rank][0]
        if not mine.poll(self.timeout):
            raise self.timeout_error(f"a message on rank {self.group.rank}'s pipe")
        message = mine.recv_bytes()
        if message[:1] == _ERROR:
            raise self.writer_failed(message[1:].decode("utf-8", "replace"))
        return loads(message[1:])

    def close(self) -> None:
        self._pipes = None  # the pipes belong to the world of processes, not to one backend
