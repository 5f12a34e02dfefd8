"""How a reader waits for a writer: the wait strategies (auto, block, backoff) and their pacing.

Core, not backends: the environment record (envinfo) reports the strategy in force, and every
backend paces its polls with :class:`Spin` or :class:`Backoff`.
"""

from __future__ import annotations

import ctypes
import functools
import os
import sys
import time

from .errors import UsageError
from .procs import cores as _cores

# ----------------------------------------------------------------------------- wait strategy

#: How a reader waits for the writer (docs/method.md rule 18). ``block``: the way its mechanism waits
#: best -- a blocking call (zmq, mp.Queue), or polling without sleeping (MPI Test, an LMDB
#: snapshot; the shm version word for :attr:`Spin.YIELD`, then its futex); right when every rank
#: has a core. ``backoff``: spin briefly, yield, then sleep in growing steps (shm: its futex at
#: once); right when ranks outnumber cores (a polling reader would take the writer's core).
#: ``auto``: ``block`` if the backend's ranks fit on the cores, else ``backoff``.
WAITS = ("auto", "block", "backoff")
WAIT_ENV = "IPCBENCH_WAIT"
_default_wait: str | None = None


def parse_wait(value: str, source: str = "wait") -> str:
    """A valid wait strategy; ValueError naming ``source`` otherwise."""
    value = str(value).strip().lower()
    if value not in WAITS:
        raise UsageError(f"{source}: unknown wait strategy {value!r}; choose one of {', '.join(WAITS)}")
    return value


def default_wait() -> str:
    """The wait strategy asked for in this process: set_default_wait(), else $IPCBENCH_WAIT, else auto."""
    if _default_wait is not None:
        return _default_wait
    env = os.environ.get(WAIT_ENV)
    return parse_wait(env, f"environment variable {WAIT_ENV}") if env else "auto"


def set_default_wait(value: str | None) -> None:
    """Force the wait strategy of every backend made from now on (None: back to $IPCBENCH_WAIT),
    exported as $IPCBENCH_WAIT for worker processes started later."""
    global _default_wait
    if value is None:
        _default_wait = None
        os.environ.pop(WAIT_ENV, None)
        return
    _default_wait = parse_wait(value)
    os.environ[WAIT_ENV] = _default_wait


def wait_state() -> tuple[str | None, str | None]:
    """What set_default_wait() changes, to put back with restore_wait_state()."""
    return (_default_wait, os.environ.get(WAIT_ENV))


def restore_wait_state(state: tuple[str | None, str | None]) -> None:
    global _default_wait
    _default_wait, env = state
    if env is None:
        os.environ.pop(WAIT_ENV, None)
    else:
        os.environ[WAIT_ENV] = env


def resolve_wait(wait: str | None, ranks: int, cores: int | None = None) -> str:
    """``block`` or ``backoff`` for a backend of ``ranks`` ranks (``auto``/None: ranks vs cores)."""
    wait = parse_wait(wait) if wait else default_wait()
    if wait != "auto":
        return wait
    if cores is None:
        cores = _cores()
    return "block" if ranks <= cores else "backoff"


class Spin:
    """Pacing for a reader that polls with a core of its own (wait strategy ``block``).

    Polls back to back for ``SPIN`` seconds, then with ``sched_yield`` between polls up to ``YIELD``
    seconds, then sleeps ``SLEEP`` between polls: never the growing sleeps of :class:`Backoff`.
    ``wait()`` returns False once ``timeout`` seconds have passed.
    """

    SPIN = 20e-6
    YIELD = 2e-3
    SLEEP = 20e-6
    CHECK = 16  # look at the clock every this many polls
    strategy = "block"
    # slots: a reader restarts one pacer per wait (Backend.pacer) instead of allocating one
    __slots__ = ("timeout", "start", "deadline", "polls", "_phase")

    def __init__(self, timeout: float) -> None:
        self.timeout = timeout
        precise_sleeps()
        self.restart()

    def restart(self) -> Spin:
        """Start a new wait (the same timeout), as a fresh object would."""
        self.start = time.monotonic()
        self.deadline = self.start + self.timeout
        self.polls = 0
        self._phase = 0  # 0 spin, 1 yield, 2 sleep
        return self

    @property
    def waited(self) -> float:
        return time.monotonic() - self.start

    def wait(self) -> bool:
        self.polls += 1
        if self.polls % self.CHECK == 0 or self._phase == 2:
            now = time.monotonic()
            if now >= self.deadline:
                return False
            waited = now - self.start
            self._phase = 0 if waited < self.SPIN else 1 if waited < self.YIELD else 2
        if self._phase == 1:
            os.sched_yield()
        elif self._phase == 2:
            time.sleep(self.SLEEP)
        return True


