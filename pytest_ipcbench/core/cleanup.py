"""``ipcbench clean``: remove our OS resources left by dead processes.

Also what an aborted MPICH job leaves (our watchdog ends hung jobs with ``MPI_Abort``): its
segments ``/dev/shm/mpich_shm_*`` (unlinked only when a job ends normally) and Hydra's
``/tmp/hydra_hwloc_xmlfile_*``. One is stale when
no live process maps it and it is older than a minute (a job being set up maps it at once).
"""

from __future__ import annotations

import argparse
import os
import threading
import time
from pathlib import Path

from . import names

MPICH_PREFIX = "mpich_shm_"
HYDRA_PREFIX = "hydra_hwloc_xmlfile_"
HYDRA_DIR = Path("/tmp")  # Hydra's own choice, whatever TMPDIR says
MPICH_MIN_AGE = 60.0


def mapped_shm_names() -> set[str]:
    """Names of the /dev/shm files that some live process has mapped (from /proc/*/maps)."""
    mapped: set[str] = set()
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/maps", "rb") as f:
                for line in f:
                    i = line.find(b"/dev/shm/")
                    if i >= 0:
                        mapped.add(line[i + 9 :].split(b" ")[0].strip().decode(errors="replace"))
        except OSError:
            continue
    return mapped


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


def _launcher_running() -> bool:
    """Is an MPICH launcher (mpiexec / hydra proxy) running on this machine?"""
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/comm") as f:
                comm = f.read().strip()
        except OSError:
            continue
        if comm.startswith(("mpiexec", "hydra_pmi_proxy", "mpirun")):
            return True
    return False


def stale_hydra_files(min_age: float = MPICH_MIN_AGE, ignore: set[str] | frozenset[str] = frozenset()) -> list[Path]:
    """The hwloc topology files (``/tmp/hydra_hwloc_xmlfile_*``) that Hydra leaves after an abort.

    They carry no owner, so they count as stale only while no MPICH launcher runs at all.
    """
    tmp = HYDRA_DIR
    now = time.time()
    try:
        found = [p for p in tmp.glob(HYDRA_PREFIX + "*") if p.name not in ignore]
    except OSError:
        return []
    found = [p for p in found if p.exists() and now - p.stat().st_mtime >= min_age]
    if not found or _launcher_running():
        return []
    return sorted(found)


def _children(pid: int) -> list[int]:
    """Direct children of ``pid`` (every thread's), from /proc."""
    kids: list[int] = []
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return kids
    for tid in tids:
        try:
            with open(f"/proc/{pid}/task/{tid}/children") as f:
                kids.extend(int(x) for x in f.read().split())
        except (OSError, ValueError):
            continue
    return kids


def descendants(pid: int) -> list[int]:
    """Live processes below ``pid``."""
    found: list[int] = []
    frontier = [pid]
    while frontier:
        kids = [k for p in frontier for k in _children(p) if k not in found]
        found.extend(kids)
        frontier = kids
    return found


def _comm(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/comm") as f:
            return f.read().strip()
    except OSError:
        return ""


def _alive(pid: int) -> bool:
    """Running (a zombie that its parent has not reaped yet counts as dead)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
    except OSError:
        return False
    return stat[stat.rindex(b")") + 2 :][:1] not in (b"Z", b"X")


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
        for pid in descendants(self.root):
            comm = _comm(pid)
            if comm.startswith("hydra_pmi_prox"):
                self._record(pid, self._open_hydra_files(pid))
                for rank in _children(pid):
                    self._record(rank, self._mapped_mpich(rank))

    def _record(self, pid: int, paths: list[Path]) -> None:
        if paths:
            with self._lock:
                for path in paths:
                    self.users.setdefault(path, set()).add(pid)

    @staticmethod
    def _mapped_mpich(pid: int) -> list[Path]:
        found = []
        try:
            with open(f"/proc/{pid}/maps", "rb") as f:
                for line in f:
                    i = line.find(b"/dev/shm/" + MPICH_PREFIX.encode())
                    if i >= 0:
                        found.append(Path(line[i:].split(b" ")[0].strip().decode(errors="replace")))
        except OSError:
            pass
        return found

    @staticmethod
    def _open_hydra_files(pid: int) -> list[Path]:
        found = []
        try:
            fds = os.listdir(f"/proc/{pid}/fd")
        except OSError:
            return found
        for fd in fds:
            try:
                target = os.readlink(f"/proc/{pid}/fd/{fd}")
            except OSError:
                continue
            if os.path.basename(target).startswith(HYDRA_PREFIX):
                found.append(Path(target))
        return found

    def leftovers(self) -> list[Path]:
        """Recorded files that still exist, all of whose users are dead."""
        with self._lock:
            items = [(path, set(pids)) for path, pids in self.users.items()]
        return sorted(path for path, pids in items if path.exists() and not any(_alive(p) for p in pids))

    def pending(self) -> list[Path]:
        """Recorded files that still exist while some of their users still run."""
        with self._lock:
            items = [(path, set(pids)) for path, pids in self.users.items()]
        return sorted(path for path, pids in items if path.exists() and any(_alive(p) for p in pids))


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--all", action="store_true", help="also remove resources of live owners")
    parser.add_argument("--dry-run", action="store_true", help="list what would be removed")


def run(args: argparse.Namespace) -> int:
    reclaimed: list[str] = []
    if not args.dry_run:
        try:
            from ..shared import reclaim_orphans
        except ImportError:  # shared arrays are optional here
            reclaim_orphans = None
        if reclaim_orphans is not None:
            reclaimed = list(reclaim_orphans())
    # shared-array segments ("-nd") are counted by their holders: only reclaim_orphans() may
    # judge them (a dead creator does not mean nobody maps it any more)
    found = [
        item
        for item in names.find_ours()
        if (args.all or not item.alive) and not item.path.name.endswith("-nd")
    ]
    verb = "would remove" if args.dry_run else "removed"
    for item in found:
        state = "alive" if item.alive else "dead"
        print(f"{verb} {item.path} (owner {item.pid}, {state})")
        if not args.dry_run:
            names.remove(item.path)
    mpich = stale_mpich_segments()
    for path in mpich:
        print(f"{verb} {path} (MPICH segment of an aborted job, mapped by no process)")
        if not args.dry_run:
            names.remove(path)
    hydra = stale_hydra_files()
    for path in hydra:
        print(f"{verb} {path} (Hydra file of an aborted MPICH job)")
        if not args.dry_run:
            names.remove(path)
    for name in reclaimed:
        print(f"reclaimed shared array {name}")
    if not found and not reclaimed and not mpich and not hydra:
        print("nothing of ours is left")
    return 0


COMMANDS = {"clean": ("remove segments, LMDB folders and sockets left by dead processes", configure, run)}
