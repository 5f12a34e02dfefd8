"""SharedNumpyPool: reuse segments whose pages are already touched, so a send is one memcpy.

The first pool design reused a buffer when its counter read 1 -- which it also did while the buffer
sat in a multiprocessing.Queue whose feeder thread had not pickled it yet, so the next batch
overwrote the one in flight.  Here a segment is reused only if :meth:`Segment.claim_for_reuse`
says it is free: no array over it left in this process, no in-transit handle (taken inside
``put()``/``pickle`` on the caller's thread), and no other process holding its OFD lock --
the kernel's view of who is alive, so a killed holder does not pin it forever.
"""

from __future__ import annotations

import math
import os
import threading
from collections import OrderedDict
from types import TracebackType

import numpy as np
from numpy.typing import ArrayLike, DTypeLike

from . import array as _array, segment as _segment
from .array import Order, SharedNDArray
from .segment import Segment

_PAGE = 4096


def _round_up(n: int) -> int:
    return max(_PAGE, -(-n // _PAGE) * _PAGE)


class SharedNumpyPool:
    """Hands out SharedNDArrays over pooled segments; bounded, LRU eviction of free segments.

    ``max_bytes`` bounds the data bytes the pool keeps mapped.  When every kept segment is busy
    and a new one would exceed the bound, free ones are evicted (least recently used first);
    if that is not enough the array gets a one-off segment the pool does not keep.  A free
    segment is reused for a request of ``n`` bytes if its capacity is between ``n`` and ``2n``.
    Arrays below ``inline_below`` bytes (default :data:`~.array.INLINE_BELOW`) stay in process
    memory and travel by value.  Use from the creating process only (threads are fine).
    """

    def __init__(self, max_bytes: int = 4 << 30, *, inline_below: int | None = None) -> None:
        self.max_bytes = int(max_bytes)
        self.inline_below = inline_below
        self._segments: OrderedDict[str, Segment] = OrderedDict()  # LRU first
        self._kept = 0
        self._created: set[str] = set()
        self._lock = threading.Lock()
        self._pid = os.getpid()
        self._closed = False
        self.hits = 0
        self.misses = 0

    # ------------------------------------------------------------------ public API
    def from_numpy_array(self, a: ArrayLike) -> SharedNDArray:
        """A shared copy of ``a`` in a pooled segment (dtype, byte order and values exact)."""
        src = np.asarray(a)
        _array._check_dtype(src.dtype)
        order = _array._layout(src)
        if _array._use_inline(src.nbytes, src.dtype, self.inline_below):
            return SharedNDArray.from_numpy_array(src, inline_below=self.inline_below)
        out = self._make(src.shape, src.dtype, order)
        np.copyto(out.view(np.ndarray), src, casting="no")
        return out

    def empty(self, shape: int | tuple[int, ...], dtype: DTypeLike = float, order: Order = "C") -> SharedNDArray:
        """An array over a pooled segment to fill in place (a reused one holds old data)."""
        shape = (shape,) if isinstance(shape, (int, np.integer)) else tuple(int(n) for n in shape)
        dt = np.dtype(dtype)
        _array._check_dtype(dt)
        if order not in ("C", "F"):
            raise ValueError("order must be 'C' or 'F'")
        nbytes = math.prod(shape) * dt.itemsize
        if _array._use_inline(nbytes, dt, self.inline_below):
            return SharedNDArray.empty(shape, dt, order, inline_below=self.inline_below)
        return self._make(shape, dt, order)

    @property
    def nbytes(self) -> int:
        """Data bytes of the segments the pool currently keeps."""
        return self._kept

    @property
    def segment_names(self) -> list[str]:
        return list(self._segments)

    def close(self) -> None:
        """Drop this process's reference to every kept segment and reclaim orphans it created.

        Arrays from the pool still alive here stay valid (mapped until they go) but pickle by
        value from now on; segments other processes still hold live on until they drop them.
        Handles pickled but never unpickled are treated as dead: close the pool after consumers
        got their items.
        """
        with self._lock:
            if self._closed:
                return
            self._closed = True
            kept = list(self._segments.values())
            self._segments.clear()
            self._kept = 0
            created, self._created = self._created, set()
        while kept:
            kept.pop().release()  # no name left bound: the mapping goes with the last array
        existing = [n for n in created if _segment.shm_path(n).exists()]
        if existing:
            _segment.reclaim_orphans(in_transit=True, names=existing)

    def __enter__(self) -> SharedNumpyPool:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()

    # ------------------------------------------------------------------ internals
    def _make(self, shape: tuple[int, ...], dtype: np.dtype, order: Order) -> SharedNDArray:
        if os.getpid() != self._pid:
            raise RuntimeError("a SharedNumpyPool is used only by the process that created it")
        nbytes = math.prod(shape) * dtype.itemsize
        with self._lock:
            if self._closed:
                raise RuntimeError("SharedNumpyPool is closed")
            seg = self._reuse(nbytes)
            if seg is None:
                self.misses += 1
                seg = self._allocate(nbytes)
            else:
                self.hits += 1
            return _array.from_segment(seg, shape, dtype, order)  # anchored before we unlock

    def _reuse(self, nbytes: int) -> Segment | None:
        fits = sorted((s for s in self._segments.values() if nbytes <= s.capacity <= max(2 * nbytes, _PAGE)),
                      key=lambda s: s.capacity)
        for seg in fits:
            if seg.claim_for_reuse():
                self._segments.move_to_end(seg.name)
                return seg
        return None

    def _allocate(self, nbytes: int) -> Segment:
        cap = _round_up(nbytes)
        if self._kept + cap > self.max_bytes:
            self._evict(self._kept + cap - self.max_bytes)
        seg = _segment.create(cap, keep_fd=True)  # its liveness probe: one fcntl, no open
        self._created.add(seg.name)
        if len(self._created) > 2 * len(self._segments) + 1024:
            self._created = {n for n in self._created if _segment.shm_path(n).exists()}
        if self._kept + cap <= self.max_bytes:
            self._segments[seg.name] = seg
            self._kept += cap
        return seg

    def _evict(self, need: int) -> None:
        for name, seg in list(self._segments.items()):
            if need <= 0:
                break
            status = seg.probe()
            if status in ("free", "gone"):
                del self._segments[name]
                self._kept -= seg.capacity
                need -= seg.capacity
