"""Output folders (``ipcbench run --out``, ``ipcbench report --out``): claimed safely.

* a folder given by the user must be a folder (not a file), owned by the caller (a folder of
  another user may hold symlinks planted by it: root would write through them), and writable;
  the path is walked link by link without following any first (``lstat``): the folder or link it
  names must be the caller's, and a link on the way the caller's or root's (a link of another user
  lets that user choose where the caller writes);
* a run holds an exclusive lock on ``<folder>/.ipcbench.lock`` for its whole life, so two runs
  never share a folder (a second one is refused, naming the first one's pid);
* the default folder name is unique (created exclusively, with a suffix when taken).

Every problem is an :class:`OutputFolderError` (a ValueError: the command line reports it and
exits 2) that names the folder and what is wrong.
"""

from __future__ import annotations

import errno
import fcntl
import os
import stat
import tempfile
from pathlib import Path

from .errors import IpcbenchError

LOCK_NAME = ".ipcbench.lock"


class OutputFolderError(IpcbenchError, ValueError):
    """An output folder that cannot be used; the text says which and why."""


def _oserror(folder: Path, exc: OSError) -> OutputFolderError:
    if exc.errno in (errno.EROFS, errno.EACCES, errno.EPERM):
        return OutputFolderError(f"cannot write into {folder}: {exc.strerror} (choose another folder with --out)")
    if exc.errno in (errno.ENOTDIR, errno.EEXIST):
        return OutputFolderError(f"{folder} is not a folder (a file is in the way; choose another --out)")
    return OutputFolderError(f"cannot use {folder}: {exc.strerror or exc}")


def _not_yours(what: Path, uid: int, kind: str = "") -> OutputFolderError:
    return OutputFolderError(
        f"{what} {kind}belongs to uid {uid}, not to you (uid {os.geteuid()}): refusing to write into it "
        "(its owner could have planted symlinks there or point it elsewhere); choose a folder of your own with --out"
    )


def check_links(folder: Path) -> None:
    """Walk ``folder`` one name at a time, reading every symlink with ``lstat`` instead of following
    it blindly: the last name (a folder or a link) must be the caller's, a link on the way the
    caller's or root's. Names that do not exist yet end the walk (the caller makes them)."""
    me = os.geteuid()
    last = os.path.normpath(os.path.join(os.getcwd(), os.fspath(folder)))
    todo = [p for p in last.split("/") if p]
    cur, hops, final = "/", 0, True
    while todo:
        part = todo.pop(0)
        final = not todo
        if part == ".":
            continue
        if part == "..":
            cur = os.path.dirname(cur)
            continue
        nxt = os.path.join(cur, part)
        try:
            st = os.lstat(nxt)
        except (FileNotFoundError, NotADirectoryError):
            return
        except OSError as exc:
            raise _oserror(Path(nxt), exc) from None
        if stat.S_ISLNK(st.st_mode):
            if st.st_uid != me and (final or st.st_uid != 0):
                raise _not_yours(
                    Path(nxt),
                    st.st_uid,
                    f"is a symlink that {'points to ' + os.readlink(nxt) + ' and ' if final else ''}",
                )
            hops += 1
            if hops > 40:
                raise OutputFolderError(f"{folder}: too many levels of symbolic links")
            target = os.readlink(nxt)
            if target.startswith("/"):
                cur = "/"
            todo = [p for p in target.split("/") if p] + todo
            continue
        if final and st.st_uid != me:
            raise _not_yours(folder, st.st_uid)
        cur = nxt


def check_folder(folder: Path, create: bool = True, mode: int = 0o777) -> Path:
    """``folder`` made (if ``create``) and checked: a folder, the caller's own (every link on the
    way read, not followed: :func:`check_links`), writable."""
    check_links(folder)
    try:
        if create:
            folder.mkdir(mode=mode, parents=True, exist_ok=True)
    except OSError as exc:
        raise _oserror(folder, exc) from None
    check_links(folder)  # again: what mkdir made or met
    if not folder.is_dir():
        raise OutputFolderError(f"{folder} is not a folder (a file is in the way; choose another --out)")
    st = folder.stat()
    if st.st_uid != os.geteuid():
        raise OutputFolderError(
            f"{folder} belongs to uid {st.st_uid}, not to you (uid {os.geteuid()}): refusing to write into it "
            "(its owner could have planted symlinks there); choose a folder of your own with --out"
        )
    try:  # writable? (root passes every permission check but not a read-only filesystem)
        fd, probe = tempfile.mkstemp(prefix=".ipcbench-probe-", dir=folder)
        os.close(fd)
        os.unlink(probe)
    except OSError as exc:
        raise _oserror(folder, exc) from None
    return folder


class FolderLock:
    """An exclusive lock on an output folder for one run (released by :meth:`release` or exit)."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        path = folder / LOCK_NAME
        try:
            self.fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        except OSError as exc:
            raise _oserror(folder, exc) from None
        try:
            fcntl.flock(self.fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(self.fd, 32, 0).decode(errors="replace").strip() or "?"
            os.close(self.fd)
            raise OutputFolderError(
                f"{folder} is in use by another ipcbench run (pid {holder}); wait for it or choose another --out"
            ) from None
        os.ftruncate(self.fd, 0)
        os.pwrite(self.fd, f"{os.getpid()}\n".encode(), 0)

    def release(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)  # the lock goes with it; the empty-ish lock file stays (unlinking races)
            self.fd = -1


def claim(out: str | os.PathLike[str] | None, default_parent: Path, stamp: str) -> tuple[Path, FolderLock]:
    """The folder of one run, checked and locked: ``out``, or a new ``default_parent/stamp[-n]``."""
    if out is not None:
        folder = check_folder(Path(out))
        return folder, FolderLock(folder)
    check_folder(default_parent)
    for n in range(1, 1000):
        folder = default_parent / (stamp if n == 1 else f"{stamp}-{n}")
        try:
            folder.mkdir()  # exclusive: two runs started in the same second get two folders
        except FileExistsError:
            continue
        except OSError as exc:
            raise _oserror(folder, exc) from None
        return folder, FolderLock(folder)
    raise OutputFolderError(f"no free folder name {stamp}-N in {default_parent}")


def write_text(path: Path, text: str) -> Path:
    """Write ``path`` by an atomic rename of a new private file: never through a symlink, never
    half a file."""
    fd, tmp = tempfile.mkstemp(prefix=".ipcbench-", dir=path.parent)
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise
    return path
