"""A per-test deadline that ends the whole MPI job when a rank hangs (docs/reliability.md, "Hangs
end by the watchdog").

One daemon thread per process. When a deadline armed by :meth:`Watchdog.arm` passes, it writes
a message and every thread's traceback to the real stderr and calls ``abort``
(``MPI.COMM_WORLD.Abort``), then ``os._exit``; a rank that only waits for the others gets
``grace`` seconds more. :meth:`Watchdog.watch_interrupts` ends the job after a Ctrl-C that a rank
blocked inside an MPI call never sees.
"""

from __future__ import annotations

import faulthandler
import os
import select
import signal
import threading
import time
from collections.abc import Callable

from . import names
from .where import main_thread_backend_step

DEFAULT_HINT = "raise --ipc-timeout or @pytest.mark.ipcbench(timeout=...) if it is only slow"

EXIT_CODE = 70
INTERRUPTED_EXIT_CODE = 2  # pytest's ExitCode.INTERRUPTED
INTERRUPT_GRACE_S = 10.0
HARD_EXIT_AFTER_S = 10.0
MAX_WAIT_S = 3600.0


class Watchdog:
    def __init__(
        self,
        rank: int,
        abort: Callable[[int], object],
        err_fd: int | None = None,
        grace: float = 3.0,
        hard_exit: Callable[[int], object] = os._exit,
    ) -> None:
        self.rank = rank
        self.abort = abort
        self._own_fd = err_fd is None
        self.err_fd = os.dup(2) if err_fd is None else err_fd
        self.grace = grace
        self.hard_exit = hard_exit
        self.fired = threading.Event()
        self._cond = threading.Condition()
        self._deadline: float | None = None
        self._what = ""
        self._seconds = 0.0
        self._phase = ""
        self._hint = DEFAULT_HINT
        self._waiting = False
        self._collective: str | None = None  # the group collective this rank waits in
        self._errors: list[str] = []  # this rank's own errors in this test, caught for an exchange
        self._noted = False
        self._closed = False
        self._thread = threading.Thread(target=self._loop, name="ipcbench-watchdog", daemon=True)
        self._thread.start()

    def arm(self, what: str, seconds: float, phase: str = "setup", hint: str = "") -> None:
        """Start a deadline of ``seconds`` for ``what`` (a test id); 0 or less disarms. ``hint``
        says how to raise the deadline."""
        with self._cond:
            self._hint = hint or DEFAULT_HINT
            self._deadline = time.monotonic() + seconds if seconds > 0 else None
            self._what, self._seconds, self._phase, self._waiting = what, seconds, phase, False
            self._collective, self._errors, self._noted = None, [], False
            self._cond.notify()

    def phase(self, phase: str, waiting: bool = False) -> None:
        """Say where this rank is: running ``phase``, or waiting for the others after it."""
        with self._cond:
            self._phase, self._waiting = phase, waiting
            self._cond.notify()

    # GroupObserver (core.group.observe): where this rank waits, and its own errors
    def collective(self, what: str | None) -> None:
        """This rank waits in a group collective (``None``: no longer)."""
        with self._cond:
            self._collective = what
            self._cond.notify()

    def raised(self, text: str) -> None:
        """This rank's own error, which a collective exchange was to report (it may never end)."""
        with self._cond:
            self._errors.append(text)
            self._cond.notify()

    def watch_interrupts(self, grace: float = INTERRUPT_GRACE_S) -> bool:
        """Abort the job if this process outlives a Ctrl-C by ``grace`` seconds (see the module's
        doc). Call from the main thread; False when a wakeup fd is already taken (then nothing
        changes)."""
        read_fd, write_fd = os.pipe()
        os.set_blocking(write_fd, False)
        try:
            previous = signal.set_wakeup_fd(write_fd, warn_on_full_buffer=False)
        except ValueError:  # not the main thread
            previous = -2
        if previous != -1:
            if previous >= 0:
                signal.set_wakeup_fd(previous)  # someone else's: leave it to them
            os.close(read_fd)
            os.close(write_fd)
            return False
        threading.Thread(target=self._interrupt_loop, args=(read_fd, grace), name="ipcbench-interrupt",
                         daemon=True).start()
        return True

    def _interrupt_loop(self, read_fd: int, grace: float) -> None:
        while True:
            select.select([read_fd], [], [])
            got = os.read(read_fd, 64)
            if signal.SIGINT in got:
                break
        time.sleep(grace)  # the usual way out: KeyboardInterrupt, pytest's summary, exit 2
        text = (f"ipcbench: rank {self.rank} is still running {grace:g} s after Ctrl-C (blocked inside an MPI "
                f"call, waiting for ranks that have stopped): aborting the MPI job\n")
        # the abort ends this process before any finally: release what it made (its segments,
        # folders) now; nobody else uses them any more
        self.end_job(text, INTERRUPTED_EXIT_CODE)

    def _is_waiting(self) -> bool:
        return self._waiting or self._collective is not None

    def disarm(self) -> None:
        with self._cond:
            self._deadline = None
            self._cond.notify()

    def close(self) -> None:
        with self._cond:
            self._closed = True
            self._deadline = None
            self._cond.notify()
        self._thread.join(timeout=1.0)
        if self._own_fd and not self.fired.is_set():
            os.close(self.err_fd)
            self._own_fd = False

    def message(self) -> str:
        if self._collective is not None:
            where = f"rank {self.rank} waited in {self._collective} during {self._phase}"
        elif self._waiting:
            where = f"rank {self.rank} waited for the other ranks after {self._phase}"
        else:
            step = main_thread_backend_step()  # the backend and its step where this rank is stuck
            where = (f"rank {self.rank} hung in {step} during {self._phase}" if step
                     else f"rank {self.rank} was still in {self._phase}")
        if self._is_waiting():
            head = (f"ipcbench: {self._what} did not finish within {self._seconds:g} s: rank {self.rank} waited "
                    f"for a rank that did not arrive (see that rank's message) — aborting the MPI job\n")
        else:
            head = (f"ipcbench: {self._what} did not finish within {self._seconds:g} s on rank {self.rank}: rank "
                    f"{self.rank} did not arrive (its traceback follows) — a rank hung or died; aborting the MPI job\n")
        errors = "".join(f"ipcbench: rank {self.rank} had raised: {e}\n" for e in self._errors)
        return head + errors + f"ipcbench: ({where}; {self._hint})\n"

    def _note(self) -> str:
        """Said by a waiting rank that had raised, before any rank fires (its error would be lost)."""
        where = self._collective or "the exchange after " + self._phase
        return "".join(
            f"ipcbench: {self._what}: rank {self.rank} raised {e}, then waited in {where} for ranks that "
            "did not arrive\n" for e in self._errors
        )

    def _loop(self) -> None:
        with self._cond:
            while not self._closed:
                if self._deadline is None:
                    self._cond.wait()
                    continue
                waiting = self._is_waiting()
                if waiting and self._errors and not self._noted:
                    # one second before anyone fires: the abort may not leave this rank time later
                    early = self._deadline - min(1.0, self._seconds / 2) - time.monotonic()
                    if early <= 0:
                        self._noted = True
                        try:
                            os.write(self.err_fd, self._note().encode())
                        except OSError:
                            pass
                        continue
                    self._cond.wait(min(early, MAX_WAIT_S))
                    continue
                due = self._deadline + (self.grace if waiting else 0.0)
                left = due - time.monotonic()
                if left > 0:
                    # in slices: a huge deadline must not overflow the wait (the thread would die,
                    # leaving the run without a watchdog)
                    self._cond.wait(min(left, MAX_WAIT_S))
                    continue
                break
            if self._closed:
                return
            text = self.message()
        self._end_job(text, 1, EXIT_CODE, tracebacks=True, release=False)

    def end_job(self, text: str, exit_code: int) -> None:
        """End the whole MPI job now with ``exit_code``, saying ``text``, releasing this rank's resources."""
        self._end_job(text, exit_code, exit_code, tracebacks=False, release=True)

    def _end_job(self, text: str, abort_code: int, exit_code: int, tracebacks: bool, release: bool) -> None:
        """Say why, then ``abort(abort_code)``; if abort hangs or returns, leave with ``exit_code``."""
        self.fired.set()
        try:
            os.write(self.err_fd, text.encode())
            if tracebacks:
                faulthandler.dump_traceback(file=self.err_fd, all_threads=True)
        except OSError:
            pass
        if release:
            for item in names.find_ours(os.getpid()):
                names.remove(item.path)
        backstop = threading.Timer(HARD_EXIT_AFTER_S, self.hard_exit, (exit_code,))
        backstop.daemon = True
        backstop.start()
        try:
            self.abort(abort_code)
        finally:
            self.hard_exit(exit_code)
