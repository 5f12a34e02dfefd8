"""Thin ctypes wrappers over libc ``mmap``/``munmap`` and OFD byte-range locks.

Why not :mod:`mmap`: Python's mmap object ``dup()``s the file descriptor and keeps it open for
its whole life (3.13 adds ``trackfd=False``), so every mapped array would cost one fd ("too many
open files" with many arrays).  A raw ``mmap(2)`` keeps a reference to the open file
description itself, so we close the fd right after mapping and the OFD lock we took on it stays
held until ``munmap`` -- or until the kernel tears the mapping down when the process dies.
That is the liveness signal the crash-safety design in :mod:`.segment` relies on.
"""

from __future__ import annotations

import ctypes
import fcntl
import os

_libc = ctypes.CDLL(None, use_errno=True)
_mmap = _libc.mmap
_mmap.restype = ctypes.c_void_p
_mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
_munmap = _libc.munmap
_munmap.restype = ctypes.c_int
_munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]

PROT_READ = 0x1
PROT_WRITE = 0x2
MAP_SHARED = 0x01
MAP_POPULATE = 0x8000  # Linux: prefault the page tables (used by the creator, who writes next)
_MAP_FAILED = ctypes.c_void_p(-1).value

#: Holder locks live at ``LOCK_BASE + pid`` (one byte per process id; beyond EOF is fine for
#: fcntl locks).  Keeping them away from the header lets the fcntl counter fallback lock the
#: header bytes without interfering.
LOCK_BASE = 1 << 40


class _Flock(ctypes.Structure):
    _fields_ = [
        ("l_type", ctypes.c_short),
        ("l_whence", ctypes.c_short),
        ("l_start", ctypes.c_int64),
        ("l_len", ctypes.c_int64),
        ("l_pid", ctypes.c_int32),
    ]


def mmap(fd: int, size: int, populate: bool = False) -> int:
    """Map ``size`` bytes of ``fd`` read-write and shared; return the address."""
    flags = MAP_SHARED | (MAP_POPULATE if populate else 0)
    addr = _mmap(None, size, PROT_READ | PROT_WRITE, flags, fd, 0)
    if addr is None or addr == _MAP_FAILED:
        err = ctypes.get_errno()
        raise OSError(err, f"mmap of {size} bytes failed: {os.strerror(err)}")
    return int(addr)


def munmap(addr: int, size: int) -> None:
    if _munmap(addr, size) != 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err))


def _fcntl(fd: int, cmd: int, lock_type: int, start: int, length: int) -> _Flock:
    raw = fcntl.fcntl(fd, cmd, bytes(_Flock(lock_type, os.SEEK_SET, start, length, 0)))
    return _Flock.from_buffer_copy(raw)


_holder_structs: dict[int, tuple[bytes, bytes]] = {}


def _holder_struct(pid: int) -> tuple[bytes, bytes]:
    """The packed ``struct flock`` (read lock, unlock) of ``pid``'s holder byte, built once per
    pid: taking and dropping it is on every receive."""
    raw = _holder_structs.get(pid)
    if raw is None:
        if len(_holder_structs) > 64:  # a fork child's pid is new: keep the table small
            _holder_structs.clear()
        lock, unlock = (bytes(_Flock(t, os.SEEK_SET, LOCK_BASE + pid, 1, 0)) for t in (fcntl.F_RDLCK, fcntl.F_UNLCK))
        raw = _holder_structs[pid] = (lock, unlock)
    return raw


def hold_lock(fd: int, pid: int) -> None:
    """Take the holder read lock of process ``pid`` on the open file description of ``fd``."""
    fcntl.fcntl(fd, _SETLK, (_holder_structs.get(pid) or _holder_struct(pid))[0])


def drop_lock(fd: int, pid: int) -> None:
    """Release the holder lock of process ``pid`` taken through ``fd``'s open file description."""
    fcntl.fcntl(fd, _SETLK, (_holder_structs.get(pid) or _holder_struct(pid))[1])


_SETLK = fcntl.F_OFD_SETLK


def any_holder(fd: int, exclude_pid: int | None = None) -> bool:
    """True if some open file description other than ``fd``'s holds a holder lock.

    ``exclude_pid`` skips that process's byte (a caller asking "does anybody *else* hold it"
    from a fresh fd, whose own mapping's lock would otherwise count).
    """
    if exclude_pid is None:
        ranges = [(LOCK_BASE, 0)]  # length 0 = up to infinity
    else:
        ranges = [(LOCK_BASE, exclude_pid), (LOCK_BASE + exclude_pid + 1, 0)]
    for start, length in ranges:
        got = _fcntl(fd, fcntl.F_OFD_GETLK, fcntl.F_WRLCK, start, length)
        if got.l_type != fcntl.F_UNLCK:
            return True
    return False


def lock_header(fd: int, start: int, length: int) -> None:
    """Blocking exclusive lock on header bytes (the no-libatomic counter fallback)."""
    _fcntl(fd, fcntl.F_OFD_SETLKW, fcntl.F_WRLCK, start, length)  # EINTR retried (PEP 475)


def unlock_header(fd: int, start: int, length: int) -> None:
    _fcntl(fd, fcntl.F_OFD_SETLK, fcntl.F_UNLCK, start, length)
