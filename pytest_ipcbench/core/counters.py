"""Counters a rank reads about itself: what a message costs in counts that do not move with load.

docs/method.md rule 20. One :class:`CounterProbe` per rank measures its whole process (every thread: zmq
and MPI have helper threads) between :meth:`~CounterProbe.snapshot` calls:

* ``faults.minor``, ``faults.major``, ``ctx.voluntary``, ``ctx.involuntary``:
  ``getrusage(RUSAGE_SELF)``, no tool;
* ``io.rchar``, ``io.wchar``, ``io.syscr``, ``io.syscw``: ``/proc/self/io`` (bytes through the
  kernel's read and write families, and their calls), no tool;
* ``pickle.dumps``, ``pickle.loads`` and their ``_bytes``: calls seen by wrapping, while counting
  only, ``pickle.dumps/loads``, ``multiprocessing.reduction.ForkingPickler.dumps/loads`` (what
  ``multiprocessing.Queue`` uses, in its feeder thread too) and mpi4py's ``MPI.pickle`` (the
  lower-case ``send/recv/bcast`` of a communicator). Not seen: ``pickle.Pickler`` objects and
  functions bound before counting started (``from pickle import dumps``), C code calling the
  ``_pickle`` module directly;
* ``syscalls.total`` and by class ``syscalls.data|sync|mapping|waiting|other``
  (:data:`SYSCALL_CLASSES`): exact in-kernel counts of the tracepoint ``raw_syscalls:sys_enter``,
  one ``perf_event_open`` counter per thread and class (a tracepoint filter on the system call
  number), opened only while counting. Needs tracefs mounted (for the tracepoint's id) and
  ``perf_event_open`` allowed (root, ``CAP_PERFMON`` or ``kernel.perf_event_paranoid`` <= 1);
  nothing here mounts or changes a setting: without them the counters are absent with the reason
  (:func:`syscall_unavailable`), never 0;
* ``alloc.peak_bytes`` and ``alloc.net_bytes``: tracemalloc (numpy reports its buffers to it),
  in a pass of their own (tracing slows every allocation) by :class:`AllocProbe`.
"""

from __future__ import annotations

import ctypes
import errno
import os
import pickle
import platform
import resource
import sys
import threading
import tracemalloc
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any, Callable

from .errors import IpcbenchError

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

RUSAGE_COUNTERS = ("faults.minor", "faults.major", "ctx.voluntary", "ctx.involuntary")
IO_COUNTERS = ("io.rchar", "io.wchar", "io.syscr", "io.syscw")
PICKLE_COUNTERS = ("pickle.dumps", "pickle.dumps_bytes", "pickle.loads", "pickle.loads_bytes")
SYSCALL_COUNTERS = ("syscalls.total", *(f"syscalls.{c}" for c in SYSCALL_CLASSES), "syscalls.other")
ALLOC_COUNTERS = ("alloc.peak_bytes", "alloc.net_bytes")
#: deep mode's counters (harness/deep.py, opt-in): bytes and calls of memcpy-like copies (valgrind's
#: DHAT in copy mode) and instructions executed (callgrind's Ir), every thread of the process
DEEP_COUNTERS = ("copied.bytes", "copied.calls", "instructions")
#: every counter, in the order reports show them
COUNTERS = (*SYSCALL_COUNTERS, *IO_COUNTERS, *RUSAGE_COUNTERS, *PICKLE_COUNTERS, *ALLOC_COUNTERS, *DEEP_COUNTERS)

_ORIG = (pickle.dumps, pickle.loads)  # pickle's own functions, for mpi4py's Pickle

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
_IOC_ENABLE, _IOC_DISABLE, _IOC_RESET = 0x2400, 0x2401, 0x2403
_IOC_SET_FILTER = 0x40082406  # _IOW('$', 6, char *) on 64-bit
_libc: Any = None


def _syscall_fn() -> Any:
    global _libc
    if _libc is None:
        _libc = ctypes.CDLL(None, use_errno=True)
        _libc.syscall.restype = ctypes.c_long
        _libc.ioctl.argtypes = (ctypes.c_int, ctypes.c_ulong, ctypes.c_void_p)
    return _libc


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


