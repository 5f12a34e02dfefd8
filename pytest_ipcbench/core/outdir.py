"""Output folders (``ipcbench run --out``, ``ipcbench report --out``): claimed safely.

A folder given by the user must be a writable folder owned by the caller, its path walked link
by link without following any (``lstat``): each link on the way the caller's or root's (another
user's link would choose where the caller, or root, writes). A run holds an exclusive lock on
``<folder>/.ipcbench.lock`` for its whole life (a second run is refused, naming the first's pid);
a default folder name is created exclusively. Every problem is an :class:`OutputFolderError` (a
ValueError: exit 2) naming the folder and what is wrong.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import shutil
import stat
import tempfile
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

from .errors import IpcbenchError

LOCK_NAME = ".ipcbench.lock"
#: free room a run's folder must have before its matrix runs (results.json, the CSV, plots, tables)
RUN_ROOM = 16 << 20


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
        raise _not_yours(folder, st.st_uid)
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
        check_room(folder, RUN_ROOM, "--out")  # before the matrix runs: a full disk after it lost every result
        return folder, FolderLock(folder)
    check_folder(default_parent)
    check_room(default_parent, RUN_ROOM, "ipcbench run")
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


def clear_own(folder: Path, mark: str, own: Sequence[str]) -> Path:
    """A report folder that each run of one command rewrites (``ipcbench gate --out``): checked
    (:func:`check_folder`, made if new), then emptied of the names ``own`` that command writes, and
    only when its ``mark`` file says that command made it; a folder holding anything else is refused,
    never deleted (a user's folder given by mistake, another user's link)."""
    folder = check_folder(folder)
    entries = sorted(p.name for p in folder.iterdir())
    marked = mark in entries
    others = [e for e in entries if e != mark and not (marked and e in own)]
    if others:
        raise OutputFolderError(
            f"{folder} holds {len(others)} file(s) this command did not write ({', '.join(others[:3])}"
            f"{', ...' if len(others) > 3 else ''}): refusing to delete them; choose an empty or new folder")
    for name in entries:
        path = folder / name
        if name == mark:
            continue
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path)
        else:
            path.unlink()
    (folder / mark).touch()
    return folder


def save_or_keep(save: Callable[[Path], Path], path: Path) -> tuple[Path, str]:
    """``save(path)``; when that fails (a disk filled while a run's matrix ran), ``save`` into a new
    private folder of the temporary folder instead: (where it went, what went wrong or "")."""
    try:
        return save(path), ""
    except OutputFolderError as exc:
        kept = save(Path(tempfile.mkdtemp(prefix="ipcbench-results-")) / path.name)
        return kept, f"{exc}: the results were saved to {kept} instead"


#: room an output file needs beyond its own bytes before it is started (metadata, the rename)
SPARE_BYTES = 1 << 20


def check_room(folder: Path, need: int, what: str) -> None:
    """``folder``'s filesystem has ``need`` bytes (and :data:`SPARE_BYTES`) free, or an error naming it."""
    try:
        st = os.statvfs(folder)
    except OSError as exc:
        raise _oserror(folder, exc) from None
    free = st.f_bavail * st.f_frsize
    if free < need + SPARE_BYTES:
        raise OutputFolderError(f"{what}: no room left in {folder} ({free // 1024} KiB free, "
                                f"{(need + SPARE_BYTES) // 1024} KiB needed); free some space or choose another path")


def check_output_file(path: str | os.PathLike[str], what: str, need: int = 0) -> Path:
    """An output file named by the user (``what``: the flag), checked before any work is done: names
    within the filesystem's limit, links read (:func:`check_links`), a regular file when it exists,
    its folder the caller's or root's, writable, with room for ``need`` bytes. Returns the path to write."""
    p = Path(path)
    if not str(path).strip():
        raise OutputFolderError(f"{what}: an empty path")
    try:
        name_max = os.pathconf(_existing_parent(p), "PC_NAME_MAX")
    except OSError:
        name_max = 255
    for part in p.parts:
        if len(os.fsencode(part)) > name_max:
            raise OutputFolderError(f"{what} {path}: the name {part[:24]}... is longer than the filesystem "
                                    f"allows ({name_max} bytes)")
    try:
        check_links(p)
    except OutputFolderError as exc:
        raise OutputFolderError(f"{what}: {exc}") from None
    real = Path(os.path.realpath(p))
    try:
        st = os.lstat(real)
    except FileNotFoundError:
        st = None
    except OSError as exc:
        raise OutputFolderError(f"{what}: {_oserror(real, exc)}") from None
    if st is not None and not stat.S_ISREG(st.st_mode):
        kind = ("a FIFO" if stat.S_ISFIFO(st.st_mode) else "a folder" if stat.S_ISDIR(st.st_mode)
                else "not a regular file")
        raise OutputFolderError(f"{what}: {path} is {kind}; name a file to write")
    folder = real.parent
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise OutputFolderError(f"{what}: {_oserror(folder, exc)}") from None
    owner = folder.stat().st_uid
    if owner not in (os.geteuid(), 0):
        raise OutputFolderError(f"{what}: {_not_yours(folder, owner)}")
    if not os.access(folder, os.W_OK):
        raise OutputFolderError(f"{what}: cannot write into {folder}: permission denied")
    check_room(folder, need, what)
    return real


def _existing_parent(p: Path) -> Path:
    q = Path(os.path.abspath(p)).parent
    while not q.exists() and q != q.parent:
        q = q.parent
    return q


@contextlib.contextmanager
def atomic_output(path: str | os.PathLike[str], what: str = "output") -> Iterator[Path]:
    """A private temporary file in ``path``'s folder to write (its suffix ``path``'s, for a plotter that
    reads it), renamed onto ``path`` when the block ends: never through a symlink, never half a file;
    on any error the temporary file is removed, and an OSError (no space, a read-only filesystem)
    becomes an :class:`OutputFolderError` naming ``path``."""
    path = Path(path)
    try:
        fd, tmp = tempfile.mkstemp(prefix=".ipcbench-", suffix=path.suffix, dir=path.parent)
    except OSError as exc:
        raise OutputFolderError(f"{what}: {_oserror(path.parent, exc)}") from None
    os.close(fd)
    try:
        yield Path(tmp)
        os.replace(tmp, path)
    except BaseException as exc:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        if isinstance(exc, OSError):
            raise OutputFolderError(f"{what}: cannot write {path}: {exc.strerror or exc}") from None
        raise


def write_text(path: str | os.PathLike[str], text: str, what: str = "output") -> Path:
    """Write ``path`` by an atomic rename of a new private file (:func:`atomic_output`)."""
    with atomic_output(path, what) as tmp:
        tmp.write_text(text)
    return Path(path)


def write_output(path: str | os.PathLike[str], text: str, what: str) -> Path:
    """A user-named output file: checked (:func:`check_output_file`), then written atomically."""
    real = check_output_file(path, what, need=len(text.encode()))
    return write_text(real, text, what)
