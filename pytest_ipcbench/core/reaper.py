"""A rank's reaper: a small process that outlives a killed MPI rank and reclaims what it left.

docs/reliability.md ("A killed rank or launcher") says when and how. It waits on a pidfd of its rank,
of its launchers (``mpiexec`` and the command named by ``LAUNCHER_ENV``) and on a pipe: ``done``
sends it away; the rank's death says which rank died and how and reclaims; a launcher's death
kills the rank first. Started by :func:`start` (``python -c _BOOT PACKAGE_DIR PID RANK PIDFD
ERRFD PROXY WATCH [SEGMENT ...]``, WATCH a comma-separated list of ``FD:PID:NAME`` or ``-``).
"""

from __future__ import annotations

import contextlib
import os
import select
import signal
import subprocess
import sys
import time
from collections.abc import Iterable, Sequence
from pathlib import Path

from . import names, procs
from .cleanup import HYDRA_PREFIX, MPICH_PREFIX

SETTLE = 10.0  # seconds to wait for the other ranks of the node to end before removing
LOOK_EVERY = 0.5  # seconds between looks at the rank's maps
#: set by core/launcher.py in the environment of the jobs it starts: the pid of the command that
#: started that mpiexec (honoured only by ranks whose mpiexec that pid started)
LAUNCHER_ENV = "IPCBENCH_LAUNCHER"


#: The reaper's command: this module without the package's ``__init__`` (which imports numpy and
#: the whole API: a reaper per rank must start in a fraction of the time).
_BOOT = ("import sys, types; pkg = types.ModuleType('pytest_ipcbench'); pkg.__path__ = [sys.argv[1]]; "
         "sys.modules['pytest_ipcbench'] = pkg; from pytest_ipcbench.core import reaper; "
         "sys.exit(reaper.main(sys.argv[2:]))")


def main(argv: list[str]) -> int:
    """``PID RANK PIDFD ERRFD PROXY WATCH [SEGMENT ...]``, as :func:`start` passes them."""
    watch = {}
    for item in argv[5].split(",") if argv[5] != "-" else []:
        fd, pid, name = item.split(":", 2)
        watch[int(fd)] = (int(pid), name)
    return reap(int(argv[0]), int(argv[1]), int(argv[2]), int(argv[3]), int(argv[4]), argv[6:], watch)


def start(rank: int) -> subprocess.Popen[bytes] | None:
    """Start this process's reaper (None where pidfds are missing); :func:`release` at a normal end."""
    if not hasattr(os, "pidfd_open"):
        return None
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PMI_", "MPI", "HYDRA", "PMIX"))}
    try:
        # a pidfd of this process made here: valid even if this rank dies before the reaper runs
        fd = os.pidfd_open(os.getpid())
    except OSError:
        return None
    segments = [str(p) for p in procs.mapped_files(os.getpid(), "/dev/shm/" + MPICH_PREFIX)]
    err = _launcher_stderr(os.getppid())
    watch = _launcher_pidfds(os.getppid())
    fds = [fd] + ([err] if err >= 0 else []) + [w for w, _, _ in watch if w >= 0]
    try:
        return subprocess.Popen([sys.executable, "-c", _BOOT, str(Path(__file__).resolve().parent.parent),
                                 str(os.getpid()), str(rank), str(fd), str(err), str(os.getppid()),
                                 ",".join(f"{w}:{p}:{n}" for w, p, n in watch) or "-",
                                 *sorted(set(segments))],
                                stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, start_new_session=True, env=env,
                                pass_fds=tuple(fds))
    except OSError:
        return None
    finally:
        for each in fds:
            os.close(each)


def release(reaper: subprocess.Popen[bytes] | None, interrupted: bool = False) -> None:
    """A normal end: the reaper goes away without touching anything.

    ``interrupted``: this rank ends its job after a Ctrl-C. Hydra's proxy, signalled too, then
    sometimes exits without unlinking its topology file (1 run in 8 here), so the reaper stays
    until the rank and the proxy are gone and removes that file if it is still there.
    """
    if reaper is None:
        return
    try:
        assert reaper.stdin is not None
        reaper.stdin.write(b"interrupted\n" if interrupted else b"done\n")
        reaper.stdin.close()
    except (OSError, ValueError):
        pass
    if interrupted:
        return
    try:
        reaper.wait(timeout=5)
    except subprocess.TimeoutExpired:
        reaper.kill()
        reaper.wait()


