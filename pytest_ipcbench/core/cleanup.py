"""What ``ipcbench clean`` removes: our OS resources left by dead processes.

Ours: every ``ipcb-<pid>-*`` name (core/names.py) and whatever matches the ``resources`` patterns
that installed backends declare (entry points; a conftest.py's registrations are not seen here).

Also what an aborted MPICH job leaves (our watchdog ends hung jobs with ``MPI_Abort``): its
segments ``/dev/shm/mpich_shm_*`` (unlinked only when a job ends normally) and Hydra's
``/tmp/hydra_hwloc_xmlfile_*``. One is stale when
no live process maps it and it is older than ten seconds (a job being set up maps it at once), and only where every process is visible
(the initial PID namespace).
"""

from __future__ import annotations

import os
import re
import select
import shutil
import stat
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Sequence

from . import names, procs
from .procs import launcher_running, mapped_shm_names

MPICH_PREFIX = "mpich_shm_"
HYDRA_PREFIX = "hydra_hwloc_xmlfile_"
HYDRA_DIR = Path("/tmp")  # Hydra's own choice, whatever TMPDIR says
MPICH_MIN_AGE = 10.0  # mapped at once by the job that makes it: unmapped and this old, no job uses it
STALE_AFTER = 3600.0  # a file whose owner pid is unknown here counts as left behind after this




def stale_mpich_segments(min_age: float = MPICH_MIN_AGE, ignore: set[str] | frozenset[str] = frozenset()) -> list[Path]:
    """MPICH segments no live process maps, older than ``min_age`` seconds."""
    try:
        candidates = [p for p in names.SHM_DIR.iterdir() if p.name.startswith(MPICH_PREFIX) and p.name not in ignore]
    except OSError:
        return []
    if not candidates:
        return []
    mapped = mapped_shm_names()
    now = time.time()
    stale = []
    for path in candidates:
        try:
            age = now - path.stat().st_mtime
        except FileNotFoundError:
            continue
        if path.name not in mapped and age >= min_age:
            stale.append(path)
    return sorted(stale)




def stale_hydra_files(min_age: float = MPICH_MIN_AGE, ignore: set[str] | frozenset[str] = frozenset()) -> list[Path]:
    """The hwloc topology files (``/tmp/hydra_hwloc_xmlfile_*``) that Hydra leaves after an abort.

    They carry no owner, so they count as stale only while no MPICH launcher runs at all.
    """
    now = time.time()
    try:
        found = [p for p in HYDRA_DIR.glob(HYDRA_PREFIX + "*") if p.name not in ignore]
    except OSError:
        return []
    found = [p for p in found if p.exists() and now - p.stat().st_mtime >= min_age]
    if not found or launcher_running():
        return []
    return sorted(found)


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

    def start(self) -> "JobWatch":
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

    def _record(self, pid: int, paths: list[Path]) -> None:
        if paths:
            with self._lock:
                for path in paths:
                    self.users.setdefault(path, set()).add(pid)

    def leftovers(self) -> list[Path]:
        """Recorded files that still exist, all of whose users are dead."""
        with self._lock:
            items = [(path, set(pids)) for path, pids in self.users.items()]
        return sorted(path for path, pids in items if path.exists() and not any(procs.running(p) for p in pids))

    def pending(self) -> list[Path]:
        """Recorded files that still exist while some of their users still run."""
        with self._lock:
            items = [(path, set(pids)) for path, pids in self.users.items()]
        return sorted(path for path, pids in items if path.exists() and any(procs.running(p) for p in pids))


