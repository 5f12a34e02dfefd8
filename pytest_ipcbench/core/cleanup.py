"""What ``ipcbench clean`` removes: our OS resources left by dead processes.

Ours: every ``ipcb-<pid>-*`` name (core/names.py), what matches the ``resources`` patterns that
installed backends declare, and what an aborted MPICH job leaves (``/dev/shm/mpich_shm_*``,
``/tmp/hydra_hwloc_xmlfile_*``): those only when no live process maps them, they are older than
ten seconds, and every process is visible (the initial PID namespace).
"""

from __future__ import annotations

import os
import shutil
import stat
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from . import names, procs
from .procs import launcher_running, mapped_shm_names

MPICH_PREFIX = "mpich_shm_"
HYDRA_PREFIX = "hydra_hwloc_xmlfile_"
HYDRA_DIR = Path("/tmp")  # Hydra's own choice, whatever TMPDIR says
MPICH_MIN_AGE = 10.0  # mapped at once by the job that makes it: unmapped and this old, no job uses it
STALE_AFTER = 3600.0  # a file whose owner pid is unknown here counts as left behind after this



def _aged(folder: Path, prefix: str, min_age: float, ignore: set[str] | frozenset[str]) -> list[Path]:
    """``folder/prefix*`` not named in ``ignore`` and unchanged for ``min_age`` seconds."""
    now, found = time.time(), []
    try:
        entries = [p for p in folder.iterdir() if p.name.startswith(prefix) and p.name not in ignore]
    except OSError:
        return []
    for path in entries:
        try:
            if now - path.stat().st_mtime >= min_age:
                found.append(path)
        except FileNotFoundError:
            continue
    return sorted(found)


def stale_mpich_segments(min_age: float = MPICH_MIN_AGE, ignore: set[str] | frozenset[str] = frozenset()) -> list[Path]:
    """MPICH segments no live process maps, older than ``min_age`` seconds."""
    found = _aged(names.SHM_DIR, MPICH_PREFIX, min_age, ignore)
    mapped = mapped_shm_names() if found else set()
    return [p for p in found if p.name not in mapped]


def stale_hydra_files(min_age: float = MPICH_MIN_AGE, ignore: set[str] | frozenset[str] = frozenset()) -> list[Path]:
    """The hwloc topology files (``/tmp/hydra_hwloc_xmlfile_*``) that Hydra leaves after an abort.

    They carry no owner, so they count as stale only while no MPICH launcher runs at all.
    """
    found = _aged(HYDRA_DIR, HYDRA_PREFIX, min_age, ignore)
    return [] if not found or launcher_running() else found


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
      running here: at once when every process of the machine is in this, the initial, PID
      namespace (:func:`procs.only_namespace`: no container could own it); else only once the
      file is ``min_age`` seconds old.
    """
    state = procs.owner_state(pid, ns)
    if state == "alive":
        return False
    if state == "dead":
        return not in_use(path, mapped)
    if ns is not None:
        return False
    if procs.only_namespace():  # no other namespace now: a pid not running is dead (a plugin's declared name)
        return not in_use(path, mapped)
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
