"""The suite's leak guard (tests/conftest.py): what a test left of ours on this machine.

Ours: ``ipcb-<pid>-*`` names in /dev/shm and the temp folder whose owner is proven dead, MPICH's
``/dev/shm/mpich_shm_*`` segments that no live process maps, Hydra's
``/tmp/hydra_hwloc_xmlfile_*`` files that no live process holds open, and pytest temp folders
(``pytest-N`` under ``<tmp>/pytest-of-<user>/`` or a rank's ``rankN/pytest-of-<user>/``) of a
pytest run that was killed (its ``.lock`` names a dead pid: a run that ended runs its own
retention policy).

Judged by what is *new* since the test began and *used by nobody alive* once a grace has passed:
another job's live segments, another rank's folders, a session fixture's resources (their owner
runs) and a concurrent pytest session's temp folder (its lock names a live pid) are never
counted. A leak another run makes during the test's window on a shared machine would be; the
suite's own runs in CI have the machine to themselves.
"""

from __future__ import annotations

import getpass
import re
import tempfile
import time
from pathlib import Path

from pytest_ipcbench.core import names, procs
from pytest_ipcbench.core.cleanup import HYDRA_DIR, HYDRA_PREFIX, MPICH_PREFIX

#: seconds a test's leftovers get to go: a killed rank's reaper waits up to 10 s for its node's
#: other ranks (core/reaper.SETTLE), then 2 s for Hydra's proxy to unlink its file
GRACE = 20.0
_NUMBERED = re.compile(r"^pytest-\d+$")


def _pytest_roots() -> list[Path]:
    """pytest's per-user temp root and each rank's (plugin/hygiene.rank_temproot)."""
    try:
        user = getpass.getuser()
    except (ImportError, KeyError, OSError):
        user = "unknown"
    root = Path(tempfile.gettempdir()) / f"pytest-of-{user}"
    roots = [root]
    try:
        roots += [p / f"pytest-of-{user}" for p in root.iterdir() if p.name.startswith("rank") and not p.is_symlink()]
    except OSError:
        pass
    return roots


def snapshot() -> set[Path]:
    """Every entry of ours that exists now, used or not."""
    found: set[Path] = {item.path for item in names.find_ours()}
    for folder, prefix in ((names.SHM_DIR, MPICH_PREFIX), (HYDRA_DIR, HYDRA_PREFIX)):
        try:
            found |= {p for p in folder.iterdir() if p.name.startswith(prefix)}
        except OSError:
            pass
    for root in _pytest_roots():
        try:
            found |= {p for p in root.iterdir() if _NUMBERED.match(p.name)}
        except OSError:
            pass
    return found


def _lock_pid(folder: Path) -> int | None:
    try:
        return int((folder / ".lock").read_text().strip() or "0")
    except (OSError, ValueError):
        return None


def unused(paths: set[Path], keep: set[Path] = frozenset()) -> dict[Path, str]:
    """Those of ``paths`` that still exist and that nobody alive uses: path -> why it counts."""
    out: dict[Path, str] = {}
    paths = {p for p in paths if p not in keep and (p.exists() or p.is_symlink())}
    if not paths:
        return out
    mapped = procs.mapped_shm_names() if any(p.name.startswith(MPICH_PREFIX) for p in paths) else set()
    held: set[Path] = set()
    if any(p.name.startswith(HYDRA_PREFIX) for p in paths):
        for proc in procs.processes():
            held |= set(procs.open_files(proc.pid, HYDRA_PREFIX))
    for path in paths:
        name = path.name
        if name.startswith(MPICH_PREFIX):
            if name not in mapped:
                out[path] = "an MPICH segment no process maps"
        elif name.startswith(HYDRA_PREFIX):
            if path not in held:
                out[path] = "Hydra's topology file, no process holds it"
        elif _NUMBERED.match(name):
            pid = _lock_pid(path)
            if pid is not None and pid > 0 and not procs.running(pid):
                out[path] = f"the temp folder of a pytest run that was killed (pid {pid})"
        else:
            owner = names.owner_pid(name)
            if owner is not None and procs.owner_state(owner, names.owner_ns(name)) == "dead":
                out[path] = f"its owner pid {owner} is dead"
    return out


def leaked(before: set[Path], keep: set[Path], grace: float = GRACE) -> dict[Path, str]:
    """What appeared since ``before`` and is still unused after at most ``grace`` seconds (asynchronous
    reapers finish meanwhile); ``keep``: entries that are not the test's (the session's own basetemp)."""
    deadline = time.monotonic() + grace
    while True:
        found = unused(snapshot() - before, keep)
        if not found or time.monotonic() >= deadline:
            return found
        time.sleep(0.25)


def describe(found: dict[Path, str]) -> str:
    return "; ".join(f"{p} ({why})" for p, why in sorted(found.items()))


def remove(found: dict[Path, str]) -> None:
    """The machine stays clean for the next test, whatever this one left."""
    for path in found:
        names.remove(path)


__all__ = ["GRACE", "describe", "leaked", "remove", "snapshot", "unused"]
