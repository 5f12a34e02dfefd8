"""A per-test deadline that ends the whole MPI job when a rank hangs.

One daemon thread per process. :meth:`Watchdog.arm` starts a deadline for a test; when it passes,
the thread writes a clear message and every thread's traceback to the real stderr (saved when
the plugin started, so pytest's output capture cannot swallow it) and calls ``abort`` (the
plugin passes ``MPI.COMM_WORLD.Abort``: Hydra then stops every rank). If ``abort`` does not end
the process, ``os._exit`` does.

A rank that only waits for the others (in the verdict exchange) gets ``grace`` seconds more, so
the rank that is really stuck fires first and its traceback is the one printed.
"""

from __future__ import annotations

import faulthandler
import os
import threading
import time
from typing import Callable

EXIT_CODE = 70
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
        self._waiting = False
        self._closed = False
        self._thread = threading.Thread(target=self._loop, name="ipcbench-watchdog", daemon=True)
        self._thread.start()

    def arm(self, what: str, seconds: float, phase: str = "setup") -> None:
        """Start a deadline of ``seconds`` for ``what`` (a test id); 0 or less disarms."""
        with self._cond:
            if seconds <= 0:
                self._deadline = None
            else:
                self._deadline = time.monotonic() + seconds
            self._what, self._seconds, self._phase, self._waiting = what, seconds, phase, False
            self._cond.notify()

    def phase(self, phase: str, waiting: bool = False) -> None:
        """Say where this rank is: running ``phase``, or waiting for the others after it."""
        with self._cond:
            self._phase, self._waiting = phase, waiting
            self._cond.notify()

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
        where = (
            f"rank {self.rank} waited for the other ranks after {self._phase}"
            if self._waiting
            else f"rank {self.rank} was still in {self._phase}"
        )
        return (
            f"ipcbench: {self._what} did not finish within {self._seconds:g} s on rank {self.rank} "
            f"— a rank hung or died; aborting the MPI job\n"
            f"ipcbench: ({where}; raise --ipc-timeout or @pytest.mark.ipcbench(timeout=...) if it is only slow)\n"
        )

    def _loop(self) -> None:
        with self._cond:
            while not self._closed:
                if self._deadline is None:
                    self._cond.wait()
                    continue
                due = self._deadline + (self.grace if self._waiting else 0.0)
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
        self._fire(text)

    def _fire(self, text: str) -> None:
        self.fired.set()
        try:
            os.write(self.err_fd, text.encode())
            faulthandler.dump_traceback(file=self.err_fd, all_threads=True)
        except OSError:
            pass
        # if abort hangs or returns, leave anyway
        backstop = threading.Timer(HARD_EXIT_AFTER_S, self.hard_exit, (EXIT_CODE,))
        backstop.daemon = True
        backstop.start()
        try:
            self.abort(1)
        finally:
            self.hard_exit(EXIT_CODE)
