"""``mp-queue``: the :class:`multiprocessing.Queue` baseline, one message per reader per write.

A queue can only be shared by inheritance, so this backend uses the group's mailboxes: one
queue per rank, made by :class:`~pytest_ipcbench.group.LocalWorld` and inherited by its
workers. The writer puts one message into every reader's mailbox; a reader gets from its own
(``get(timeout=...)``). Under MPI there are no such queues: :meth:`unavailable` says so.

Every backend instance draws a token in ``setup()`` and tags its messages with it; a reader drops
messages with another token (left in a mailbox by an earlier instance that failed), and empties
its mailbox in ``setup()``. So a rank can be the reader of only one live mp-queue instance at a
time (a ping-pong's two instances, 0 -> 1 and 1 -> 0, read from different mailboxes: fine).

Modes:

* ``bytes``: pickle at write, put the bytes (the queue's feeder thread pickles that bytes
  object again, a copy); a reader gets the bytes and unpickles them.
* ``native``: put the object itself, as users of mp.Queue do; the feeder thread pickles it once
  per reader. ``write()`` returns when the object was serialized for the first reader (a
  ``put()`` alone returns before any work is done, which would time nothing; METHOD.md rule 11),
  so an object that cannot be pickled raises PayloadError in ``write()``. For that the writer
  installs an error hook on the mailbox before its feeder thread starts (the documented-private
  ``Queue._on_queue_feeder_error``, the hook concurrent.futures overrides); if a feeder thread
  was already running without it, ``write()`` checks by pickling once itself, then puts.

Either way a failed write puts an error marker to every reader, whose ``read()`` then raises
PayloadError instead of waiting. ``close()`` has nothing to release: the mailboxes belong to
the world.
"""

from __future__ import annotations

import queue
import secrets
import threading
import time
from multiprocessing.queues import Queue as _MPQueue
from multiprocessing.reduction import ForkingPickler
from typing import Any

from .base import Backend, PayloadError, dumps, loads, register

_BYTES, _NATIVE, _ERROR = "B", "N", "E"
_original_feeder_error = _MPQueue._on_queue_feeder_error


class _Ticket:
    """Travels last in a native message: pickling it means the payload before it was pickled."""

    __slots__ = ("done", "error")

    def __init__(self) -> None:
        self.done = threading.Event()
        self.error: BaseException | None = None

    def __reduce__(self) -> tuple[Any, ...]:
        self.done.set()
        return (int, ())

    def fail(self, error: BaseException) -> None:
        self.error = error
        self.done.set()


class _Envelope:
    """A native message as put: the feeder thread pickles it as ``(N, token, seq, obj, 0)``."""

    __slots__ = ("token", "seq", "obj", "ticket", "box")

    def __init__(self, token: str, seq: int, obj: Any, box: Any) -> None:
        self.token, self.seq, self.obj, self.box = token, seq, obj, box
        self.ticket = _Ticket()

    def __reduce__(self) -> tuple[Any, ...]:
        return (tuple, ((_NATIVE, self.token, self.seq, self.obj, self.ticket),))


def _feeder_error(error: BaseException, obj: Any) -> None:
    """Feeder-thread hook: a native message that cannot be pickled fails its write() and its
    reader (an error marker goes into the same mailbox); anything else as the stdlib does."""
    if isinstance(obj, _Envelope):
        message = f"cannot pickle {type(obj.obj).__name__}: {error}"
        try:
            obj.box.put((_ERROR, obj.token, obj.seq, message))
        finally:
            obj.ticket.fail(PayloadError(message))
    else:
        _original_feeder_error(error, obj)


@register
class MPQueueBackend(Backend):
    """A channel over the group's multiprocessing queues; see the module docstring."""

    name = "mp-queue"
    kind = "channel"

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._token = ""
        self._seq = 0
        self._boxes: list[Any] = []
        self._hooked = False

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
            self._boxes = [group.mailboxes[rank] for rank in self.readers]
            hooked = True
            for box in self._boxes:
                if getattr(box, "_thread", None) is None:
                    box._on_queue_feeder_error = _feeder_error  # taken when the thread starts
                hooked = hooked and box.__dict__.get("_on_queue_feeder_error") is _feeder_error
            self._hooked = hooked
        else:
            box = group.mailboxes[group.rank]
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
                for box in self._boxes:
                    box.put(message)
                return
            if not self._hooked:
                try:
                    ForkingPickler.dumps(obj)
                except Exception as exc:
                    raise PayloadError(f"cannot pickle {type(obj).__name__}: {exc}") from exc
            envelopes = [_Envelope(self._token, seq, obj, box) for box in self._boxes]
            for box, envelope in zip(self._boxes, envelopes):
                box.put(envelope)
            if self._hooked and envelopes:
                first = envelopes[0].ticket
                if not first.done.wait(self.timeout):
                    raise TimeoutError(
                        f"mp-queue: the queue's feeder thread did not serialize the object "
                        f"within {self.timeout:g} s"
                    )
                if first.error is not None:
                    raise first.error
        except PayloadError as exc:
            if self.mode == "bytes" or not self._hooked:
                for box in self._boxes:
                    box.put((_ERROR, self._token, seq, str(exc)))
            raise

    # ------------------------------------------------------------------ reader

    def read(self) -> Any:
        if self.group.rank == self.root:
            raise RuntimeError("mp-queue: read() is for the readers")
        box = self.group.mailboxes[self.group.rank]
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
