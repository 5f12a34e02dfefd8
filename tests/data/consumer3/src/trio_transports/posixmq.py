"""``posixmq``: a channel over POSIX message queues (the ``posix-ipc`` package), one per reader.

The writer creates one queue per reader, named ``/ipcb-<pid>-<token>-pmq-r<rank>`` with
``pytest_ipcbench.core.names`` (where /dev/mqueue is mounted, ``resources`` lets the leak check and
``ipcbench clean`` see them); ``close()`` of the writer unlinks them. A message larger than the
queue's message size (8 KiB, the kernel's default limit) travels in chunks; the first says the tag
and the total length.
"""

from __future__ import annotations

import struct
from typing import Any

import posix_ipc

from pytest_ipcbench import Backend, PayloadError
from pytest_ipcbench.backends.base import dumps, loads
from pytest_ipcbench.core import names

_HEAD = struct.Struct("<cQ")
_OK, _ERROR = b"O", b"E"
CHUNK = 8192


class PosixMqBackend(Backend):
    """See the module docstring."""

    name = "posixmq"
    delivery = "channel"
    resources = ("/dev/mqueue/ipcb-{pid}-*",)

    def setup(self) -> None:
        self._queues: dict[int, Any] = {}
        self._owned: list[str] = []
        self.open_collectively(self._create, self._attach, "create its queues")

    def _create(self) -> str:
        base = "/" + names.resource_name("pmq")
        for rank in self.readers:
            name = f"{base}-r{rank}"
            posix_ipc.MessageQueue(name, posix_ipc.O_CREX, max_message_size=CHUNK).close()
            self._owned.append(name)
        return base

    def _attach(self, base: str) -> None:
        for rank in self.readers if self.group.rank == self.root else [self.group.rank]:
            self._queues[rank] = posix_ipc.MessageQueue(f"{base}-r{rank}")

    def write(self, obj: Any) -> None:
        try:
            tag, body = _OK, dumps(obj)
        except PayloadError as exc:
            tag, body = _ERROR, str(exc).encode()
        first = _HEAD.pack(tag, len(body)) + body[:CHUNK - _HEAD.size]
        rest = [body[i:i + CHUNK] for i in range(CHUNK - _HEAD.size, len(body), CHUNK)]
        for rank in self.readers:
            try:
                for part in [first, *rest]:
                    self._queues[rank].send(part, timeout=self.timeout)
            except posix_ipc.BusyError:
                raise TimeoutError(f"posixmq ({self.mode} mode): the writer waited {self.timeout:g} s for rank "
                                   f"{rank} to take a message and gave up") from None
        if tag == _ERROR:
            raise PayloadError(body.decode())

    def read(self) -> Any:
        queue = self._queues[self.group.rank]
        try:
            first, _ = queue.receive(timeout=self.timeout)
            tag, length = _HEAD.unpack_from(first)
            parts = [first[_HEAD.size:]]
            got = len(parts[0])
            while got < length:
                part, _ = queue.receive(timeout=self.timeout)
                parts.append(part)
                got += len(part)
        except posix_ipc.BusyError:
            raise self.timeout_error("a message on its queue") from None
        body = b"".join(parts)
        if tag == _ERROR:
            raise self.writer_failed(body.decode("utf-8", "replace"))
        return loads(body)

    def close(self) -> None:
        for queue in getattr(self, "_queues", {}).values():
            queue.close()
        self._queues = {}
        for name in getattr(self, "_owned", []):
            try:
                posix_ipc.unlink_message_queue(name)
            except posix_ipc.ExistentialError:
                pass
        self._owned = []