def reap(pid: int, rank: int, pidfd: int, err: int, proxy: int, segments: list[str],
         watch: dict[int, tuple[int, str]] | None = None) -> int:
    """The reaper's life (see the module docstring); its exit code."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C ends the job; the reaper must still clean
    if err >= 0:  # the launcher's stderr: the rank's own is a pipe to Hydra's proxy, gone by then
        os.dup2(err, 2)
        os.close(err)
    watch = dict(watch or {})
    mapped: set[Path] = {Path(s) for s in segments}
    hydra: set[Path] = set()
    poll = select.poll()
    poll.register(pidfd, select.POLLIN)
    poll.register(sys.stdin.fileno(), select.POLLIN)
    done = interrupted = False
    launcher_gone = ""

    def end_rank(fd: int) -> str:
        """The rank's launcher is gone: nobody else will end this job, so its reaper does (an
        interrupted rank is on its way out and said why)."""
        gone = f"its launcher {watch[fd][1]} (pid {watch[fd][0]}) is gone"
        if not interrupted:
            _say(f"ipcbench: rank {rank} (pid {pid}): {gone}; its reaper ends it")
        with contextlib.suppress(OSError, AttributeError):
            signal.pidfd_send_signal(pidfd, signal.SIGKILL)
        return gone

    for fd in watch:
        if fd >= 0:
            poll.register(fd, select.POLLIN)
        elif not launcher_gone:  # gone before this reaper started
            launcher_gone = end_rank(fd)
    while True:
        mapped |= set(procs.mapped_files(pid, "/dev/shm/" + MPICH_PREFIX))
        hydra |= set(procs.open_files(proxy, HYDRA_PREFIX)) if proxy else set()
        events = dict(poll.poll(LOOK_EVERY * 1000))
        if sys.stdin.fileno() in events:
            line = os.read(sys.stdin.fileno(), 64)
            done = done or line.startswith(b"done")
            interrupted = interrupted or line.startswith(b"interrupted")
            if not line:
                poll.unregister(sys.stdin.fileno())
        if done:
            return 0
        if pidfd in events:
            break
        gone = [fd for fd in watch if fd in events]
        if gone and not launcher_gone:
            for fd in gone:
                poll.unregister(fd)
            launcher_gone = end_rank(gone[0])
    if not interrupted:  # an interrupted rank ended its job itself and said so
        how = procs.zombie_status(pid) or "ended without finishing (killed or crashed)"
        siblings = [k for k in procs.children(proxy) if k != pid]
        first = " first" if siblings and all(procs.running(k) for k in siblings) else ""
        if launcher_gone:
            how = f"was ended by its reaper ({launcher_gone})"
            first = ""
        elif gone := [fd for fd in watch if fd >= 0 and fd in dict(poll.poll(0))]:
            who, what = watch[gone[0]]
            how += f" (its launcher {what}, pid {who}, is gone)"
        _say(f"ipcbench: rank {rank} (pid {pid}){first} {how}; its reaper removes what it left")
    deadline = time.monotonic() + SETTLE
    while time.monotonic() < deadline and proxy and (
            any(procs.running(k) for k in procs.children(proxy)) or (hydra and procs.running(proxy))):
        time.sleep(0.1)
    removed = reclaim([pid], sorted(mapped))
    # Hydra's topology file: its proxy held it open; once the proxy is gone, nobody of the job reads it
    # (a normal end unlinks it: then it is simply absent)
    if hydra and not (proxy and procs.running(proxy)):
        deadline = time.monotonic() + 2.0  # the proxy unlinks it itself on its way out, unless killed
        while time.monotonic() < deadline and any(p.exists() for p in hydra):
            time.sleep(0.1)
        removed += reclaim((), sorted(hydra))
    if removed:
        _say(f"ipcbench: removed what rank {rank} left: {', '.join(p.name for p in removed)}")
    return 0


def reclaim(pids: Iterable[int], files: Iterable[Path] = (), patterns: Sequence[str] = ()) -> list[Path]:
    """Remove our resources named by ``pids`` (and by the backends' declared ``patterns``) and the
    ``files`` (MPICH segments, Hydra's file) that no live process maps; the paths removed."""
    removed = []
    for pid in pids:
        for item in names.find_ours(pid=pid, patterns=patterns):
            names.remove(item.path)
            removed.append(item.path)
    busy = procs.mapped_shm_names()
    for path in files:
        if path.name not in busy:
            with contextlib.suppress(OSError):
                path.unlink()
                removed.append(path)
    return removed


def _say(line: str) -> None:
    """One line on the launcher's stderr; a killed launcher's is a broken pipe: the cleanup goes on."""
    try:
        os.write(2, (line + "\n").encode(errors="replace"))
    except OSError:
        pass


def _launcher_pidfds(parent: int) -> list[tuple[int, int, str]]:
    """Pidfds of this rank's launchers: its ``mpiexec`` (up the parents) and the command that started
    that mpiexec when core/launcher.py says so (``LAUNCHER_ENV``); (fd, pid, name) each."""
    out: list[tuple[int, int, str]] = []
    mpiexec = _mpiexec(parent)
    try:
        launcher = int(os.environ.get(LAUNCHER_ENV, ""))
    except ValueError:
        launcher = 0
    if launcher > 1 and not procs.running(launcher) and (mpiexec is None or procs.ppid(mpiexec) != launcher):
        # started by core/launcher.py, whose command died while this rank was starting (mpiexec gone
        # too, or orphaned: its parent is not that command any more): no pidfd to wait on, it is gone
        # already (fd -1)
        return [(-1, launcher, "ipcbench" if mpiexec is None else "the command that started mpiexec")]
    if mpiexec is None:
        return out
    wanted = [(mpiexec, "mpiexec")]
    if launcher > 1 and procs.ppid(mpiexec) == launcher:
        wanted.append((launcher, procs.comm(launcher) or "launcher"))
    for pid, name in wanted:
        try:
            out.append((os.pidfd_open(pid), pid, name))
        except OSError:
            continue
    return out


def _mpiexec(parent: int) -> int | None:
    """The ``mpiexec`` above this rank (up the parents), or None."""
    here: int | None = parent
    for _ in range(8):
        if not here or here <= 1:
            return None
        if procs.comm(here).startswith(("mpiexec", "mpirun")):
            return here
        here = procs.ppid(here)
    return None


def _launcher_stderr(parent: int) -> int:
    """A new descriptor of the launcher's stderr (``mpiexec``, up the parents), or -1."""
    here = _mpiexec(parent)
    if here is None:
        return -1
    try:
        return os.open(f"/proc/{here}/fd/2", os.O_WRONLY | os.O_APPEND | os.O_CLOEXEC)
    except OSError:
        return -1
