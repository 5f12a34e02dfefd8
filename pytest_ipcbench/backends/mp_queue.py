"""``mp-queue``: the :class:`multiprocessing.Queue` baseline, one message per reader per write.

A queue is shared only by inheritance, so this backend uses the group's mailboxes (one queue per
rank, made by :class:`~pytest_ipcbench.core.group.LocalWorld`); under MPI it is unavailable. The
writer puts one message into every reader's mailbox. Messages carry the instance's token drawn in
``setup()``; a reader drops other tokens (an earlier failed instance's) and empties its mailbox
in ``setup()``, so a rank reads from one live instance at a time.

Modes: ``bytes`` (pickle, put the bytes) and ``native`` (put the object, as users do: the
feeder thread pickles it after ``put()`` returned, so ``write()`` is send-only, rule 11). The
feeder would only print a traceback for an object it cannot pickle, so ``write()`` first pickles
it into a null sink (protocol 5: buffers not copied). A failed write puts an error marker to
every reader, whose ``read()`` raises PayloadError. ``close()`` releases nothing: the mailboxes
are the world's.
"""

from __future__ import annotations

import copyreg
import pickle
import queue
import secrets
import time
from multiprocessing.reduction import ForkingPickler
from typing import Any

from .base import Backend, PayloadError, dumps, loads, mailboxes_of

_BYTES, _NATIVE, _ERROR = "B", "N", "E"


class _NullSink:
    def write(self, data: Any) -> int:
        return len(data)


def _discard(buffer: pickle.PickleBuffer) -> None:
    return None  # out-of-band: not serialized, not copied


def check_picklable(obj: Any) -> None:
    """Raise PayloadError unless the queue's feeder thread will be able to pickle ``obj``."""
    pickler = pickle.Pickler(_NullSink(), protocol=5, buffer_callback=_discard)
    # the reducers the queue's ForkingPickler adds (connections, sockets, ...)
    pickler.dispatch_table = {**copyreg.dispatch_table, **getattr(ForkingPickler, "_extra_reducers", {})}
    try:
        pickler.dump(obj)
    except Exception as exc:
        raise PayloadError(f"cannot pickle {type(obj).__name__}: {exc}") from exc


class MPQueueBackend(Backend):
    """A channel over the group's multiprocessing queues; see the module docstring."""

    name = "mp-queue"
    delivery = "channel"
    reference = "ref-mp-queue"
    local_only = True

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._token = ""
        self._seq = 0
        self._boxes: list[Any] = []

    @classmethod
    def unavailable(cls, group: Any = None) -> str | None:
        if group is not None and group.is_mpi:
            return (
                "mp-queue: multiprocessing.Queue can only connect processes started by one parent; "
                "run it without --with-mpi"
            )
        if group is not None and len(getattr(group, "mailboxes", ())) < group.size:
            return "mp-queue needs a local group whose ranks inherited one queue each (LocalWorld)"
        return super().unavailable(group)

    def setup(self) -> None:
        group = self.group
        self._token = group.bcast(secrets.token_hex(8) if group.rank == self.root else None, root=self.root)
        self._seq = 0
        if group.rank == self.root:
            self._boxes = [mailboxes_of(group)[rank] for rank in self.readers]
        else:
            box = mailboxes_of(group)[group.rank]
            try:  # drop what an earlier instance left behind
                while True:
                    box.get_nowait()
            except queue.Empty:
                pass
        group.barrier()

    # ------------------------------------------------------------------ writer

    def write(self, obj: Any) -> None:
        if not self._boxes and self.readers:
            raise RuntimeError("mp-queue: write() is for the root, after setup()")
        self._seq += 1
        seq = self._seq
        try:
            if self.mode == "bytes":
                message = (_BYTES, self._token, seq, dumps(obj))
            else:
                check_picklable(obj)
                message = (_NATIVE, self._token, seq, obj)
        except PayloadError as exc:
            for box in self._boxes:
                box.put((_ERROR, self._token, seq, str(exc)))
            raise
        for box in self._boxes:
            box.put(message)

    # ------------------------------------------------------------------ reader

    def read(self) -> Any:
        if self.group.rank == self.root:
            raise RuntimeError("mp-queue: read() is for the readers")
        box = mailboxes_of(self.group)[self.group.rank]
        deadline = _Deadline(self.timeout)
        while True:
            try:
                message = box.get(timeout=deadline.left())
            except queue.Empty:
                raise self.timeout_error(f"a message in its mailbox (rank {self.group.rank})") from None
            tag, token, _seq, value = message[:4]
            if token != self._token:
                continue  # left by an earlier instance
            if tag == _BYTES:
                return loads(value)
            if tag == _NATIVE:
                return value
            if tag == _ERROR:
                raise self.writer_failed(value)
            raise RuntimeError(f"mp-queue: unexpected message kind {tag!r}")


class _Deadline:
    def __init__(self, timeout: float) -> None:
        self._end = time.monotonic() + timeout

    def left(self) -> float:
        return max(0.0, self._end - time.monotonic())


__all__ = ["MPQueueBackend"]