_BAD_PID = re.compile(r"^=\s+PID (\d+) RUNNING AT")
_BAD_CODE = re.compile(r"^=\s+(?:EXIT CODE|KILLED BY SIGNAL): (\d+)")
_EXIT_STRING = re.compile(r"EXIT STRING: (.*\(signal (\d+)\))")
#: a rank's own reaper (core/reaper.py) read the same zombie: whichever of the two got it says how
_REAPER_SAYS = re.compile(r"^ipcbench: rank \d+ \(pid (\d+)\)(?: first)? (was killed by signal \d+ \(\w+\)|exited with code \d+)")


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

    def look(self) -> None:
        super().look()
        for pid in procs.children_tree(self.root):
            if procs.comm(pid).startswith("hydra_pmi_prox"):
                for rank in procs.children(pid):
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

    def reap(self, wait: float = 10.0, patterns: tuple[str, ...] | list[str] = ()) -> list[Path]:
        """Remove what the job left once none of its ranks runs (at most ``wait`` s from now);
        the paths removed."""
        self.stop()
        deadline = time.monotonic() + wait
        while any(procs.running(p) for p in self.ranks) and time.monotonic() < deadline:
            time.sleep(0.05)
        gone = {p for p in self.ranks if not procs.running(p)}
        removed: list[Path] = []
        mine = procs.pid_namespace()
        for item in names.find_ours(patterns=patterns):
            if item.pid in gone and item.ns in (None, mine):
                names.remove(item.path)
                removed.append(item.path)
        mapped = procs.mapped_shm_names()
        for path in self.leftovers():
            if path.name in mapped:
                continue
            try:
                path.unlink()
                removed.append(path)
            except FileNotFoundError:
                pass
            except OSError:
                continue
        return removed


def reap_job(reaper: JobReaper, log: Callable[[str], None], patterns: tuple[str, ...] | list[str] = ()) -> list[str]:
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


@dataclass(frozen=True)
class Removal:
    path: Path
    why: str


@dataclass
class CleanResult:
    removed: list[Removal]  # removed (or, in a dry run, to be removed)
    reclaimed: list[str]  # shared-array segments no live process holds (reclaimed or to be)
    skipped: list[Removal]  # left alone, with the reason: another user's, odd, not removable


def age(path: Path) -> float:
    """Seconds since ``path`` (or, for a folder, its newest entry) last changed."""
    newest = path.lstat().st_mtime
    if path.is_dir() and not path.is_symlink():
        try:
            for entry in path.iterdir():
                newest = max(newest, entry.lstat().st_mtime)
        except OSError:
            pass
    return time.time() - newest


def in_use(path: Path, mapped: set[str] | None = None) -> bool:
    """Does a live process map ``path`` or a file inside it (/proc/*/maps)?"""
    mapped = procs.mapped_paths() if mapped is None else mapped
    here = str(path)
    return here in mapped or any(m.startswith(here + "/") for m in mapped)


def owner_gone(path: Path, pid: int, min_age: float = STALE_AFTER, ns: int | None = None,
               mapped: set[str] | None = None) -> bool:
    """Is ``path``, named by owner ``pid`` of PID namespace ``ns``, proven to be left behind?

    * the owner is proven dead (:func:`procs.owner_state`: in this namespace, or in one whose
      processes are visible here) and no live process maps it: at once, whatever its age;
    * the owner lives in another PID namespace that this one cannot see: never (a pid that is not
      visible is not a dead pid; it may be a running job in a container sharing /dev/shm);
    * names without a namespace (older names, plugins' declared patterns) whose pid is not
      running here: only once the file is ``min_age`` seconds old, as before.
    """
    state = procs.owner_state(pid, ns)
    if state == "alive":
        return False
    if state == "dead":
        return not in_use(path, mapped)
    if ns is not None:
        return False
    try:
        return age(path) >= min_age
    except FileNotFoundError:
        return False


def unseen_owner(pid: int, ns: int | None) -> bool:
    """An owner in another PID namespace that this one cannot see."""
    return ns is not None and procs.owner_state(pid, ns) == "unseen"


def _remove(path: Path) -> str | None:
    """Remove ``path``; the reason it could not be (None when it is gone)."""
    try:
        if path.is_dir() and not path.is_symlink():
            problems: list[str] = []
            shutil.rmtree(path, onerror=lambda _f, p, exc: problems.append(f"{p}: {exc[1]}"))
            return problems[0] if problems and path.exists() else None
        path.unlink()
    except FileNotFoundError:
        return None
    except OSError as exc:
        return exc.strerror or str(exc)
    return None


