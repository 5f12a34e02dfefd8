"""Names of the OS resources we create: prefix, owner pid and an unguessable token.

Every segment, LMDB folder and ipc socket path carries ``ipcb-<pid>-<token>`` so that
``ipcbench clean`` can find the orphans of dead processes and the tests can assert that
nothing of ours was left behind. A plugin backend that names its resources itself declares
them as patterns (``Backend.resources``, e.g. ``"{tmp}/myfifo-{pid}-*"``): :func:`find_ours`
looks for those too.
"""

from __future__ import annotations

import contextlib
import fnmatch
import os
import re
import secrets
import shutil
import signal
import tempfile
import threading
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from . import procs

PREFIX = "ipcb"
SHM_DIR = Path("/dev/shm")
_NAME_RE = re.compile(rf"^{PREFIX}-(?P<pid>\d+)(?:n(?P<ns>\d+))?-(?P<token>[0-9a-f]+)(?P<rest>.*)$")


def resource_name(kind: str = "", pid: int | None = None) -> str:
    """A fresh name ``ipcb-<pid>n<pidns>-<token>[-kind]`` for one OS resource owned by ``pid``.

    ``<pidns>`` is the inode of the owner's PID namespace: a ``clean`` in another namespace (a
    container sharing /dev/shm) then knows that the pid is not one of its own, and keeps the
    resource unless it can see that namespace's processes (:func:`procs.owner_state`).
    """
    pid = os.getpid() if pid is None else pid
    ns = procs.pid_namespace()
    name = f"{PREFIX}-{pid}{f'n{ns}' if ns else ''}-{secrets.token_hex(8)}"
    return f"{name}-{kind}" if kind else name


def owner_pid(name: str) -> int | None:
    """The owner pid encoded in one of our names, or None if the name is not ours."""
    m = _NAME_RE.match(os.path.basename(name.lstrip("/")))
    return int(m.group("pid")) if m else None


def owner_ns(name: str) -> int | None:
    """The owner's PID namespace (inode) encoded in one of our names; None for older names."""
    m = _NAME_RE.match(os.path.basename(name.lstrip("/")))
    return int(m.group("ns")) if m and m.group("ns") else None


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


#: the scratch folder of the command of ours that started this one (calibrate's runs, a gate's rounds)
PARENT_SCRATCH_ENV = "IPCBENCH_PARENT_SCRATCH"


