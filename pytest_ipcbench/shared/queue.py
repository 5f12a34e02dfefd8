"""Queue: a multiprocessing.Queue that pickles on the caller's thread.

``multiprocessing.Queue.put`` pickles in a feeder thread after it returned: an unpicklable item
is lost with a traceback, and a SharedNDArray would take its in-transit reference too late. Here
``put`` pickles first (shared arrays become handles, taking their references now), then hands
the bytes to an ordinary ``multiprocessing.Queue``; on failure it raises and gives the references
back. A SharedNDArray put alone goes as ``marshal`` bytes behind a marker byte no pickle starts
with, and a receiver keeps the handles it parsed before (docs/shared-arrays.md).

MPI ranks need no queue of ours: mpi4py's lowercase ``comm.send(arr)`` pickles, so a
SharedNDArray travels as a handle (uppercase ``comm.Send`` copies the buffer).
"""

from __future__ import annotations

import io
import multiprocessing
import multiprocessing.context
import pickle
from multiprocessing.reduction import ForkingPickler
from typing import Any

from .array import WIRE_MARK, collect_sends, from_wire, to_wire

BaseContext = multiprocessing.context.BaseContext


class Queue:
    """put/get like multiprocessing.Queue; shared arrays travel by handle, the rest pickled.

    ``ctx`` picks the multiprocessing context of the underlying queue (default ``"spawn"``:
    its semaphores can be handed to both spawn and fork children; a fork-context queue cannot
    go to spawn children).  Pass the queue to children as a Process argument, as usual.
    """

    def __init__(self, maxsize: int = 0, *, ctx: str | BaseContext | None = None) -> None:
        if ctx is None or isinstance(ctx, str):
            ctx = multiprocessing.get_context(ctx or "spawn")
        self._q = ctx.Queue(maxsize)

    def put(self, obj: Any, block: bool = True, timeout: float | None = None) -> None:
        """Pickle ``obj`` here (errors raise here), then enqueue the bytes.

        A SharedNDArray on its own goes as a bare handle (``marshal`` of its fields, see
        :func:`.array.to_wire`): the common ``queue.put(batch)`` skips the pickler on both sides.
        """
        wire = to_wire(obj)
        if wire is not None:
            try:
                self._q.put(wire[0], block, timeout)
            except BaseException:
                wire[1].unsend_ref()
                raise
            return
        with collect_sends() as sent:
            try:
                buf = io.BytesIO()
                ForkingPickler(buf, pickle.HIGHEST_PROTOCOL).dump(obj)
                self._q.put(buf.getvalue(), block, timeout)  # getvalue() does not copy
            except BaseException:
                for seg in sent:
                    seg.unsend_ref()
                raise

    def get(self, block: bool = True, timeout: float | None = None) -> Any:
        """Next item; shared arrays are mapped (raises queue.Empty like multiprocessing)."""
        data = self._q.get(block, timeout)
        return from_wire(data) if data[0] == WIRE_MARK else pickle.loads(data)

    def get_nowait(self) -> Any:
        return self.get(False)

    def qsize(self) -> int:
        return self._q.qsize()

    def empty(self) -> bool:
        return self._q.empty()

    def full(self) -> bool:
        return self._q.full()

    def close(self) -> None:
        self._q.close()

    def join_thread(self) -> None:
        self._q.join_thread()

    def cancel_join_thread(self) -> None:
        self._q.cancel_join_thread()

    def __getstate__(self) -> dict:
        return {"q": self._q}  # multiprocessing checks that this happens while spawning

    def __setstate__(self, state: dict) -> None:
        self._q = state["q"]
