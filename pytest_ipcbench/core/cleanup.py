"""What ``ipcbench clean`` removes: our OS resources left by dead processes.

Ours: every ``ipcb-<pid>-*`` name (core/names.py) and whatever matches the ``resources`` patterns
that installed backends declare (entry points; a conftest.py's registrations are not seen here).

Also what an aborted MPICH job leaves (our watchdog ends hung jobs with ``MPI_Abort``): its
segments ``/dev/shm/mpich_shm_*`` (unlinked only when a job ends normally) and Hydra's
``/tmp/hydra_hwloc_xmlfile_*``. One is stale when
no live process maps it and it is older than a minute (a job being set up maps it at once).
"""

from __future__ import annotations

import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from . import names
from .procs import launcher_running, mapped_shm_names

MPICH_PREFIX = "mpich_shm_"
MPICH_MIN_AGE = 60.0




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
    tmp = Path(tempfile.gettempdir())
    now = time.time()
    try:
        found = [p for p in tmp.glob("hydra_hwloc_xmlfile_*") if p.name not in ignore]
    except OSError:
        return []
    found = [p for p in found if p.exists() and now - p.stat().st_mtime >= min_age]
    if not found or launcher_running():
        return []
    return sorted(found)


@dataclass(frozen=True)
class Removal:
    path: Path
    why: str


def clean(all_owners: bool = False, dry_run: bool = False) -> tuple[list[Removal], list[str]]:
    """Remove (or with ``dry_run`` only list) what dead processes left; (removals, reclaimed
    shared-array segments). ``all_owners`` takes live owners' resources too."""
    from ..backends.base import declared_resources
    from ..shared import reclaim_orphans

    reclaimed = [] if dry_run else list(reclaim_orphans())
    # plugin backends' own names (Backend.resources) are ours too: every backend is loaded to read them
    patterns = declared_resources(load_all=True)
    # shared-array segments ("-nd") are counted by their holders: only reclaim_orphans() may
    # judge them (a dead creator does not mean nobody maps it any more)
    found = [
        Removal(item.path, f"owner {item.pid}, {'alive' if item.alive else 'dead'}")
        for item in names.find_ours(patterns=patterns)
        if (all_owners or not item.alive) and not item.path.name.endswith("-nd")
    ]
    found += [Removal(p, "MPICH segment of an aborted job, mapped by no process") for p in stale_mpich_segments()]
    found += [Removal(p, "Hydra file of an aborted MPICH job") for p in stale_hydra_files()]
    if not dry_run:
        for r in found:
            names.remove(r.path)
    return found, reclaimed
