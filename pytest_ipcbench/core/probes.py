"""Counters a rank reads about itself: the probes that measure what a message costs.

docs/method.md rule 20. One :class:`CounterProbe` per rank measures its whole process (every thread: zmq
and MPI have helper threads) between :meth:`~CounterProbe.snapshot` calls: rusage, ``/proc/self/io``,
pickle calls, system calls (core/syscalls.py); :class:`AllocProbe` runs tracemalloc in a pass of its
own. docs/counters.md says what each counter sees, what it needs and what it misses.
"""

from __future__ import annotations

import functools
import os
import pickle
import resource
import sys
import sysconfig
import threading
import tracemalloc
from collections.abc import Callable
from typing import Any

from .counters import IO_COUNTERS, PICKLE_COUNTERS, SYSCALL_COUNTERS
from .syscalls import SyscallCounter, syscall_unavailable

_ORIG = (pickle.dumps, pickle.loads)  # pickle's own functions, for mpi4py's Pickle


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
            self._undo.append(functools.partial(setattr, owner, name, orig))
        # ForkingPickler.dumps is a classmethod; keep the descriptor to put it back as it was
        fp_dumps, fp_loads = ForkingPickler.__dict__["dumps"], ForkingPickler.__dict__["loads"]
        # patched and restored by name: setattr says it is a patch (the class declares other types)
        setattr(ForkingPickler, "dumps", classmethod(self._dumps(fp_dumps.__func__)))  # noqa: B010
        setattr(ForkingPickler, "loads", staticmethod(self._loads(fp_loads)))  # noqa: B010
        self._undo.append(functools.partial(setattr, ForkingPickler, "dumps", fp_dumps))
        self._undo.append(functools.partial(setattr, ForkingPickler, "loads", fp_loads))
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


def _read(path: str) -> bytes:
    with open(path, "rb", buffering=0) as f:
        return f.read()


def _proc_io(path: str = "/proc/self/io") -> tuple[dict[str, int], int]:
    """The four counters of a process's (or a thread's) io file, and the bytes this read itself
    added to rchar."""
    raw = _read(path)
    fields = dict(line.split(": ") for line in raw.decode().splitlines() if ": " in line)
    return {f"io.{k}": int(fields[k]) for k in ("rchar", "wchar", "syscr", "syscw")}, len(raw)


#: threads of the harness itself (the pytest plugin's watchdog, ipcbench's job watcher): their
#: work is not a message's, so the probe leaves them out (they wake on their own clock)
HARNESS_THREAD_PREFIX = "ipcbench-"


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
            counts, n = _proc_io(f"/proc/self/task/{tid}/io")
            nread += n
            out.update(counts)
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
        io_why = _io_unavailable()
        self._io = io_why is None
        if io_why is not None:
            self.absent.update(dict.fromkeys(IO_COUNTERS, io_why))
        why = syscall_unavailable() if syscalls else "system call counting turned off"
        if why is not None:
            self.absent.update(dict.fromkeys(SYSCALL_COUNTERS, why))
        else:
            self._sys = SyscallCounter()

    def __enter__(self) -> CounterProbe:
        self._harness = sorted(t.native_id for t in threading.enumerate()
                               if t.name.startswith(HARNESS_THREAD_PREFIX) and t.native_id is not None)
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


#: a rise of the traced memory within one profiled call (below) counts as allocated when it is at
#: least this many bytes: smaller ones are the harness's and the interpreter's own objects (ints, frames,
#: a list growing by a few slots), which a polling loop makes as often as it spins (timing)
ALLOC_GRAIN = 256


class AllocProbe:
    """tracemalloc around single iterations: the peak above the level at the iteration's start, what
    stays allocated, and the bytes allocated (``alloc.bytes``: the rises of the traced memory between
    two profile or line events, of at least :data:`ALLOC_GRAIN` bytes, outside the harness's code;
    docs/counters.md says why and what it misses). Starts tracemalloc unless it runs already; the
    profile and trace functions in force (a profiler's, coverage's) are put back after each iteration."""

    def __enter__(self) -> AllocProbe:
        self._started = not tracemalloc.is_tracing()
        if self._started:
            tracemalloc.start(1)
        return self

    def __exit__(self, *exc: object) -> None:
        if self._started:
            tracemalloc.stop()

    def start(self) -> int:
        # closures over plain locals, not methods: under tracemalloc every object the callbacks
        # make (a bound method per line event, an attribute's new int) is traced too, which made
        # each event several times dearer
        traced, reset, grain, harness, lines_off = _traced, _reset_peak, ALLOC_GRAIN, _HARNESS_CODE, _LINES_OFF
        last = allocated = top = 0

        def profile(frame: Any, event: str, arg: Any) -> None:
            nonlocal last, allocated, top
            peak = traced()[1]
            if peak > top:
                top = peak
            if peak - last >= grain and frame is not None:
                # the time since the previous event ran in this frame (its caller's at a call) or in a C
                # function it called: the harness's own code (barriers, its records) is not the message's
                code = frame.f_back if event == "call" else frame
                if code is None or not code.f_code.co_filename.startswith(harness):
                    allocated += peak - last
            reset()
            last = traced()[0]

        def line(frame: Any, event: str, arg: Any) -> Any:
            if event == "line":
                profile(frame, event, arg)
            return line

        def call(frame: Any, event: str, arg: Any) -> Any:
            """sys.settrace's function: line events in every frame but the harness's and the
            standard library's (their calls and returns still are events)."""
            name = frame.f_code.co_filename
            skip = lines_off.get(name)
            if skip is None:
                skip = lines_off[name] = _lines_off(name)
            return None if skip else line

        def finish() -> tuple[int, int]:
            profile(None, "", None)  # the rise since the last event: the harness's, not counted
            return top, allocated

        self._finish = finish
        # the level at the start is read once the closures above exist: they stay allocated until
        # stop(), and are the probe's, not the message's
        reset()
        start = last = traced()[0]
        self._previous = sys.getprofile(), sys.gettrace()
        sys.setprofile(profile)
        sys.settrace(call)
        return start

    def stop(self, start: int) -> tuple[int, int, int]:
        """(peak above ``start``, current minus ``start``, bytes allocated since :meth:`start`)."""
        sys.settrace(self._previous[1])
        sys.setprofile(self._previous[0])
        top, allocated = self._finish()
        current = _traced()[0]
        return top - start, current - start, allocated


_PACKAGE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
#: the harness's code: its allocations are left out of alloc.bytes (a backend's are counted)
_HARNESS_CODE = tuple(os.path.join(_PACKAGE, d, "") for d in ("harness", "core"))
_STDLIB = tuple({os.path.join(sysconfig.get_paths()[k], "") for k in ("stdlib", "platstdlib")})
_SITE = tuple({os.path.join(sysconfig.get_paths()[k], "") for k in ("purelib", "platlib")})
_LINES_OFF: dict[str, bool] = {}


def _lines_off(filename: str) -> bool:
    return filename.startswith(_HARNESS_CODE) or (filename.startswith(_STDLIB) and not filename.startswith(_SITE))


_traced = tracemalloc.get_traced_memory
_reset_peak = tracemalloc.reset_peak


def differences(before: dict[str, int], after: dict[str, int]) -> dict[str, int]:
    return {k: after[k] - before[k] for k in after if k in before}
