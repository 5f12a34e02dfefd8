"""A ``before_ranks`` backend as a third-party plugin would write it (tests install it as an entry point).

``inshm``: one shared-memory segment made in the parent before the ranks start (``before_ranks``),
named with ``pytest_ipcbench.core.names`` as docs/extending.md advises, and released by the
``after_ranks`` hook when the world of processes ends. A store: the writer copies the pickle into
the segment, then bumps a sequence number; readers poll for a newer one.

``HANG`` (environment ``INSHM_HANG``: ``setup``, ``write``, ``read``): that step waits forever,
for the tests of the hang deadline.
"""

from __future__ import annotations

import mmap
import os
import struct
import time
from typing import Any

from pytest_ipcbench import Backend, PayloadError
from pytest_ipcbench.backends.base import Backoff, dumps, loads
from pytest_ipcbench.core import names

_HEAD = struct.Struct("=QQ")  # sequence number, length (0xFF.. = the writer's error)
# each word stored and loaded whole through a "Q" memoryview (a little-endian struct writes byte
# by byte: a reader could see a torn sequence number); length stored before the sequence number
_ERROR = (1 << 64) - 1


def _hang(step: str) -> None:
    if os.environ.get("INSHM_HANG") == step:
        while True:
            time.sleep(0.05)


class InheritedShm(Backend):
    """See the module docstring."""

    name = "inshm"
    delivery = "store"
    SIZE = 4 << 20

    @classmethod
    def before_ranks(cls, size: int) -> str:
        name = names.resource_name("ishm")
        fd = os.open(f"/dev/shm/{name}", os.O_CREAT | os.O_EXCL | os.O_RDWR, 0o600)
        try:
            os.ftruncate(fd, cls.SIZE)
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
        _hang("setup")
        made = self.inherited
        if made is None:
            raise RuntimeError("inshm: nothing inherited from before the ranks started")
        fd = os.open(f"/dev/shm/{made}", os.O_RDWR)
        try:
            self._map = mmap.mmap(fd, self.SIZE)
        finally:
            os.close(fd)
        self._head = memoryview(self._map)[:_HEAD.size].cast("Q")
        if self.group.rank == self.root:
            self._head[1] = 0
            self._head[0] = 0
        self._seq = 0
        self.group.barrier()

    def write(self, obj: Any) -> None:
        _hang("write")
        self._seq += 1
        try:
            data = dumps(obj)
        except PayloadError as exc:
            message = str(exc).encode()
            self._map[_HEAD.size:_HEAD.size + 8 + len(message)] = struct.pack("<Q", len(message)) + message
            self._head[1] = _ERROR
            self._head[0] = self._seq
            raise
        if len(data) > self.SIZE - _HEAD.size:
            raise PayloadError(f"inshm: {len(data)} B do not fit the {self.SIZE} B segment")
        self._map[_HEAD.size:_HEAD.size + len(data)] = data
        self._head[1] = len(data)
        self._head[0] = self._seq

    def read(self) -> Any:
        _hang("read")
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
        head = getattr(self, "_head", None)
        if head is not None:
            head.release()
            self._head = None
        mapped = getattr(self, "_map", None)
        if mapped is not None:
            mapped.close()
            self._map = None
