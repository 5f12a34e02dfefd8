"""``uds``: a channel over UNIX domain stream sockets, one connection per reader.

The writer (the root) listens on a socket in a folder named with ``pytest_ipcbench.core.names``
(the leak check and ``ipcbench clean`` know it); every reader connects and says its rank. A
message is a header (tag, length) and the pickle; a writer that cannot pickle sends an error
instead, so its readers raise rather than wait. ``native`` mode sends the same pickle.
"""

from __future__ import annotations

import shutil
import socket
import struct
from pathlib import Path
from typing import Any

from pytest_ipcbench import Backend, PayloadError
from pytest_ipcbench.backends.base import dumps, loads
from pytest_ipcbench.core import names

_HEAD = struct.Struct("<cQ")
_OK, _ERROR = b"O", b"E"
CONNECT_S = 60.0  # setup's own deadline: the read timeout (0.5 s in a timeout check) is for reads


class UdsBackend(Backend):
    """See the module docstring."""

    name = "uds"
    delivery = "channel"

    def setup(self) -> None:
        self._socks: dict[int, socket.socket] = {}
        self._folder: Path | None = None
        self.open_collectively(self._create, self._attach, "listen on its socket")

    def _create(self) -> str:
        self._folder = names.private_dir("uds")
        self._listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._listener.bind(str(self._folder / "sock"))
        self._listener.listen(self.group.size)
        return str(self._folder / "sock")

    def _attach(self, path: str) -> None:
        if self.group.rank == self.root:
            self._listener.settimeout(max(self.timeout, CONNECT_S))
            for _ in self.readers:
                conn, _ = self._listener.accept()
                (rank,) = struct.unpack("<I", _recv_exact(conn, 4))
                conn.settimeout(self.timeout)
                self._socks[rank] = conn
            self._listener.close()
        else:
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            sock.settimeout(max(self.timeout, CONNECT_S))
            sock.connect(path)
            sock.sendall(struct.pack("<I", self.group.rank))
            sock.settimeout(self.timeout)
            self._socks[self.group.rank] = sock

    def write(self, obj: Any) -> None:
        try:
            frame = [_HEAD.pack(_OK, 0), dumps(obj)]
        except PayloadError as exc:
            message = str(exc).encode()
            self._send([_HEAD.pack(_ERROR, len(message)), message])
            raise
        frame[0] = _HEAD.pack(_OK, len(frame[1]))
        self._send(frame)

    def _send(self, parts: list[bytes]) -> None:
        for rank in self.readers:
            try:
                for part in parts:
                    self._socks[rank].sendall(part)
            except TimeoutError:
                raise TimeoutError(f"uds ({self.mode} mode): the writer waited {self.timeout:g} s for rank {rank} "
                                   "to take a message and gave up") from None

    def read(self) -> Any:
        sock = self._socks[self.group.rank]
        try:
            tag, length = _HEAD.unpack(_recv_exact(sock, _HEAD.size))
            body = _recv_exact(sock, length)
        except TimeoutError:
            raise self.timeout_error("a message on its socket") from None
        if tag == _ERROR:
            raise self.writer_failed(bytes(body).decode("utf-8", "replace"))
        return loads(body)

    def close(self) -> None:
        for sock in getattr(self, "_socks", {}).values():
            sock.close()
        self._socks = {}
        listener = getattr(self, "_listener", None)
        if listener is not None:
            listener.close()
        if self._folder is not None:
            shutil.rmtree(self._folder, ignore_errors=True)
            self._folder = None


def _recv_exact(sock: socket.socket, n: int) -> bytearray:
    out = bytearray(n)
    view = memoryview(out)
    while len(view):
        got = sock.recv_into(view)
        if not got:
            raise ConnectionError("uds: the writer closed its socket")
        view = view[got:]
    return out