def clean(all_owners: bool = False, dry_run: bool = False, all_users: bool = False,
          min_age: float = STALE_AFTER, *, patterns: Sequence[str] = (),
          reclaim: Callable[..., list[str]] | None = None) -> CleanResult:
    """Remove (or with ``dry_run`` only list) what dead processes left.

    Only files owned by this user, unless ``all_users``; only those of owners that are gone
    (see :func:`owner_gone`), unless ``all_owners``. Entries that are neither files nor folders
    (a FIFO named like ours), other users' leftovers and what cannot be removed are skipped and
    reported; the rest is cleaned.

    The floors above core say what else is ours (``ipcbench clean`` passes both): ``patterns``,
    the backends' declared ``resources``; ``reclaim``, ``shared.reclaim_orphans`` (only it may
    judge a shared-array segment, counted by its holders; without it they are left alone).
    """
    uid = os.geteuid()
    removed: list[Removal] = []
    skipped: list[Removal] = []

    def foreign(path: Path) -> int | None:
        """The owning uid when it is another user's and we may not take it."""
        try:
            owner = path.lstat().st_uid
        except FileNotFoundError:
            return None
        return None if all_users or owner == uid else owner

    mapped = procs.mapped_paths()

    def gone(path: Path, pid: int) -> bool:
        return all_owners or owner_gone(path, pid, min_age, names.owner_ns(path.name), mapped)

    def unseen(path: Path, pid: int) -> bool:
        if all_owners or not unseen_owner(pid, names.owner_ns(path.name)):
            return False
        skipped.append(Removal(path, f"its owner, pid {pid} of PID namespace pid:[{names.owner_ns(path.name)}], "
                                     "cannot be seen from here: it may be running; kept"))
        return True

    # shared-array segments ("-nd") are counted by their holders: only reclaim_orphans() may
    # judge them (a dead creator does not mean nobody maps it any more)
    nd: list[str] = []
    for item in names.find_ours(patterns=patterns):
        path = item.path
        if path.name.endswith("-nd") and path.parent == names.SHM_DIR:
            other = foreign(path)
            if other is not None:
                if gone(path, item.pid):
                    skipped.append(Removal(path, f"owned by uid {other}; --all-users to include it"))
            else:
                nd.append(path.name)
            continue
        if not gone(path, item.pid):
            unseen(path, item.pid)
            continue
        why = f"owner {item.pid}, {'alive' if item.alive else 'dead'}"
        other = foreign(path)
        try:
            mode = path.lstat().st_mode
        except FileNotFoundError:
            continue
        if other is not None:
            skipped.append(Removal(path, f"owned by uid {other}; --all-users to include it"))
        elif not (stat.S_ISREG(mode) or stat.S_ISDIR(mode) or stat.S_ISLNK(mode)):
            skipped.append(Removal(path, "not a file or folder (a FIFO or device named like ours)"))
        else:
            removed.append(Removal(path, why))
    odd: list[tuple[str, str]] = []
    reclaimed = [] if reclaim is None else reclaim(
        names=nd, dry_run=dry_run, skipped=odd, judge=lambda name, pid: gone(names.SHM_DIR / name, pid))
    skipped += [Removal(names.SHM_DIR / name, why) for name, why in odd]
    # "mapped by no process" and "no launcher runs" prove something only where every process is
    # visible: from another PID namespace they may belong to a live job this one cannot see
    everything = procs.sees_every_process()
    for path in stale_mpich_segments():
        if foreign(path) is not None:
            continue
        if everything:
            removed.append(Removal(path, "MPICH segment of an aborted job, mapped by no process"))
        else:
            skipped.append(Removal(path, "MPICH segment mapped by no process visible here, but this PID namespace "
                                         "cannot see every process: it may belong to a live job; kept"))
    for path in stale_hydra_files() if everything else []:
        if foreign(path) is None:
            removed.append(Removal(path, "Hydra file of an aborted MPICH job"))
    if not dry_run:
        done = []
        for r in removed:
            problem = _remove(r.path)
            if problem:
                skipped.append(Removal(r.path, f"cannot remove it: {problem}"))
            else:
                done.append(r)
        removed = done
    return CleanResult(removed, reclaimed, skipped)