_UNAVAILABLE: list[str | None] = []  # cached answer of syscall_unavailable


def syscall_unavailable() -> str | None:
    """Why this process cannot count its system calls, or None when it can (cached)."""
    if _UNAVAILABLE:
        return _UNAVAILABLE[0]
    reason: str | None = None
    if not sys.platform.startswith("linux"):
        reason = f"system calls are counted with Linux perf_event_open; this is {sys.platform}"
    elif platform.machine() not in _ARCH:
        reason = f"no system call table for {platform.machine()} (known: {', '.join(_ARCH)})"
    else:
        tp, why = _tracepoint_id()
        if tp is None:
            reason = why
        else:
            try:
                fd = _open_counter(tp, os.getpid(), None)
                os.close(fd)
            except OSError as exc:
                if exc.errno in (errno.EACCES, errno.EPERM):
                    reason = (f"perf_event_open denied: kernel.perf_event_paranoid={_paranoid()} and no "
                              "CAP_PERFMON (sudo sysctl kernel.perf_event_paranoid=1; see README)")
                else:
                    reason = f"perf_event_open failed: {exc.strerror} (errno {exc.errno})"
    _UNAVAILABLE.append(reason)
    return reason


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


def _filters() -> dict[str, str | None]:
    table = _ARCH[platform.machine()][0]
    out: dict[str, str | None] = {"total": None}
    for cls, names in SYSCALL_CLASSES.items():
        out[cls] = " || ".join(f"id == {table[n]}" for n in names if n in table)
    return out


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
        filters = _filters()
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


# ------------------------------------------------------------------------------------ pickle


class PickleCounter:
    """Counts pickle dumps/loads and their bytes while :meth:`patch` is in force (thread-safe)."""

    def __init__(self) -> None:
        self.counts = dict.fromkeys(PICKLE_COUNTERS, 0)
        self._lock = threading.Lock()
        self._undo: list[Callable[[], None]] = []

    def _add(self, calls: str, nbytes: int) -> None:
        with self._lock:
            self.counts[calls] += 1
            self.counts[calls + "_bytes"] += nbytes

    def _dumps(self, orig: Callable[..., Any]) -> Callable[..., Any]:
        def dumps(*args: Any, **kwargs: Any) -> Any:
            out = orig(*args, **kwargs)
            self._add("pickle.dumps", _length(out))
            return out
        return dumps

    def _loads(self, orig: Callable[..., Any]) -> Callable[..., Any]:
        def loads(data: Any, *args: Any, **kwargs: Any) -> Any:
            self._add("pickle.loads", _length(data))
            return orig(data, *args, **kwargs)
        return loads

    def patch(self) -> None:
        from multiprocessing.reduction import ForkingPickler

        for owner, name, wrap in ((pickle, "dumps", self._dumps), (pickle, "loads", self._loads)):
            orig = getattr(owner, name)
            setattr(owner, name, wrap(orig))
            self._undo.append(lambda owner=owner, name=name, orig=orig: setattr(owner, name, orig))
        # ForkingPickler.dumps is a classmethod; keep the descriptor to put it back as it was
        fp_dumps, fp_loads = ForkingPickler.__dict__["dumps"], ForkingPickler.__dict__["loads"]
        ForkingPickler.dumps = classmethod(self._dumps(fp_dumps.__func__))  # type: ignore[method-assign]
        ForkingPickler.loads = staticmethod(self._loads(fp_loads))  # type: ignore[method-assign]

        def undo_fp() -> None:
            ForkingPickler.dumps = fp_dumps  # type: ignore[method-assign]
            ForkingPickler.loads = fp_loads  # type: ignore[method-assign]
        self._undo.append(undo_fp)
        mpi = sys.modules.get("mpi4py.MPI")
        if mpi is not None:
            # mpi4py's Pickle takes new functions through __init__ only and does not show the
            # ones it holds: back to its defaults (pickle's) afterwards, protocol and threshold kept
            p = mpi.pickle
            proto, thres = p.PROTOCOL, p.THRESHOLD
            p.__init__(self._dumps(_ORIG[0]), self._loads(_ORIG[1]), proto, thres)
            self._undo.append(lambda: p.__init__(None, None, proto, thres))

    def restore(self) -> None:
        while self._undo:
            self._undo.pop()()


