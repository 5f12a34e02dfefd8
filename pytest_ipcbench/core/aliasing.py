"""Where to put a copy in memory we lay out ourselves, so that its speed does not depend on chance.

A large copy whose destination starts 1-63 bytes after its source, modulo a page, can run
several times slower when another core has just read the destination (4K aliasing;
``tools/copy_place.py``, docs/measurements/2026-11-code-notes.md). A heap buffer's place in its
page follows the process's history, so the speed did too (rule 23). A store that chooses where a
value goes (``shm``) moves it out of that window (:func:`clear_of_aliasing`); for one that does
not (LMDB), the harness puts the arrays it sends 16 bytes into a page, as a fresh process has
them (:func:`placed`).
"""

from __future__ import annotations

import ctypes
from typing import Any

import numpy as np

PAGE = 4096
NEAR = 64  # a destination 1-63 bytes past its source, modulo a page, copies slowly
#: buffers below this keep their place: for small copies the check costs about what a bad place does
MIN_BYTES = 64 * 1024
#: where glibc's malloc puts a block it maps afresh (above its mmap threshold, as in a fresh
#: process): just after the chunk's 16-byte header, 16 bytes into a page
FRESH_OFFSET = 16


class _PyBuffer(ctypes.Structure):
    _fields_ = [
        ("buf", ctypes.c_void_p), ("obj", ctypes.c_void_p), ("len", ctypes.c_ssize_t),
        ("itemsize", ctypes.c_ssize_t), ("readonly", ctypes.c_int), ("ndim", ctypes.c_int),
        ("format", ctypes.c_char_p), ("shape", ctypes.c_void_p), ("strides", ctypes.c_void_p),
        ("suboffsets", ctypes.c_void_p), ("internal", ctypes.c_void_p),
    ]


_get = ctypes.pythonapi.PyObject_GetBuffer
_get.argtypes, _get.restype = [ctypes.py_object, ctypes.POINTER(_PyBuffer), ctypes.c_int], ctypes.c_int
_release = ctypes.pythonapi.PyBuffer_Release
_release.argtypes, _release.restype = [ctypes.POINTER(_PyBuffer)], None


def buffer_address(buf: Any) -> int:
    """The address of the first byte of any object with the buffer protocol (read-only too), by
    ``PyObject_GetBuffer`` through ctypes (cheaper than numpy's ``__array_interface__``)."""
    view = _PyBuffer()
    _get(buf, ctypes.byref(view), 0)  # raises (ctypes sets the error) for a non-buffer
    try:
        return int(view.buf or 0)
    finally:
        _release(ctypes.byref(view))


def clear_of_aliasing(pos: int, buf: Any, nbytes: int) -> int:
    """``pos``, or ``pos + 64`` when copying ``buf`` (``nbytes`` long) to offset ``pos`` of a
    page-aligned mapping would start 1-63 bytes past the source, modulo a page."""
    if nbytes < MIN_BYTES:
        return pos
    if 0 < (pos - buffer_address(buf)) % PAGE < NEAR:
        return pos + NEAR
    return pos


def placed(arr: np.ndarray, offset: int = FRESH_OFFSET) -> np.ndarray:
    """A copy of a C-contiguous array whose data starts ``offset`` bytes into a page."""
    room = np.empty(arr.nbytes + 2 * PAGE, dtype=np.uint8)
    skip = (offset - buffer_address(room)) % PAGE
    out = room[skip : skip + arr.nbytes].view(arr.dtype).reshape(arr.shape)
    out[...] = arr
    return out


__all__ = ["buffer_address", "clear_of_aliasing", "placed", "PAGE", "NEAR", "MIN_BYTES", "FRESH_OFFSET"]
