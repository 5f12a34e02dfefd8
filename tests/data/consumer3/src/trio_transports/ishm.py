"""``ishm``: a shared-memory store made before the ranks start (``before_ranks``), released after
them (``after_ranks``).

``before_ranks`` makes one sparse segment in /dev/shm, named with ``pytest_ipcbench.core.names``,
with a region per possible writer (a ping-pong opens two at once); every rank maps its writer's
region in ``setup()``. The writer copies the pickle in, then bumps a sequence number;
readers wait for a newer one. ``after_ranks`` unlinks the segment once the ranks ended, before the
session's leak check. Local workers only (mpiexec ranks inherit nothing: skipped with the reason).
"""

from __future__ import annotations

import mmap
import os
import struct
from typing import Any

from pytest_ipcbench import Backend, PayloadError
from pytest_ipcbench.backends.base import Backoff, dumps, loads
from pytest_ipcbench.core import names

_HEAD = struct.Struct("=QQ")  # sequence number, length (ERROR: the writer's error message follows)
# Each field is stored and loaded whole (an aligned 8-byte word through a "Q" memoryview): a
# little-endian struct writes byte by byte, and a reader could see half of a new sequence number.
# The writer stores the length before the sequence number; the reader loads them the other way.
_ERROR = (1 << 64) - 1
SIZE = 64 << 20  # per writer (a ping-pong has two at once: one region per root); sparse: pages are used only where written


class InheritedShmBackend(Backend):
    """See the module docstring."""

    name = "ishm"
    delivery = "store"

    @classmethod
    def before_ranks(cls, size: int) -> str:
        name = names.resource_name("ishm")
        fd = os.open(f"/dev/shm/{name}", os.O_CREAT | os.O_EXCL | os.O_RDWR, 0o600)
        try:
            os.ftruncate(fd, SIZE * size)
        finally:
            os.close(fd)
        return name

    @classmethod
    def after_ranks(cls, made: str) -> None:
        try:
            os.unlink(f"/dev/shm/{made}")
        except FileNotFoundError:
            pass

    def setup(self) -> None:
        made = self.inherited
        if made is None:
            raise RuntimeError("ishm: nothing inherited from before the ranks started")
        fd = os.open(f"/dev/shm/{made}", os.O_RDWR)
        try:  # this root's region of the segment
            self._map: mmap.mmap | None = mmap.mmap(fd, SIZE, offset=SIZE * self.root)
        finally:
            os.close(fd)
        self._head = memoryview(self._map)[:_HEAD.size].cast("Q")
        if self.group.rank == self.root:
            self._head[1] = 0
            self._head[0] = 0
        self._seq = 0
        self.group.barrier()

    def write(self, obj: Any) -> None:
        assert self._map is not None
        self._seq += 1
        try:
            data = dumps(obj)
        except PayloadError as exc:
            message = str(exc).encode()
            self._map[_HEAD.size:_HEAD.size + 8 + len(message)] = struct.pack("<Q", len(message)) + message
            self._head[1] = _ERROR
            self._head[0] = self._seq
            raise
        if len(data) > SIZE - _HEAD.size:
            raise PayloadError(f"ishm: {len(data)} B do not fit its {SIZE} B segment")
        self._map[_HEAD.size:_HEAD.size + len(data)] = data
        self._head[1] = len(data)
        self._head[0] = self._seq

    def read(self) -> Any:
        assert self._map is not None
        backoff = Backoff(self.timeout)
        while True:
            seq = self._head[0]
            if seq > self._seq:
                self._seq, length = seq, self._head[1]
                if length == _ERROR:
                    (n,) = struct.unpack_from("<Q", self._map, _HEAD.size)
                    raise self.writer_failed(self._map[_HEAD.size + 8:_HEAD.size + 8 + n].decode())
                return loads(self._map[_HEAD.size:_HEAD.size + length])
            if not backoff.wait():
                raise self.timeout_error(f"a value newer than number {self._seq}")

    def close(self) -> None:
        if getattr(self, "_head", None) is not None:
            self._head.release()
            self._head = None
        if getattr(self, "_map", None) is not None:
            self._map.close()
        self._map = None
