"""Atomic add/load on words of a shared mapping, callable from Python.

Two back ends, chosen per segment and recorded in its header so every process uses the same one:
``LIBATOMIC`` (ctypes calls into libatomic's ``__atomic_fetch_add_{4,8}``: no compile step) and
``FCNTL`` (read-modify-write under an exclusive OFD lock on the header: a system call a change,
and the fd stays open), used only when libatomic cannot be loaded or ``IPCB_ATOMIC=fcntl``
forces it. A plain ``struct`` read-modify-write loses increments under contention.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import os
from collections.abc import Callable

from . import _libc

LIBATOMIC = 1
FCNTL = 2

_SEQ_CST = 5
_MASK = {4: (1 << 32) - 1, 8: (1 << 64) - 1}
_CTYPE = {4: ctypes.c_uint32, 8: ctypes.c_uint64}


def _load_libatomic() -> ctypes.CDLL | None:
    if os.environ.get("IPCB_ATOMIC", "").lower() == "fcntl":
        return None
    for name in ("libatomic.so.1", ctypes.util.find_library("atomic")):
        if not name:
            continue
        try:
            return ctypes.CDLL(name)
        except OSError:
            continue
    return None


_lib = _load_libatomic()
_fetch_add = {}
_load = {}
if _lib is not None:
    for _w in (4, 8):
        _f = getattr(_lib, f"__atomic_fetch_add_{_w}")
        _f.argtypes = [ctypes.c_void_p, _CTYPE[_w], ctypes.c_int]
        _f.restype = _CTYPE[_w]
        _fetch_add[_w] = _f
        _l = getattr(_lib, f"__atomic_load_{_w}")
        _l.argtypes = [ctypes.c_void_p, ctypes.c_int]
        _l.restype = _CTYPE[_w]
        _load[_w] = _l

#: The back end new segments use in this process.
DEFAULT_MODE = LIBATOMIC if _lib is not None else FCNTL


def available(mode: int) -> bool:
    return mode == FCNTL or (mode == LIBATOMIC and _lib is not None)


def fetch_add(mode: int, addr: int, delta: int, width: int, fd: int | None = None) -> int:
    """Add ``delta`` (may be negative) to the ``width``-byte word at ``addr``; return the old value."""
    if mode == LIBATOMIC:
        return _fetch_add[width](addr, delta & _MASK[width], _SEQ_CST)  # an int already (restype)
    assert fd is not None, "the fcntl counter needs the segment's fd"
    _libc.lock_header(fd, 0, 64)
    try:
        word = _CTYPE[width].from_address(addr)
        old = int(word.value)
        word.value = (old + delta) & _MASK[width]
        return old
    finally:
        _libc.unlock_header(fd, 0, 64)


def bind(mode: int, addr: int, delta: int, width: int) -> Callable[[], int] | None:
    """:func:`fetch_add` of ``delta`` at ``addr`` with its arguments converted to C once: a
    call then costs less than half (the counts taken on every handle).  None for the
    fcntl back end, whose descriptor can change (fork): call :func:`fetch_add` there."""
    if mode != LIBATOMIC:
        return None
    return functools.partial(_fetch_add[width], ctypes.c_void_p(addr), _CTYPE[width](delta & _MASK[width]),
                             ctypes.c_int(_SEQ_CST))


def load(mode: int, addr: int, width: int) -> int:
    """Read the aligned ``width``-byte word at ``addr`` (aligned loads are single-copy atomic)."""
    if mode == LIBATOMIC:
        return int(_load[width](addr, _SEQ_CST))
    return int(_CTYPE[width].from_address(addr).value)
