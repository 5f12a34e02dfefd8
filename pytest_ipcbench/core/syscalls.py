"""System calls counted by the kernel itself: ``perf_event_open`` on the tracepoint
``raw_syscalls:sys_enter``, one counter per thread and class of call (a filter on its number).

No external tool: needs tracefs mounted (for the tracepoint's id) and ``perf_event_open`` allowed
(root, ``CAP_PERFMON`` or ``kernel.perf_event_paranoid`` <= 1); nothing here mounts or changes a
setting: without them :func:`syscall_unavailable` says why, and the counters are absent.
"""

from __future__ import annotations

import ctypes
import errno
import functools
import os
import platform
import sys
from typing import Any

#: system call classes, each a list of names (numbers per architecture below); ``other`` is
#: ``total`` minus the classes
SYSCALL_CLASSES: dict[str, tuple[str, ...]] = {
    "data": ("read", "write", "readv", "writev", "pread64", "pwrite64", "preadv", "pwritev", "preadv2", "pwritev2",
             "sendto", "recvfrom", "sendmsg", "recvmsg", "sendmmsg", "recvmmsg", "splice", "tee", "vmsplice",
             "sendfile", "copy_file_range", "process_vm_readv", "process_vm_writev"),
    "sync": ("futex", "futex_waitv", "futex_wake", "futex_wait", "futex_requeue"),
    "mapping": ("mmap", "munmap", "mremap", "ftruncate", "fallocate", "madvise", "brk"),
    "waiting": ("poll", "ppoll", "epoll_wait", "epoll_pwait", "epoll_pwait2", "select", "pselect6", "sched_yield",
                "nanosleep", "clock_nanosleep"),
}

# numbers from the kernel headers (asm/unistd_64.h, asm-generic/unistd.h); futex_wake/wait/requeue
# (Linux 6.7) have the same number everywhere
_NR_X86_64 = {
    "read": 0, "write": 1, "readv": 19, "writev": 20, "pread64": 17, "pwrite64": 18, "preadv": 295, "pwritev": 296,
    "preadv2": 327, "pwritev2": 328, "sendto": 44, "recvfrom": 45, "sendmsg": 46, "recvmsg": 47, "sendmmsg": 307,
    "recvmmsg": 299, "splice": 275, "tee": 276, "vmsplice": 278, "sendfile": 40, "copy_file_range": 326,
    "process_vm_readv": 310, "process_vm_writev": 311, "futex": 202, "futex_waitv": 449, "mmap": 9, "munmap": 11,
    "mremap": 25, "ftruncate": 77, "fallocate": 285, "madvise": 28, "brk": 12, "poll": 7, "ppoll": 271,
    "epoll_wait": 232, "epoll_pwait": 281, "epoll_pwait2": 441, "select": 23, "pselect6": 270, "sched_yield": 24,
    "nanosleep": 35, "clock_nanosleep": 230, "futex_wake": 454, "futex_wait": 455, "futex_requeue": 456,
}
_NR_GENERIC = {  # aarch64 and riscv64 (no poll, epoll_wait or select there)
    "read": 63, "write": 64, "readv": 65, "writev": 66, "pread64": 67, "pwrite64": 68, "preadv": 69, "pwritev": 70,
    "preadv2": 286, "pwritev2": 287, "sendto": 206, "recvfrom": 207, "sendmsg": 211, "recvmsg": 212, "sendmmsg": 269,
    "recvmmsg": 243, "splice": 76, "tee": 77, "vmsplice": 75, "sendfile": 71, "copy_file_range": 285,
    "process_vm_readv": 270, "process_vm_writev": 271, "futex": 98, "futex_waitv": 449, "mmap": 222, "munmap": 215,
    "mremap": 216, "ftruncate": 46, "fallocate": 47, "madvise": 233, "brk": 214, "ppoll": 73, "epoll_pwait": 22,
    "epoll_pwait2": 441, "pselect6": 72, "sched_yield": 124, "nanosleep": 101, "clock_nanosleep": 115,
    "futex_wake": 454, "futex_wait": 455, "futex_requeue": 456,
}
_ARCH = {"x86_64": (_NR_X86_64, 298), "aarch64": (_NR_GENERIC, 241), "riscv64": (_NR_GENERIC, 241)}


TRACEFS_DIRS = ("/sys/kernel/tracing", "/sys/kernel/debug/tracing")
_TRACEPOINT = "events/raw_syscalls/sys_enter/id"


# ------------------------------------------------------------------ system calls (perf_event_open)


class _PerfEventAttr(ctypes.Structure):
    # PERF_ATTR_SIZE_VER0 (64 bytes): all a counting tracepoint needs
    _fields_ = [("type", ctypes.c_uint32), ("size", ctypes.c_uint32), ("config", ctypes.c_uint64),
                ("sample_period", ctypes.c_uint64), ("sample_type", ctypes.c_uint64),
                ("read_format", ctypes.c_uint64), ("flags", ctypes.c_uint64),
                ("wakeup_events", ctypes.c_uint32), ("bp_type", ctypes.c_uint32), ("config1", ctypes.c_uint64)]