def _length(x: Any) -> int:
    try:
        return memoryview(x).nbytes
    except TypeError:
        return 0


# ------------------------------------------------------------------------- rusage and /proc


def _rusage() -> dict[str, int]:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return {"faults.minor": r.ru_minflt, "faults.major": r.ru_majflt,
            "ctx.voluntary": r.ru_nvcsw, "ctx.involuntary": r.ru_nivcsw}


def _proc_io() -> tuple[dict[str, int], int]:
    """The four counters of /proc/self/io, and the bytes this read itself added to rchar."""
    with open("/proc/self/io", "rb", buffering=0) as f:
        raw = f.read()
    fields = dict(line.split(": ") for line in raw.decode().splitlines() if ": " in line)
    return {f"io.{k}": int(fields[k]) for k in ("rchar", "wchar", "syscr", "syscw")}, len(raw)


#: threads of the harness itself (the pytest plugin's watchdog, ipcbench's job watcher): their
#: work is not a message's, so the probe leaves them out (they wake on their own clock)
HARNESS_THREAD_PREFIX = "ipcbench-"


def harness_threads() -> frozenset[int]:
    return frozenset(t.native_id for t in threading.enumerate()
                     if t.name.startswith(HARNESS_THREAD_PREFIX) and t.native_id is not None)


def _read(path: str) -> bytes:
    with open(path, "rb", buffering=0) as f:
        return f.read()


def _task_counts(tid: int, io: bool) -> tuple[dict[str, int], int]:
    """One thread's share of the process counters (to take off), and the bytes read to learn it."""
    out: dict[str, int] = {}
    nread = 0
    try:
        stat = _read(f"/proc/self/task/{tid}/stat")
        status = _read(f"/proc/self/task/{tid}/status")
        nread += len(stat) + len(status)
        fields = stat.rsplit(b")", 1)[1].split()  # after the command name, which may hold spaces
        out["faults.minor"], out["faults.major"] = int(fields[7]), int(fields[9])
        for line in status.decode().splitlines():
            if line.startswith("voluntary_ctxt_switches:"):
                out["ctx.voluntary"] = int(line.split()[1])
            elif line.startswith("nonvoluntary_ctxt_switches:"):
                out["ctx.involuntary"] = int(line.split()[1])
        if io:
            raw = _read(f"/proc/self/task/{tid}/io")
            nread += len(raw)
            kv = dict(line.split(": ") for line in raw.decode().splitlines() if ": " in line)
            out.update((f"io.{k}", int(kv[k])) for k in ("rchar", "wchar", "syscr", "syscw"))
    except (OSError, ValueError, IndexError):
        pass  # the thread has ended: what it did stays counted
    return out, nread


def _io_unavailable() -> str | None:
    try:
        _proc_io()
    except (OSError, KeyError, ValueError) as exc:
        return f"/proc/self/io is not readable here ({exc}); Linux with task I/O accounting needed"
    return None


# -------------------------------------------------------------------------------- the probe


