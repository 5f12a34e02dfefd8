"""``zmq``: a channel over ZeroMQ ``ipc://`` sockets, one message per reader per write.

The writer binds a ROUTER (``ROUTER_MANDATORY``: a message to a reader that is gone raises) at
``ipc://<names.private_dir("zmq")>/router``; every reader connects a DEALER with its rank as
routing id. ``setup()`` waits for a hello (with the instance's random token) from every reader,
so the first write cannot be lost. A reader blocks in ``recv`` (``RCVTIMEO`` is the timeout),
whatever the wait strategy.

A message's first frame starts with its kind: ``b``/``B`` (a pickle, inline below 64 KiB, else
in a second frame), ``a``/``A`` (native: a plain array's dtype and shape, its bytes likewise),
``N`` (native: a pickle-5 header, then one frame per out-of-band buffer) or ``E`` (the writer's
error: ``read()`` raises PayloadError). Large frames are sent with ``copy=False`` and read
zero-copy (read-only): **the writer must not modify a sent object until the readers got it**.

``write()`` returns when the messages are queued (send-only, rule 11). ``close()`` is local:
linger 0, and the owner removes the folder; queued messages are dropped, so close after the
readers read (``deliver`` ends with a barrier).
"""

from __future__ import annotations

import os
import pickle
import secrets
import struct
import threading
from pathlib import Path
from typing import Any

import numpy as np
import zmq

from ..core import names
from .base import Backend, PayloadError, dumps, dumps_oob, loads, loads_oob

_BYTES, _NATIVE, _ARRAY, _ERROR, _HELLO = b"B", b"N", b"A", b"E", b"H"
_BYTES_INLINE, _ARRAY_INLINE = b"b", b"a"  # the data inline in the one frame
_SNDMORE = zmq.SNDMORE
_INLINE_MAX = 65536  # pyzmq's copy threshold: below it a frame is copied anyway
_META_LEN = struct.Struct("<I")
_UNIX_PATH_MAX = 107