#: The timer slack a polling process asks for, in ns. Linux lets a sleep end up to the slack late
#: (50 µs by default), so a reader that polls in short sleeps notices a message a random part of
#: that late, which moves its figures from run to run (docs/method.md rule 18).
TIMER_SLACK_NS = 1000
_PR_SET_TIMERSLACK = 29


@functools.cache
def precise_sleeps() -> bool:
    """Ask Linux for a short timer slack in this process (once): short sleeps end when asked;
    False where prctl is not available."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        return bool(ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_TIMERSLACK, TIMER_SLACK_NS, 0, 0, 0) == 0)
    except (OSError, AttributeError):
        return False


def pacer(wait: str, timeout: float) -> Spin | Backoff:
    """A fresh pacing object for one wait under a resolved strategy (``block`` or ``backoff``)."""
    return Spin(timeout) if wait == "block" else Backoff(timeout)


class Backoff:
    """Pacing for a reader that polls for a new value: spin briefly, then yield, then sleep.

    Never a pure busy loop: ranks are often oversubscribed (``mpiexec -n 4`` on 2 cores), where a
    spinning reader would steal the writer's core. ``wait()`` returns False once ``timeout``
    seconds have passed since the Backoff was made.
    """

    SPINS = 32  # polls without a pause (a value that is already there costs nothing more)
    YIELDS = 256  # then polls separated by sched_yield (lets another runnable rank go first)
    MIN_SLEEP = 20e-6
    MAX_SLEEP = 2e-3
    #: Each sleep this much longer than the last: a message that arrives during a sleep is noticed
    #: at most this share of the wait so far late (2x let a wait of T read anywhere from T to 2T,
    #: and broadcast figures jumped between runs with where the arrival fell).
    GROWTH = 1.25
    strategy = "backoff"
    __slots__ = ("timeout", "start", "deadline", "polls", "_sleep")

    def __init__(self, timeout: float) -> None:
        self.timeout = timeout
        precise_sleeps()
        self.restart()

    def restart(self) -> Backoff:
        """Start a new wait (the same timeout), as a fresh object would."""
        self.start = time.monotonic()
        self.deadline = self.start + self.timeout
        self.polls = 0
        self._sleep = self.MIN_SLEEP
        return self

    @property
    def waited(self) -> float:
        return time.monotonic() - self.start

    def wait(self) -> bool:
        """Pause before the next poll; False when the time is up."""
        self.polls += 1
        if self.polls <= self.SPINS:
            return True
        now = time.monotonic()
        if now >= self.deadline:
            return False
        if self.polls <= self.SPINS + self.YIELDS:
            os.sched_yield()
            return True
        time.sleep(min(self._sleep, max(0.0, self.deadline - now)))
        self._sleep = min(self._sleep * self.GROWTH, self.MAX_SLEEP)
        return True


__all__ = [
    "WAITS",
    "WAIT_ENV",
    "Backoff",
    "Spin",
    "default_wait",
    "pacer",
    "parse_wait",
    "precise_sleeps",
    "resolve_wait",
    "restore_wait_state",
    "set_default_wait",
    "wait_state",
]
