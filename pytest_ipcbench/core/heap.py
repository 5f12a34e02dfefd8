"""A heap whose large blocks cost the same whatever came before: glibc's malloc thresholds, fixed.

glibc serves a block above its mmap threshold (128 KiB at start) with a fresh ``mmap`` and gives
it back with ``munmap``; the first free of such a block raises the threshold to its size (the
*dynamic* threshold, up to 32 MiB), and the top of the heap is given back to the kernel whenever
more than twice that is free. So whether a 1 MB receive buffer or unpickled array comes with
256 fresh pages to fault in depends on what the process allocated and freed before: the previous
case, and whether the reader verified last iteration (a check that makes two 1 MB copies left
more than the trim threshold free, so every next 1 MB block faulted in again). A broadcast's
readers faulted 456 pages per timed iteration of ``zmq/bytes records-1MB`` in one run and 57 in
the next, and a case read at two speeds from one run to the next; fixed, 0 (the same pattern
in ``tests/core/test_heap.py``: ~1150 a round against 0). Setting the thresholds turns the dynamic one off (as
``MALLOC_MMAP_THRESHOLD_`` and ``MALLOC_TRIM_THRESHOLD_`` do): blocks up to 32 MiB come from
the heap, which keeps up to 128 MiB free, so a steady stream of messages reuses warm pages as a
long-running program's does. Not glibc (or no ``mallopt``): nothing changes.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import sys

M_TRIM_THRESHOLD = -1  # glibc's malloc.h
M_MMAP_THRESHOLD = -3
MMAP_THRESHOLD = 32 * 2**20  # the highest glibc's dynamic threshold goes on 64-bit: its steady state
TRIM_THRESHOLD = 128 * 2**20

_done: bool | None = None


def steady_heap() -> bool:
    """Fix this process's malloc thresholds (once; later calls return the first answer).

    True if both were set; False where there is no glibc ``mallopt`` or it refused.
    """
    global _done
    if _done is not None:
        return _done
    _done = False
    if not sys.platform.startswith("linux"):
        return _done
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):  # musl and others: no mallopt
        return _done
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    _done = bool(mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD)) and bool(mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD))
    return _done


__all__ = ["steady_heap", "MMAP_THRESHOLD", "TRIM_THRESHOLD"]