class ZMQBackend(Backend):
    """A channel over ZeroMQ ipc sockets (ROUTER to DEALERs); see the module docstring."""

    name = "zmq"
    run_in = "mpi"  # ipcbench run: measured among MPI ranks, as it always was (its history continues)
    delivery = "channel"
    reference = "ref-zmq"
    # ZeroMQ's I/O thread batches sends and wakes the caller's thread through an eventfd only when
    # it sleeps: how many data calls a message costs depends on timing (docs/counters.md, A/A)
    timing_counters = frozenset({"syscalls.data", "io.syscr", "io.syscw"})

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.path: Path | None = None
        self.endpoint = ""
        self._ctx: zmq.Context | None = None
        self._sock: zmq.Socket | None = None
        self._peers: list[bytes] = []
        self._owner = False
        self._ready = False  # setup finished: every socket of the context is ours to close
        self._meta: dict[Any, bytes] = {}  # writer: (dtype, shape) -> encoded description
        self._desc: dict[bytes, Any] = {}  # reader: encoded description -> (dtype, shape)

    # ------------------------------------------------------------------ setup and close

    def setup(self) -> None:
        self.open_collectively(self._bind, self._connect, "bind")
        self._ready = True

    def _bind(self) -> tuple[str, str]:
        self._owner = True
        with names.interrupts_deferred():  # made and recorded together: close() removes it
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
        # the socket file gets the umask's mode (0755): its owner only, like the folder (which
        # already kept others out until now)
        os.chmod(sock_path, 0o700)
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
        self._sock.setsockopt(zmq.RCVTIMEO, max(1, int(self.timeout * 1000)))
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
        try:
            if self._sock is not None:
                self._sock.close(linger=0)
                self._sock = None
            ctx, self._ctx = self._ctx, None
            if ctx is not None and self._ready:
                ctx.destroy(linger=0)  # every socket we made is closed: term() returns at once
            elif ctx is not None:
                # Setup did not finish (Ctrl-C or an error inside it).  A Ctrl-C inside pyzmq's
                # Context.socket() leaves a socket the context does not track yet, alive in the
                # traceback, and destroy() (close what it tracks, then term()) would wait for it
                # forever here.  In a thread of its own it returns once the traceback lets go
                # and the socket's __del__ closes it -- at once when there is no such socket.
                threading.Thread(target=ctx.destroy, kwargs={"linger": 0}, name="ipcb-zmq-close",
                                 daemon=True).start()
            self._ready = False
        finally:  # a Ctrl-C inside the closing above (or the removal) must not leave the folder
            if self._owner and self.path is not None:
                names.remove(self.path)
            self._owner = False

    # ------------------------------------------------------------------ writer

    def write(self, obj: Any) -> None:
        sock = self._sock
        if sock is None or not self._owner:
            raise RuntimeError("zmq: write() is for the root, after setup()")
        try:
            if self.mode == "bytes":
                data = dumps(obj)
                frames: list[Any] = [_BYTES_INLINE + data] if len(data) < _INLINE_MAX else [_BYTES, data]
            elif type(obj) is np.ndarray and obj.flags.c_contiguous and not obj.dtype.hasobject:
                frames = self._array_frames(obj)
            else:
                head, buffers = dumps_oob(obj)
                try:
                    frames = [_NATIVE + head, *(b.raw() for b in buffers)]
                except BufferError as exc:
                    raise PayloadError(f"cannot send a non-contiguous buffer of {type(obj).__name__}: {exc}") from exc
        except PayloadError as exc:
            self._send_all([_ERROR + str(exc).encode("utf-8", "replace")])
            raise
        self._send_all(frames)

    def _array_frames(self, arr: np.ndarray) -> list[Any]:
        """A plain array without pickling: its cached description, then its bytes (inline when small)."""
        key = (arr.dtype.str, arr.shape)
        meta = self._meta.get(key)
        if meta is None:
            if len(self._meta) > 64:
                self._meta.clear()
            desc = pickle.dumps((arr.dtype, arr.shape), protocol=5)
            meta = self._meta[key] = _META_LEN.pack(len(desc)) + desc
        data = arr.reshape(-1).view(np.uint8)
        if data.nbytes < _INLINE_MAX:  # one frame: a copy this small costs less than a frame
            return [b"".join((_ARRAY_INLINE, meta, data))]  # type: ignore[arg-type]  # numpy stubs: a Buffer from 3.12
        return [_ARRAY + meta, data]

    def _send_all(self, frames: list[Any]) -> None:
        sock = self._sock
        assert sock is not None
        last = len(frames) - 1
        for peer in self._peers:
            try:
                sock.send(peer, _SNDMORE)
                if not last:  # the common small message: one frame, no loop
                    sock.send(frames[0])
                    continue
                for i, frame in enumerate(frames):
                    # large frames without a copy (pyzmq copies below its threshold anyway)
                    sock.send(frame, _SNDMORE if i < last else 0, copy=len(frame) < _INLINE_MAX)
            except zmq.ZMQError as exc:
                if exc.errno == zmq.EHOSTUNREACH:
                    raise RuntimeError(f"zmq: reader {peer.decode()} is no longer connected") from None
                raise

    # ------------------------------------------------------------------ reader

    def read(self) -> Any:
        sock = self._sock
        if sock is None or self._owner:
            raise RuntimeError("zmq: read() is for the readers, after setup()")
        try:
            head = sock.recv(copy=False).buffer  # blocks in the kernel up to RCVTIMEO (the timeout)
        except zmq.Again:
            raise self.timeout_error(f"a message on {self.endpoint}") from None
        tag = head[0]  # the kinds say how many frames follow: no RCVMORE query for small messages
        if tag == _ARRAY_INLINE[0] or tag == _ARRAY[0]:
            (n,) = _META_LEN.unpack_from(head, 1)
            start = 1 + _META_LEN.size
            meta = bytes(head[start : start + n])
            desc = self._desc.get(meta)
            if desc is None:
                if len(self._desc) > 64:
                    self._desc.clear()
                desc = self._desc[meta] = pickle.loads(meta)
            if tag == _ARRAY_INLINE[0]:
                return np.frombuffer(head, dtype=desc[0], offset=start + n).reshape(desc[1])
            return np.frombuffer(sock.recv(copy=False).buffer, dtype=desc[0]).reshape(desc[1])
        if tag == _BYTES_INLINE[0]:
            return loads(head[1:])
        if tag == _BYTES[0]:
            return loads(sock.recv(copy=False).buffer)
        more = []
        while sock.get(zmq.RCVMORE):
            more.append(sock.recv(copy=False).buffer)
        if tag == _NATIVE[0]:
            return loads_oob(head[1:], more)
        if tag == _ERROR[0]:
            raise self.writer_failed(bytes(head[1:]).decode("utf-8", "replace"))
        raise RuntimeError(f"zmq: unexpected message kind {bytes(head[:1])!r} on {self.endpoint}")


def _routing_id(rank: int) -> bytes:
    return b"r%d" % rank


__all__ = ["ZMQBackend"]
