"""``zmq``: a channel over ZeroMQ ``ipc://`` sockets, one message per reader per write.

Topology: the writer binds one ROUTER socket at ``ipc://<private dir>/router`` (the folder is
``names.private_dir("zmq")``, mode 0o700); every reader connects a DEALER with its rank as
routing id. ``setup()`` is a handshake: each reader sends a hello and the writer waits until it
has one from every reader, so every connection exists before ``setup()`` returns and the first
write cannot be lost (the slow-joiner problem of PUB/SUB does not arise). The ROUTER is
``ROUTER_MANDATORY``: a message to a reader that is gone raises instead of vanishing.

A message is ``[kind, sequence, frames...]`` with kind ``B`` (bytes), ``N`` (native) or ``E``
(the writer's error: ``read()`` raises PayloadError). Each backend instance has its own random
token in the hello, and its own context, so nothing of an earlier instance can be read.

Modes:

* ``bytes``: pickle at write, send the bytes (without a copy when large); a reader unpickles.
* ``native``: pickle protocol 5: a header frame plus one frame per out-of-band buffer, sent with
  ``copy=False`` (pyzmq copies frames below its copy threshold, 64 KiB, and shares the rest).
  A reader unpickles over the received frames (zero-copy; the objects own their frames).
  **Zero-copy send**: the writer must not modify a sent object until the readers got it (the
  I/O thread reads it after ``write()`` returns).

``write()`` returns when the messages are queued (send-only); delivery is the reader's
``read()``. ``close()`` is local: linger 0, context terminated, and the owner removes the folder
(and so the socket file); messages still queued are dropped, so close after the readers read
(``deliver`` ends with a barrier).
"""

from __future__ import annotations

import secrets
import shutil
from pathlib import Path
from typing import Any

import zmq

from ..core import names
from .base import Backend, PayloadError, dumps, dumps_oob, loads, loads_oob

_BYTES, _NATIVE, _ERROR, _HELLO = b"B", b"N", b"E", b"H"
_UNIX_PATH_MAX = 107


class ZMQBackend(Backend):
    """A channel over ZeroMQ ipc sockets (ROUTER to DEALERs); see the module docstring."""

    name = "zmq"
    kind = "channel"

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.path: Path | None = None
        self.endpoint = ""
        self._ctx: zmq.Context | None = None
        self._sock: zmq.Socket | None = None
        self._peers: list[bytes] = []
        self._seq = 0
        self._owner = False

    # ------------------------------------------------------------------ setup and close

    def setup(self) -> None:
        self.open_collectively(self._bind, self._connect, "bind")

    def _bind(self) -> tuple[str, str]:
        self._owner = True
        self.path = names.private_dir("zmq")
        sock_path = self.path / "router"
        if len(str(sock_path)) > _UNIX_PATH_MAX:
            raise RuntimeError(
                f"zmq: socket path {sock_path} is longer than {_UNIX_PATH_MAX} bytes; "
                f"set TMPDIR to a shorter folder"
            )
        self._ctx = zmq.Context()
        self._sock = self._ctx.socket(zmq.ROUTER)
        self._sock.setsockopt(zmq.LINGER, 0)
        self._sock.setsockopt(zmq.ROUTER_MANDATORY, 1)
        self.endpoint = f"ipc://{sock_path}"
        self._sock.bind(self.endpoint)
        return self.endpoint, secrets.token_hex(8)

    def _connect(self, info: tuple[str, str]) -> None:
        # readers say hello; the writer waits for every hello (no slow joiner at the first write)
        self.endpoint, token = info
        if self.group.rank == self.root:
            self._handshake(token)
            return
        self._ctx = zmq.Context()
        self._sock = self._ctx.socket(zmq.DEALER)
        self._sock.setsockopt(zmq.LINGER, 0)
        self._sock.setsockopt(zmq.ROUTING_ID, _routing_id(self.group.rank))
        self._sock.connect(self.endpoint)
        self._sock.send_multipart([_HELLO, token.encode()])

    def _handshake(self, token: str) -> None:
        """Wait for a hello from every reader: then every connection is up."""
        assert self._sock is not None
        waiting = {_routing_id(rank) for rank in self.readers}
        timeout_ms = int(self.timeout * 1000)
        while waiting:
            if not self._sock.poll(timeout_ms):
                ranks = sorted(int(p[1:]) for p in waiting)
                raise self.timeout_error(f"no hello from ranks {ranks} (connected to {self.endpoint}?)") from None
            peer, *frames = self._sock.recv_multipart()
            if frames == [_HELLO, token.encode()]:
                waiting.discard(peer)
        self._peers = [_routing_id(rank) for rank in self.readers]

    def close(self) -> None:
        if self._sock is not None:
            self._sock.close(linger=0)
            self._sock = None
        if self._ctx is not None:
            self._ctx.term()
            self._ctx = None
        if self._owner and self.path is not None:
            shutil.rmtree(self.path, ignore_errors=True)
        self._owner = False

    # ------------------------------------------------------------------ writer

    def write(self, obj: Any) -> None:
        sock = self._sock
        if sock is None or not self._owner:
            raise RuntimeError("zmq: write() is for the root, after setup()")
        self._seq += 1
        seq = b"%d" % self._seq
        try:
            if self.mode == "bytes":
                frames: list[Any] = [_BYTES, seq, dumps(obj)]
            else:
                head, buffers = dumps_oob(obj)
                try:
                    frames = [_NATIVE, seq, head, *(b.raw() for b in buffers)]
                except BufferError as exc:
                    raise PayloadError(f"cannot send a non-contiguous buffer of {type(obj).__name__}: {exc}") from exc
        except PayloadError as exc:
            self._send_all([_ERROR, seq, str(exc).encode("utf-8", "replace")])
            raise
        self._send_all(frames)

    def _send_all(self, frames: list[Any]) -> None:
        assert self._sock is not None
        for peer in self._peers:
            try:
                self._sock.send_multipart([peer, *frames], copy=False)
            except zmq.ZMQError as exc:
                if exc.errno == zmq.EHOSTUNREACH:
                    raise RuntimeError(f"zmq: reader {peer.decode()} is no longer connected") from None
                raise

    # ------------------------------------------------------------------ reader

    def read(self) -> Any:
        sock = self._sock
        if sock is None or self._owner:
            raise RuntimeError("zmq: read() is for the readers, after setup()")
        if not sock.poll(int(self.timeout * 1000)):
            raise self.timeout_error(f"a message on {self.endpoint}")
        kind, _seq, *frames = sock.recv_multipart(copy=False)
        tag = kind.bytes
        if tag == _BYTES:
            return loads(frames[0].buffer)
        if tag == _NATIVE:
            return loads_oob(frames[0].buffer, [f.buffer for f in frames[1:]])
        if tag == _ERROR:
            raise self.writer_failed(frames[0].bytes.decode("utf-8", "replace"))
        raise RuntimeError(f"zmq: unexpected message kind {tag!r} on {self.endpoint}")


def _routing_id(rank: int) -> bytes:
    return b"r%d" % rank


__all__ = ["ZMQBackend"]