class CounterProbe:
    """Every kernel-side counter of this process, between snapshots (rusage, io, pickle, syscalls).

    Use as a context manager around a counting pass; :meth:`snapshot` returns cumulative values,
    so a phase's count is the difference of two snapshots. :attr:`absent` maps a counter that
    cannot be read here to the reason.
    """

    def __init__(self, syscalls: bool = True) -> None:
        self.absent: dict[str, str] = {}
        self._sys: SyscallCounter | None = None
        self._pickle = PickleCounter()
        self._harness: list[int] = []
        self._own_rchar = 0
        self._io = _io_unavailable() is None
        if not self._io:
            reason = _io_unavailable() or ""
            self.absent.update(dict.fromkeys(IO_COUNTERS, reason))
        why = syscall_unavailable() if syscalls else "system call counting turned off"
        if why is not None:
            self.absent.update(dict.fromkeys(SYSCALL_COUNTERS, why))
        else:
            self._sys = SyscallCounter()

    def __enter__(self) -> "CounterProbe":
        self._harness = sorted(harness_threads())
        if self._sys is not None:
            try:
                self._sys.open(exclude=frozenset(self._harness))
            except OSError as exc:
                self._sys = None
                self.absent.update(dict.fromkeys(SYSCALL_COUNTERS, f"perf_event_open failed: {exc}"))
        self._pickle.patch()
        return self

    def __exit__(self, *exc: object) -> None:
        self._pickle.restore()
        if self._sys is not None:
            self._sys.close()

    def snapshot(self) -> dict[str, int]:
        # the same calls in the same order every time: their own cost is a constant that the
        # harness's barrier-only phase subtracts; except the bytes of /proc/self/io itself, whose
        # length grows with its numbers: those are taken off here
        out = dict(self._pickle.counts)
        out.update(_rusage())
        nread = 0
        if self._io:
            io, nread = _proc_io()
            out.update(io)
        for tid in self._harness:
            theirs, n = _task_counts(tid, self._io)
            nread += n
            for k, v in theirs.items():
                out[k] -= v
        if self._io:
            out["io.rchar"] -= self._own_rchar
        self._own_rchar += nread
        if self._sys is not None:
            out.update(self._sys.read())
        return out


class AllocProbe:
    """tracemalloc around single iterations: the peak above the level at the iteration's start,
    and what stays allocated. Starts tracemalloc unless it runs already (then leaves it on)."""

    def __enter__(self) -> "AllocProbe":
        self._started = not tracemalloc.is_tracing()
        if self._started:
            tracemalloc.start(1)
        return self

    def __exit__(self, *exc: object) -> None:
        if self._started:
            tracemalloc.stop()

    def start(self) -> int:
        tracemalloc.reset_peak()
        return tracemalloc.get_traced_memory()[0]

    @staticmethod
    def stop(start: int) -> tuple[int, int]:
        """(peak above ``start``, current minus ``start``)."""
        current, peak = tracemalloc.get_traced_memory()
        return peak - start, current - start


def differences(before: dict[str, int], after: dict[str, int]) -> dict[str, int]:
    return {k: after[k] - before[k] for k in after if k in before}


# ------------------------------------------------------------------------- the record


class CounterAbsent(IpcbenchError, LookupError):
    """A counter that was not measured here; the message says why."""


def _number(x: Fraction) -> int | float:
    return int(x) if x.denominator == 1 else float(x)


