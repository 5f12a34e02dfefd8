"""SIGTERM and SIGHUP taken like a Ctrl-C, so that a terminated process cleans up after itself
(docs/reliability.md, "SIGTERM or SIGHUP to a whole session").

:class:`AsInterrupt` makes these signals raise :class:`Terminated`, a KeyboardInterrupt, so the
Ctrl-C path runs and ``except Exception`` does not swallow it; with a ``grace``, a process still
running ``grace`` seconds after the signal leaves with ``128 + signal`` and says so.
"""

from __future__ import annotations

import os
import signal
import threading
from collections.abc import Callable, Sequence
from typing import Any, NoReturn

GRACE_S = 5.0  # a plain run's interrupt path takes about a second (its workers stopped, its resources removed)
SIGNALS = (signal.SIGTERM, signal.SIGHUP)


class Terminated(KeyboardInterrupt):
    """Raised in the main thread by :class:`AsInterrupt`'s handler; ``signum`` is the signal."""

    def __init__(self, signum: int) -> None:
        super().__init__(f"terminated by {signal.Signals(signum).name}")
        self.signum = signum


class AsInterrupt:
    """While installed, each of ``signals`` raises :class:`Terminated` in the main thread.

    Only a signal left at its default is taken (one ignored by the parent, ``nohup``'s SIGHUP,
    stays ignored; another handler stays its owner's), and only from the main thread (elsewhere
    nothing changes: ``signal.signal``'s rule). :meth:`restore` puts the previous handlers back.
    ``grace`` None: no backstop, and every signal raises.
    """

    def __init__(self, signals: Sequence[int] = SIGNALS, grace: float | None = GRACE_S) -> None:
        self.grace = grace
        self.signum: int | None = None  # the first signal that came
        self._previous: dict[int, Any] = {}
        if threading.current_thread() is not threading.main_thread():
            return
        for sig in signals:
            if signal.getsignal(sig) == signal.SIG_DFL:
                self._previous[sig] = signal.signal(sig, self._handler)

    def _handler(self, signum: int, frame: object) -> None:
        if self.signum is not None and self.grace is not None:
            return  # already on its way out, within the grace
        if self.signum is None and self.grace is not None:
            backstop = threading.Timer(self.grace, self._leave, (signum,))
            backstop.daemon = True
            backstop.start()
        self.signum = signum
        raise Terminated(signum)

    def _leave(self, signum: int) -> None:
        try:
            os.write(2, (f"ipcbench: pid {os.getpid()} still running {self.grace:g} s after "
                         f"{signal.Signals(signum).name}: it leaves now ('ipcbench clean' removes what it "
                         "had not released)\n").encode())
        except OSError:
            pass
        os._exit(128 + signum)

    @property
    def installed(self) -> list[int]:
        """The signals taken."""
        return list(self._previous)

    def restore(self) -> None:
        """The previous handlers back (from the main thread), where ours is still the one set."""
        if threading.current_thread() is not threading.main_thread():
            return
        for sig, old in self._previous.items():
            if signal.getsignal(sig) == self._handler:
                signal.signal(sig, old)
        self._previous = {}


def tracker_outlives_hangup() -> None:
    """Start multiprocessing's resource tracker (if it is not running) deaf to SIGHUP.

    The tracker unlinks the semaphores of our queues (``/dev/shm/sem.mp-*``) when their makers die
    without doing it. It ignores SIGINT and SIGTERM, not SIGHUP; started with SIGHUP blocked it
    keeps it blocked (exec keeps the mask; the tracker unblocks only the other two). Blocked, not
    ignored, here: a SIGHUP meanwhile is delivered to this process once the tracker runs.
    """
    from multiprocessing import resource_tracker

    blocked = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGHUP})
    try:
        resource_tracker.ensure_running()
    finally:
        if signal.SIGHUP not in blocked:
            signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGHUP})


def unlink_queue_names(queues: Sequence[Any]) -> None:
    """Unlink the named semaphores (``/dev/shm/sem.mp-*``) of spawn-context ``queues`` once every
    process that uses them has opened them: they keep working (each process maps them), and no
    name is left for anyone to remove, even when a SIGKILL of the process group takes the resource
    tracker too. Their finalizers and the tracker's entries go with the names. Python's own
    attributes: a version without them keeps the tracker's way."""
    from multiprocessing import resource_tracker, synchronize, util

    try:  # private names, read as such: a Python without them keeps the tracker's way
        locks = [lock._semlock for q in queues for lock in (q._rlock, q._wlock, q._sem) if lock is not None]
        cleanup = getattr(synchronize.SemLock, "_cleanup")  # noqa: B009
        unlink = getattr(synchronize, "sem_unlink")  # noqa: B009
        registry = getattr(util, "_finalizer_registry")  # noqa: B009
    except AttributeError:
        return
    names = {lock.name for lock in locks if getattr(lock, "name", None)}
    for f in list(registry.values()):
        if getattr(f, "_callback", None) is cleanup and f._args and f._args[0] in names:
            f.cancel()
    for name in names:
        try:
            unlink(name)
        except OSError:
            pass
        resource_tracker.unregister(name, "semaphore")


__all__ = ["AsInterrupt", "GRACE_S", "SIGNALS", "Terminated", "tracker_outlives_hangup", "unlink_queue_names"]


def fail_early_exit(rank: int) -> Callable[[], None]:
    """Make ``os._exit(0)`` of this MPI rank, before its session ends, exit 1; returns the undo.

    A rank that leaves by ``os._exit(0)`` (a plugin's reader ending "its" process) runs no summary;
    when every rank does, ``mpiexec`` exits 0 and CI passes a run that never finished. Only this
    process is concerned: a forked child (multiprocessing's end is ``os._exit``) has another pid.
    """
    real, me = os._exit, os.getpid()

    def guarded(status: int) -> NoReturn:  # os._exit's own signature
        code = status
        if code == 0 and os.getpid() == me:
            os.write(2, f"ipcbench: rank {rank} called os._exit(0) before its pytest session ended; "
                        "exit 1 instead: the run did not finish\n".encode())
            code = 1
        real(code)

    os._exit = guarded
    return lambda: setattr(os, "_exit", real)
