"""Watching the MPI jobs this process starts: what their ranks use, and who died when one is killed.

:class:`JobWatch` records the MPICH segments and Hydra files that this process's jobs use, so
that only what they made is removed afterwards; :class:`JobReaper` watches one ``mpiexec`` job's
ranks and says which rank died and how; :func:`reap_job` removes what a job that did not finish
left behind.
"""

from __future__ import annotations

import os
import re
import select
import sys
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TypeVar

from . import procs
from .cleanup import HYDRA_PREFIX, MPICH_PREFIX
from .reaper import reclaim

_Watch = TypeVar("_Watch", bound="JobWatch")  # start() returns the watch it started, of its own class


class JobWatch:
    """What the MPICH jobs started below this process use, recorded while they run.

    An aborted MPICH job leaves its segment ``/dev/shm/mpich_shm_*`` and Hydra's topology file
    ``/tmp/hydra_hwloc_xmlfile_*``; neither name says whose it is. A daemon thread looks at this
    process's descendants every ``interval`` seconds: the segments that an MPI rank (a child of
    ``hydra_pmi_proxy``) maps and the Hydra files that a proxy holds open are recorded with the
    pids that used them. :meth:`leftovers` returns the recorded files that still exist once every
    process that used them is dead, so only what this process's own jobs made is ever removed.
    """

    def __init__(self, interval: float = 0.2, root: int | None = None) -> None:
        self.interval = interval
        self.root = os.getpid() if root is None else root
        self.users: dict[Path, set[int]] = {}  # file -> pids seen using it
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self: _Watch) -> _Watch:
        self._thread = threading.Thread(target=self._loop, name="ipcbench-jobwatch", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        self.look()  # a last look at what still runs

    def _loop(self) -> None:
        while not self._stop.wait(self.interval):
            try:
                self.look()
            except Exception:  # /proc races: never let the watch die
                continue

    def look(self) -> None:
        """Record what the MPI processes below us use now."""
        for pid in procs.children_tree(self.root):
            if procs.comm(pid).startswith("hydra_pmi_prox"):
                self._record(pid, procs.open_files(pid, HYDRA_PREFIX))
                for rank in procs.children(pid):
                    self._record(rank, procs.mapped_files(rank, "/dev/shm/" + MPICH_PREFIX))
                    self._seen(rank)

    def _seen(self, rank: int) -> None:
        """A rank of a job (a child of a Hydra proxy), at each look."""

    def _record(self, pid: int, paths: list[Path]) -> None:
        if paths:
            with self._lock:
                for path in paths:
                    self.users.setdefault(path, set()).add(pid)

    def leftovers(self, in_use: bool = False) -> list[Path]:
        """Recorded files that still exist, all of whose users are dead (``in_use``: some of whose
        users still run)."""
        with self._lock:
            items = [(path, set(pids)) for path, pids in self.users.items()]
        return sorted(path for path, pids in items if path.exists() and any(map(procs.running, pids)) == in_use)

    def pending(self) -> list[Path]:
        return self.leftovers(in_use=True)


_BAD_PID = re.compile(r"^=\s+PID (\d+) RUNNING AT")
_BAD_CODE = re.compile(r"^=\s+(?:EXIT CODE|KILLED BY SIGNAL): (\d+)")
_EXIT_STRING = re.compile(r"EXIT STRING: (.*\(signal (\d+)\))")
#: a rank's own reaper (core/reaper.py) read the same zombie: whichever of the two got it says how
_REAPER_SAYS = re.compile(
    r"^ipcbench: rank \d+ \(pid (\d+)\)(?: first)? (was killed by signal \d+ \(\w+\)|exited with code \d+)"
)


def _pmi_rank(pid: int) -> int | None:
    """The MPI rank of process ``pid`` (``PMI_RANK`` in its environment; None if unreadable)."""
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            for item in f.read().split(b"\0"):
                if item.startswith(b"PMI_RANK="):
                    return int(item[9:])
    except (OSError, ValueError):
        pass
    return None


class JobReaper(JobWatch):
    """Everything one ``mpiexec`` job we launched may leave, and who in it died how.

    While the job runs it records (every ``interval`` s) its ranks (pid -> MPI rank), the MPICH
    segments they map and Hydra's files (:class:`JobWatch`); :meth:`feed` reads the launcher's
    output for Hydra's "BAD TERMINATION" report. After the job, :meth:`reap` waits (a few seconds at
    most) until none of its ranks runs, then removes what they left: our resources named by
    their pids and the MPICH segments and Hydra files nobody maps or holds any more. The ranks
    live in sessions of their own, so the launcher's process group does not find them.
    """

    def __init__(self, launcher: int, interval: float = 0.1) -> None:
        super().__init__(interval=interval, root=launcher)
        self.ranks: dict[int, int | None] = {}
        self._pid: int | None = None
        self.deaths: dict[int, str] = {}  # pid -> how it ended, from Hydra's report
        self.ended: list[list[int]] = []  # ranks' pids in the order they ended (ties: one entry)
        self._pidfds: dict[int, int] = {}  # fd -> pid
        self.status: dict[int, str] = {}  # pid -> how it ended, read from its zombie
        self._poll = select.poll()

    def _loop(self) -> None:
        # a pidfd per rank turns readable when it ends: the first to end is the rank that died,
        # even when Hydra kills the others a moment later (its own report names any of them)
        while not self._stop.is_set():
            try:
                ready = self._poll.poll(self.interval * 1000)
                ended = [self._pidfds.pop(fd) for fd, _ in ready if fd in self._pidfds]
                for pid in ended:  # a zombie until its proxy reaps it: its wait status, if still there
                    how = procs.zombie_status(pid)
                    if how:
                        self.status[pid] = how
                for fd, _ in ready:
                    self._poll.unregister(fd)
                    os.close(fd)
                if ended:
                    with self._lock:
                        self.ended.append(sorted(ended))
                self.look()
            except Exception:  # /proc races: never let the watch die
                continue
        for fd in self._pidfds:
            os.close(fd)
        self._pidfds.clear()

    def _seen(self, rank: int) -> None:
        if rank not in self.ranks:
            with self._lock:
                self.ranks[rank] = _pmi_rank(rank)
            self._watch(rank)

    def _watch(self, pid: int) -> None:
        if threading.current_thread() is not self._thread or not hasattr(os, "pidfd_open"):
            return
        try:
            fd = os.pidfd_open(pid)
        except OSError:
            return
        self._pidfds[fd] = pid
        self._poll.register(fd, select.POLLIN)

    def feed(self, line: str) -> None:
        """One line of the launcher's output (Hydra reports a rank's bad end on it, and so do the
        ranks' reapers)."""
        m = _REAPER_SAYS.match(line)
        if m:
            self.status.setdefault(int(m.group(1)), m.group(2))
            return
        m = _BAD_PID.match(line)
        if m:
            self._pid = int(m.group(1))
            self.deaths.setdefault(self._pid, "ended abnormally")
            return
        m = _BAD_CODE.match(line)
        if m and self._pid is not None:
            code = int(m.group(1))
            self.deaths[self._pid] = (f"was killed by signal {code} ({procs.signal_name(code)})" if "SIGNAL" in line
                                      else f"exited with code {code}")
            return
        m = _EXIT_STRING.search(line)
        if m and self._pid is not None:
            self.deaths[self._pid] = f"was killed by signal {m.group(2)} ({procs.signal_name(int(m.group(2)))})"

    def _who(self, pid: int) -> str:
        rank = self.ranks.get(pid)
        return f"rank {rank} (pid {pid})" if rank is not None else f"process {pid}"

    def describe(self) -> list[str]:
        """Which rank ended first and how: ``rank 1 (pid P) was killed by signal 9 (SIGKILL)``.

        The order comes from the ranks' pidfds; the how from Hydra's report, which names one
        process of the job (often another one, that it killed itself: then both are said)."""
        with self._lock:
            first = list(self.ended[0]) if self.ended else []
        if not first:
            return [f"{self._who(pid)} {how}" for pid, how in sorted(self.deaths.items())]
        out = []
        hydra = "; ".join(f"{self._who(p)} {h}" for p, h in sorted(self.deaths.items()) if p not in first)
        for pid in first:
            how = self.status.get(pid) or self.deaths.get(pid) or "ended without finishing"
            out.append(f"{self._who(pid)} {how}")
        if out and hydra:
            out[-1] += f" (then Hydra ended the others: {hydra})"
        return out

    def reap(self, wait: float = 10.0, patterns: Sequence[str] = ()) -> list[Path]:
        """Remove what the job left once none of its ranks runs (at most ``wait`` s from now);
        the paths removed."""
        self.stop()
        deadline = time.monotonic() + wait
        while any(procs.running(p) for p in self.ranks) and time.monotonic() < deadline:
            time.sleep(0.05)
        return reclaim([p for p in self.ranks if not procs.running(p)], self.leftovers(), patterns)


def reap_job(reaper: JobReaper, log: Callable[[str], None], patterns: Sequence[str] = ()) -> list[str]:
    """After an MPI job that did not finish: remove what it left (:meth:`JobReaper.reap`) and
    print on stderr, and ``log``, which rank died and how and what was removed."""
    removed = reaper.reap(patterns=patterns)
    lines = [f"ipcbench: the MPI job's {d}" for d in reaper.describe()]
    if removed:
        lines.append(f"ipcbench: removed {len(removed)} resource(s) the MPI job left: "
                     + ", ".join(p.name for p in removed))
    for line in lines:
        log(line)
        print(line, file=sys.stderr, flush=True)
    return lines
