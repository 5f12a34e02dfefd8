"""A heap whose large blocks cost the same whatever came before: glibc's malloc thresholds, fixed.

glibc serves a block above its mmap threshold with a fresh ``mmap``, raises that threshold
dynamically at the first free of such a block, and trims the heap's top when enough is free. So
whether a 1 MB receive buffer comes with fresh pages to fault in depends on what the process
allocated and freed before (the previous case, last iteration's verification): rule 23. Setting
both thresholds (as ``MALLOC_MMAP_THRESHOLD_`` and ``MALLOC_TRIM_THRESHOLD_`` do) turns the
dynamic one off: blocks up to 32 MiB come from a heap that keeps up to 128 MiB free, so a steady
stream of messages reuses warm pages. Not glibc (or no ``mallopt``): nothing changes.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import sys

M_TRIM_THRESHOLD = -1  # glibc's malloc.h
M_MMAP_THRESHOLD = -3
MMAP_THRESHOLD = 32 * 2**20  # the highest glibc's dynamic threshold goes on 64-bit: its steady state
TRIM_THRESHOLD = 128 * 2**20

@functools.cache
def steady_heap() -> bool:
    """Fix this process's malloc thresholds (once): True if both were set; False where there is no
    glibc ``mallopt`` or it refused."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):  # musl and others: no mallopt
        return False
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    return bool(mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD)) and bool(mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD))


__all__ = ["steady_heap", "MMAP_THRESHOLD", "TRIM_THRESHOLD"]