def child_env(scratch: Path, env: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment of a command of ours started in ``scratch`` (see :func:`remove_dead_parents`)."""
    return {**(os.environ if env is None else env), PARENT_SCRATCH_ENV: str(scratch)}


def remove_dead_parents() -> None:
    """At the end of a command started by another of ours: when that one was killed (SIGKILL runs
    no cleanup; this command got SIGTERM from it, core/launcher.py ``ended_with_us``), remove the
    scratch folder it had named after itself, which nobody else would."""
    scratch = os.environ.get(PARENT_SCRATCH_ENV, "")
    owner = owner_pid(scratch) if scratch else None
    if owner is not None and procs.owner_state(owner, owner_ns(scratch)) == "dead":  # a zombie is dead
        remove(Path(scratch))


@dataclass(frozen=True)
class Leftover:
    path: Path
    pid: int
    alive: bool  # not proven dead (see procs.owner_state); for names without a namespace: running here
    ns: int | None = None  # the owner's PID namespace, when its name records it


def _leftover(entry: Path, owner: int, ns: int | None) -> Leftover:
    alive = pid_alive(owner) if ns is None else procs.owner_state(owner, ns) != "dead"
    return Leftover(entry, owner, alive, ns)


_PID = "{pid}"
_PID_MARK = "IPCBENCHPIDMARK"  # survives fnmatch.translate unchanged


def _expand(pattern: str) -> str:
    return pattern.replace("{tmp}", tempfile.gettempdir()).replace("{shm}", str(SHM_DIR))


def check_patterns(patterns: Sequence[str]) -> None:
    """ValueError unless every pattern is absolute (after {tmp}/{shm}) with {pid} in its last part."""
    if isinstance(patterns, str):
        raise ValueError(f"expected a tuple of patterns, got the string {patterns!r}")
    for pattern in patterns:
        folder, base = os.path.split(_expand(pattern))
        if base.count(_PID) != 1 or _PID in folder or not os.path.isabs(folder):
            raise ValueError(
                f"bad resource pattern {pattern!r}: it must be an absolute path (or start with {{tmp}} or "
                "{shm}) whose last part holds {pid} once, e.g. '{tmp}/myfifo-{pid}-*'"
            )
        if "{" in base.replace(_PID, ""):
            raise ValueError(f"bad resource pattern {pattern!r}: only {{pid}}, {{tmp}} and {{shm}} are placeholders")


def _declared(patterns: Sequence[str], pid: int | None) -> list[tuple[Path, int]]:
    """(path, owner pid) of every entry matching a declared pattern (of one owner if ``pid``)."""
    found = []
    for pattern in patterns:
        folder, base = os.path.split(_expand(pattern))
        regex = re.compile(fnmatch.translate(base.replace(_PID, _PID_MARK)).replace(_PID_MARK, r"(?P<pid>\d+)"))
        try:
            entries = list(Path(folder).iterdir())
        except OSError:
            continue
        for entry in entries:
            m = regex.match(entry.name)
            if m and (pid is None or int(m.group("pid")) == pid):
                found.append((entry, int(m.group("pid"))))
    return found


def find_ours(pid: int | None = None, patterns: Sequence[str] = ()) -> list[Leftover]:
    """Every resource of ours in /dev/shm and the temp dir (optionally of one owner pid), and
    every entry matching a declared pattern (``Backend.resources``)."""
    found: dict[Path, Leftover] = {}
    for folder in (SHM_DIR, Path(tempfile.gettempdir())):
        try:
            entries = list(folder.iterdir())
        except OSError:
            continue
        for entry in entries:
            owner = owner_pid(entry.name)
            if owner is None or (pid is not None and owner != pid):
                continue
            if pid is not None and owner_ns(entry.name) not in (None, procs.pid_namespace()):
                continue  # the same number in another PID namespace: another process
            found[entry] = _leftover(entry, owner, owner_ns(entry.name))
    for entry, owner in _declared(patterns, pid):
        found.setdefault(entry, _leftover(entry, owner, None))
    return sorted(found.values(), key=lambda x: str(x.path))


def remove(path: Path) -> None:
    """Remove a leftover file or folder; a missing one is fine. A Ctrl-C in the middle finishes
    the removal first, then stops the run as asked (a half-removed folder was left)."""
    try:
        _remove(path)
    except KeyboardInterrupt:
        _remove(path)
        raise


@contextlib.contextmanager
def interrupts_deferred() -> Iterator[None]:
    """Make or release resources to the end even when Ctrl-C comes in the middle.

    A KeyboardInterrupt can land between any two bytecodes, e.g. after a folder was made and
    before its owner recorded its name, and then nothing removes it.  Inside this block the first
    Ctrl-C is held and raised when the block ends.  A second Ctrl-C raises at once, so a block
    that hangs can still be stopped.  Only on the main thread, and only while Python's own
    handler is installed; otherwise the block runs as it is.
    """
    if threading.current_thread() is not threading.main_thread() or \
            signal.getsignal(signal.SIGINT) is not signal.default_int_handler:
        yield
        return
    held: list[int] = []

    def hold(signum: int, _frame: object) -> None:
        if held:
            raise KeyboardInterrupt
        held.append(signum)

    signal.signal(signal.SIGINT, hold)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, signal.default_int_handler)
        if held:
            raise KeyboardInterrupt


def _remove(path: Path) -> None:
    with contextlib.suppress(FileNotFoundError):
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path, ignore_errors=True)
        else:
            path.unlink()