_PERF_TYPE_TRACEPOINT = 2
_FLAG_DISABLED, _FLAG_INHERIT = 1 << 0, 1 << 1
_IOC_ENABLE = 0x2400
_IOC_SET_FILTER = 0x40082406  # _IOW('$', 6, char *) on 64-bit


@functools.cache
def _syscall_fn() -> Any:
    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    libc.ioctl.argtypes = (ctypes.c_int, ctypes.c_ulong, ctypes.c_void_p)
    return libc


def _tracepoint_id() -> tuple[int | None, str]:
    for d in TRACEFS_DIRS:
        path = os.path.join(d, _TRACEPOINT)
        try:
            with open(path) as f:
                return int(f.read()), ""
        except PermissionError:
            return None, f"{path} is not readable by this user (run as root or make it readable; see README)"
        except (OSError, ValueError):
            continue
    return None, ("tracefs is not mounted (no raw_syscalls:sys_enter under /sys/kernel/tracing); "
                  "as root: mount -t tracefs nodev /sys/kernel/tracing (make .venv does it; see README)")


def _paranoid() -> str:
    try:
        with open("/proc/sys/kernel/perf_event_paranoid") as f:
            return f.read().strip()
    except OSError:
        return "?"


@functools.cache
def syscall_unavailable() -> str | None:
    """Why this process cannot count its system calls, or None when it can (cached)."""
    if not sys.platform.startswith("linux"):
        return f"system calls are counted with Linux perf_event_open; this is {sys.platform}"
    if platform.machine() not in _ARCH:
        return f"no system call table for {platform.machine()} (known: {', '.join(_ARCH)})"
    tp, why = _tracepoint_id()
    if tp is None:
        return why
    try:
        os.close(_open_counter(tp, os.getpid(), None))
    except OSError as exc:
        if exc.errno in (errno.EACCES, errno.EPERM):
            return (f"perf_event_open denied: kernel.perf_event_paranoid={_paranoid()} and no "
                    "CAP_PERFMON (sudo sysctl kernel.perf_event_paranoid=1; see README)")
        return f"perf_event_open failed: {exc.strerror} (errno {exc.errno})"
    return None


def _open_counter(tp: int, tid: int, filt: str | None) -> int:
    libc = _syscall_fn()
    nr = _ARCH[platform.machine()][1]
    attr = _PerfEventAttr()
    attr.type, attr.size, attr.config = _PERF_TYPE_TRACEPOINT, ctypes.sizeof(_PerfEventAttr), tp
    attr.flags = _FLAG_DISABLED | _FLAG_INHERIT  # inherit: threads a counted thread starts are counted too
    fd = libc.syscall(nr, ctypes.byref(attr), tid, -1, -1, 0)
    if fd < 0:
        e = ctypes.get_errno()
        raise OSError(e, os.strerror(e))
    if filt is not None and libc.ioctl(fd, _IOC_SET_FILTER, ctypes.c_char_p(filt.encode())) != 0:
        e = ctypes.get_errno()
        os.close(fd)
        raise OSError(e, f"tracepoint filter rejected: {os.strerror(e)}")
    return fd


class SyscallCounter:
    """Per thread and class, the tracepoint ``raw_syscalls:sys_enter`` counted in the kernel.

    Opened for a counting pass only (an enabled tracepoint slows every system call); threads
    that exist at :meth:`open` are counted, and the threads they start afterwards (``inherit``).
    """

    def __init__(self) -> None:
        self.fds: dict[str, list[int]] = {}

    def open(self, exclude: frozenset[int] = frozenset()) -> None:
        reason = syscall_unavailable()
        if reason is not None:
            raise OSError(reason)
        tp, _ = _tracepoint_id()
        assert tp is not None
        table = _ARCH[platform.machine()][0]
        filters: dict[str, str | None] = {"total": None}
        filters.update((cls, " || ".join(f"id == {table[n]}" for n in names if n in table))
                       for cls, names in SYSCALL_CLASSES.items())
        try:
            for tid in sorted(int(t) for t in os.listdir("/proc/self/task")):
                if tid in exclude:
                    continue
                for cls, filt in filters.items():
                    try:
                        fd = _open_counter(tp, tid, filt)
                    except FileNotFoundError:
                        break  # a thread that ended meanwhile
                    except OSError as exc:
                        if exc.errno == errno.ESRCH:
                            break
                        raise
                    self.fds.setdefault(cls, []).append(fd)
            libc = _syscall_fn()
            for fds in self.fds.values():
                for fd in fds:
                    libc.ioctl(fd, _IOC_ENABLE, None)
        except BaseException:
            self.close()
            raise

    def read(self) -> dict[str, int]:
        out = {}
        for cls, fds in self.fds.items():
            out[cls] = sum(int.from_bytes(os.read(fd, 8), sys.byteorder) for fd in fds)
        total = out.pop("total")
        counts = {"syscalls.total": total}
        counts.update((f"syscalls.{c}", v) for c, v in out.items())
        counts["syscalls.other"] = total - sum(out.values())
        return counts

    def close(self) -> None:
        for fds in self.fds.values():
            for fd in fds:
                os.close(fd)
        self.fds.clear()