@dataclass
class RankCounters:
    """One rank's counts of a case: per repeat, the message phase minus the barrier-only phase.

    ``rank.value("syscalls.data")`` or ``rank.syscalls_data`` is the count per message: exact
    (an int where the division is whole, ``totals/messages``) when every repeat gave the same
    total, else the median repeat's. ``exact(name)`` and ``spread(name)`` say which.
    """

    rank: int
    role: str  # "writer" or "reader" (ping-pong: rank 0 writes, rank 1 echoes: "reader")
    totals: dict[str, list[int]]
    messages: int  # messages per repeat
    absent: dict[str, str] = field(default_factory=dict)
    #: messages per repeat of the deep counters (DEEP_COUNTERS), which deep mode counts in runs of
    #: its own with another message count; 0 when they were not counted
    deep_messages: int = 0

    def _messages(self, name: str) -> int:
        return max(1, self.deep_messages if name in DEEP_COUNTERS and self.deep_messages else self.messages)

    def _totals(self, name: str) -> list[int]:
        if name in self.absent:
            raise CounterAbsent(f"{name} of rank {self.rank} ({self.role}) is absent: {self.absent[name]}")
        if name not in self.totals:
            if name in COUNTERS:  # a record made without it (another version)
                raise CounterAbsent(f"{name} of rank {self.rank} ({self.role}) was not counted")
            raise KeyError(f"no counter {name!r}; counters are {', '.join(COUNTERS)}")
        return self.totals[name]

    def value(self, name: str) -> int | float:
        """Per message: exact where the repeats agree, else the median repeat's."""
        totals = sorted(self._totals(name))
        return _number(Fraction(totals[len(totals) // 2], self._messages(name)))

    def exact(self, name: str) -> bool:
        """Whether every repeat counted the same total (measured, not assumed)."""
        totals = self._totals(name)
        return all(t == totals[0] for t in totals)

    def spread(self, name: str) -> tuple[int | float, int | float]:
        """(min, max) per message over the repeats."""
        totals = self._totals(name)
        m = self._messages(name)
        return _number(Fraction(min(totals), m)), _number(Fraction(max(totals), m))

    def has(self, name: str) -> bool:
        return name in self.totals and name not in self.absent

    def __getattr__(self, attr: str) -> int | float:
        # rank.pickle_dumps -> value("pickle.dumps"); only names of COUNTERS
        if not attr.startswith("_"):
            name = _ATTRS.get(attr)
            if name is not None:
                return self.value(name)
        raise AttributeError(f"{type(self).__name__} has no attribute {attr!r}")

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {"rank": self.rank, "role": self.role, "messages": self.messages,
                             "totals": self.totals, "absent": self.absent}
        if self.deep_messages:
            d["deep_messages"] = self.deep_messages
        # derived, for readers of the file (never read back)
        names = [n for n in self.totals if n not in self.absent]
        d["per_message"] = {n: self.value(n) for n in names}
        d["exact"] = {n: self.exact(n) for n in names}
        d["spread"] = {n: list(self.spread(n)) for n in names if not self.exact(n)}
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "RankCounters":
        return cls(int(d["rank"]), str(d["role"]), {k: [int(x) for x in v] for k, v in d["totals"].items()},
                   int(d["messages"]), dict(d.get("absent") or {}), int(d.get("deep_messages") or 0))


_ATTRS = {n.replace(".", "_"): n for n in COUNTERS}


@dataclass
class Counters:
    """The counting pass of one case: every counted rank, and how it was counted.

    ``counters.writer.pickle_dumps``, ``counters.reader.syscalls_data`` (the first reader;
    ``counters.readers`` has them all), ``counters.cost("reader", "io.rchar")`` (the largest over
    the readers, as completion is the slowest reader).
    """

    ranks: list[RankCounters]
    iterations: int  # per repeat
    messages_per_iteration: int  # 1; a stream's window
    repeats: int

    @property
    def messages(self) -> int:
        return self.iterations * self.messages_per_iteration

    @property
    def writer(self) -> RankCounters:
        return self._role("writer")[0]

    @property
    def readers(self) -> list[RankCounters]:
        return self._role("reader")

    @property
    def reader(self) -> RankCounters:
        return self._role("reader")[0]

    def _role(self, role: str) -> list[RankCounters]:
        if role not in ("writer", "reader"):
            raise ValueError(f"role must be 'writer' or 'reader', not {role!r}")
        found = [r for r in self.ranks if r.role == role]
        if not found:
            raise CounterAbsent(f"no {role} was counted")
        return found

    def cost(self, role: str, name: str) -> int | float:
        """Per message, for ``role``: the writer's, or the largest over the readers."""
        return max(r.value(name) for r in self._role(role))

    def exact(self, role: str, name: str) -> bool:
        return all(r.exact(name) for r in self._role(role))

    def to_dict(self) -> dict[str, Any]:
        return {"iterations": self.iterations, "messages_per_iteration": self.messages_per_iteration,
                "repeats": self.repeats, "ranks": [r.to_dict() for r in self.ranks]}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "Counters":
        return cls([RankCounters.from_dict(r) for r in d["ranks"]], int(d["iterations"]),
                   int(d["messages_per_iteration"]), int(d["repeats"]))
