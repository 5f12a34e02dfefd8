"""``ipcbench clean``: remove our OS resources left by dead processes.

Ours: every ``ipcb-<pid>-*`` name (core/names.py) and whatever matches the ``resources`` patterns
that installed backends declare (entry points; a conftest.py's registrations are not seen here).

Also what an aborted MPICH job leaves (our watchdog ends hung jobs with ``MPI_Abort``): its
segments ``/dev/shm/mpich_shm_*`` (unlinked only when a job ends normally) and Hydra's
``/tmp/hydra_hwloc_xmlfile_*``. One is stale when
no live process maps it and it is older than a minute (a job being set up maps it at once).
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path

from . import names

MPICH_PREFIX = "mpich_shm_"
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
    tmp = Path(tempfile.gettempdir())
    now = time.time()
    try:
        found = [p for p in tmp.glob("hydra_hwloc_xmlfile_*") if p.name not in ignore]
    except OSError:
        return []
    found = [p for p in found if p.exists() and now - p.stat().st_mtime >= min_age]
    if not found or _launcher_running():
        return []
    return sorted(found)


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
    from ..backends.base import declared_resources

    # plugin backends' own names (Backend.resources) count as ours too: load every backend to read them
    patterns = declared_resources(load_all=True)
    # shared-array segments ("-nd") are counted by their holders: only reclaim_orphans() may
    # judge them (a dead creator does not mean nobody maps it any more)
    found = [
        item
        for item in names.find_ours(patterns=patterns)
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
