"""Shared numpy arrays between processes: handles instead of data, counted and crash safe.

* :class:`SharedNDArray` -- ndarray subclass over a /dev/shm segment; pickles to a handle.
* :class:`SharedNumpyPool` -- reuses segments once nobody holds them (one memcpy per send).
* :class:`Queue` -- multiprocessing-style queue that pickles on the caller's thread.
* :func:`reclaim_orphans` -- unlink segments whose holders all died (``ipcbench clean``).

Design notes live in the module docstrings: :mod:`.segment` (reference count, OFD-lock
liveness, crash safety), :mod:`.array` (handles, views, layout, small-array threshold),
:mod:`.pool`, :mod:`.queue` (and the MPI recipe), :mod:`.experiment` (the shared-array experiment).
"""

from .array import INLINE_BELOW, OtherNodeError, SharedNDArray
from .pool import SharedNumpyPool
from .queue import Queue
from .segment import SegmentGone, SharedMemoryFull, reclaim_orphans

__all__ = [
    "INLINE_BELOW",
    "OtherNodeError",
    "Queue",
    "SegmentGone",
    "SharedMemoryFull",
    "SharedNDArray",
    "SharedNumpyPool",
    "reclaim_orphans",
]
