"""Names of the OS resources we create: prefix, owner pid and an unguessable token.

Every segment, LMDB folder and ipc socket path carries ``ipcb-<pid>-<token>`` so that
``ipcbench clean`` can find the orphans of dead processes and the tests can assert that
nothing of ours was left behind.
"""

from __future__ import annotations

import os
import re
import secrets
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

PREFIX = "ipcb"
SHM_DIR = Path("/dev/shm")
_NAME_RE = re.compile(rf"^{PREFIX}-(?P<pid>\d+)-(?P<token>[0-9a-f]+)(?P<rest>.*)$")


def resource_name(kind: str = "", pid: int | None = None) -> str:
    """A fresh name ``ipcb-<pid>-<token>[-kind]`` for one OS resource owned by ``pid``."""
    pid = os.getpid() if pid is None else pid
    name = f"{PREFIX}-{pid}-{secrets.token_hex(8)}"
    return f"{name}-{kind}" if kind else name


def owner_pid(name: str) -> int | None:
    """The owner pid encoded in one of our names, or None if the name is not ours."""
    m = _NAME_RE.match(os.path.basename(name.lstrip("/")))
    return int(m.group("pid")) if m else None


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # alive, owned by someone else
        return True
    return True


def private_dir(kind: str = "", pid: int | None = None) -> Path:
    """A new folder readable by its owner only, in the system temp dir, named like a resource."""
    path = Path(tempfile.gettempdir()) / resource_name(kind, pid)
    path.mkdir(mode=0o700)
    return path


@dataclass(frozen=True)
class Leftover:
    path: Path
    pid: int
    alive: bool


def find_ours(pid: int | None = None) -> list[Leftover]:
    """Every resource of ours in /dev/shm and the temp dir (optionally of one owner pid)."""
    found: list[Leftover] = []
    for folder in (SHM_DIR, Path(tempfile.gettempdir())):
        try:
            entries = list(folder.iterdir())
        except OSError:
            continue
        for entry in entries:
            owner = owner_pid(entry.name)
            if owner is None or (pid is not None and owner != pid):
                continue
            found.append(Leftover(entry, owner, pid_alive(owner)))
    return sorted(found, key=lambda x: str(x.path))


def remove(path: Path) -> None:
    """Remove a leftover file or folder; a missing one is fine."""
    try:
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path, ignore_errors=True)
        else:
            path.unlink()
    except FileNotFoundError:
        pass


def clean(include_alive: bool = False) -> list[Leftover]:
    """Remove leftovers of dead owners (or of every owner); return what was removed."""
    removed = []
    for item in find_ours():
        if item.alive and not include_alive:
            continue
        remove(item.path)
        removed.append(item)
    return removed
