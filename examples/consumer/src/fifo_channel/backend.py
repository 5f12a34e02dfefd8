"""``fifo``: a channel over named pipes (FIFOs), one per reader, in a folder the writer makes.

The writer (the root) makes a private folder with pytest-ipcbench's ``names.private_dir`` — so
the folder is named ``ipcb-<pid>-<token>-fifo`` and the plugin's leak check and ``ipcbench
clean`` know it without anything else — and one FIFO per reader in it. The path is broadcast to
the readers (``open_collectively``); every reader opens its FIFO, then the writer opens the write
ends. Named pipes work between any processes of one machine: spawned local workers and MPI ranks
alike (not across machines: setup then fails, naming the ranks that could not find the folder).

One message: a fixed header (tag, length of the head, number of buffers), the buffer lengths, the
head, then the raw buffers. ``bytes`` mode: the head is the pickle. ``native`` mode: the head is a
pickle-5 header and the arrays' memory travels as out-of-band buffers, read straight into their
final place. A writer that cannot pickle sends an error message instead, so readers raise
PayloadError rather than wait. Both sides wait with ``poll`` and give up after ``timeout``.
"""

from __future__ import annotations

import fcntl
import os
import select
import shutil
import struct
import time
from pathlib import Path
from typing import Any

from pytest_ipcbench import Backend
from pytest_ipcbench.backends.base import dumps, dumps_oob, loads, loads_oob
from pytest_ipcbench.core import names

_HEAD = struct.Struct("<cQI")  # tag, head length, number of buffers
_BYTES, _NATIVE, _ERROR = b"B", b"N", b"E"
_F_SETPIPE_SZ = 1031  # Linux: a larger pipe means fewer wake-ups per megabyte
PIPE_SIZE = 1 << 20


class FifoBackend(Backend):
    """See the module docstring."""

    name = "fifo"
    delivery = "channel"

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.path: Path | None = None
        self._fds: dict[int, int] = {}  # writer: reader rank -> write end; reader: its rank -> read end
        self._owner = False

    def setup(self) -> None:
        self.open_collectively(self._create, self._attach, "make its FIFOs")
        if self.group.rank == self.root:  # every reader has its read end open now
            for rank in self.readers:
                fd = os.open(self.path / f"r{rank}", os.O_WRONLY | os.O_NONBLOCK)
                self._fds[rank] = fd
                _grow(fd)
        self.group.barrier()  # readers read only once the writer is connected

    def _create(self) -> str:
        self._owner = True
        path = names.private_dir("fifo")
        for rank in self.readers:
            os.mkfifo(path / f"r{rank}", 0o600)
        return str(path)

    def _attach(self, path: str) -> None:
        self.path = Path(path)
        if self.group.rank != self.root:
            self._fds[self.group.rank] = os.open(self.path / f"r{self.group.rank}", os.O_RDONLY | os.O_NONBLOCK)

    # ------------------------------------------------------------------------------ writer

    def write(self, obj: Any) -> None:
        if self.group.rank != self.root:
            raise RuntimeError("fifo: write() is for the root")
        try:
            if self.mode == "bytes":
                tag, head, buffers = _BYTES, dumps(obj), []
            else:
                head, oob = dumps_oob(obj)
                tag, buffers = _NATIVE, [b.raw() for b in oob]
        except Exception as exc:  # PayloadError: the readers must hear about it
            message = str(exc).encode("utf-8", "replace")
            for fd in self._fds.values():
                self._send(fd, [_HEAD.pack(_ERROR, len(message), 0), message])
            raise
        lengths = struct.pack(f"<{len(buffers)}Q", *(b.nbytes for b in buffers))
        parts = [_HEAD.pack(tag, len(head), len(buffers)) + lengths, head, *buffers]
        for fd in self._fds.values():
            self._send(fd, parts)

    def _send(self, fd: int, parts: list[Any]) -> None:
        deadline = time.monotonic() + self.timeout
        for part in parts:
            view = memoryview(part).cast("B")
            while len(view):
                try:
                    view = view[os.write(fd, view) :]
                except BlockingIOError:
                    if not _poll(fd, select.POLLOUT, deadline):
                        raise TimeoutError(
                            f"fifo ({self.mode} mode): the writer (rank {self.root}) waited {self.timeout:g} s "
                            f"for a reader to take a message and gave up"
                        ) from None

    # ------------------------------------------------------------------------------ reader

    def read(self) -> Any:
        fd = self._fds.get(self.group.rank)
        if fd is None or self.group.rank == self.root:
            raise RuntimeError("fifo: read() is for the readers, after setup()")
        deadline = time.monotonic() + self.timeout
        tag, head_len, count = _HEAD.unpack(self._recv(fd, bytearray(_HEAD.size), deadline))
        lengths = struct.unpack(f"<{count}Q", self._recv(fd, bytearray(8 * count), deadline)) if count else ()
        head = self._recv(fd, bytearray(head_len), deadline)
        if tag == _ERROR:
            raise self.writer_failed(head.decode("utf-8", "replace"))
        if tag == _BYTES:
            return loads(head)
        buffers = [self._recv(fd, bytearray(n), deadline) for n in lengths]
        return loads_oob(head, buffers)

    def _recv(self, fd: int, into: bytearray, deadline: float) -> bytearray:
        view = memoryview(into)
        while len(view):
            try:
                got = os.readv(fd, [view])  # straight into its final place
            except BlockingIOError:
                got = 0
            if got:
                view = view[got:]
            elif not _poll(fd, select.POLLIN, deadline):
                raise self.timeout_error(f"a message on {self.path}")
        return into

    # ------------------------------------------------------------------------------- close

    def close(self) -> None:
        for fd in self._fds.values():
            try:
                os.close(fd)
            except OSError:
                pass
        self._fds = {}
        if self._owner and self.path is not None:
            shutil.rmtree(self.path, ignore_errors=True)
        self.path = None


def _poll(fd: int, event: int, deadline: float) -> bool:
    """Wait until ``fd`` is ready for ``event``; False when the deadline passed first."""
    poller = select.poll()
    poller.register(fd, event)
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            return False
        ready = poller.poll(min(left, 0.5) * 1000)
        if any(mask & event for _, mask in ready):
            return True
        if ready:  # POLLHUP without data: nobody at the other end (yet); do not spin on it
            time.sleep(min(0.01, max(0.0, deadline - time.monotonic())))


def _grow(fd: int) -> None:
    try:
        fcntl.fcntl(fd, _F_SETPIPE_SZ, PIPE_SIZE)
    except OSError:  # above /proc/sys/fs/pipe-max-size for this user: keep the default
        pass

