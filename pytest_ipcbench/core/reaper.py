"""A rank's reaper: a small process that outlives a killed MPI rank and reclaims what it left.

Under ``mpiexec`` a rank killed by SIGKILL (or crashing) runs no cleanup, and Hydra then kills
every other rank with SIGKILL too: nobody inside the job is left to remove its segments and
folders. So each rank of a pytest ``--with-mpi`` job starts one reaper, in a session of its
own (Hydra's kill does not reach it). The reaper records the MPICH segments its rank maps, and
waits on a pidfd of the rank and on a pipe: ``done`` on the pipe (a normal end) sends it away;
the rank's death without it makes it print which rank died and how, wait (at most
``SETTLE`` s) for the rank's siblings on this node to end, then remove the rank's resources
(``ipcb-<pid>-*``) and the MPICH segments that no process maps any more. It then exits: nothing
is left running.

Started by :func:`start` (``python -c _BOOT PACKAGE_DIR PID RANK PIDFD ERRFD PROXY [SEGMENT ...]``).
"""

from __future__ import annotations

import os
import select
import signal
import subprocess
import sys
import time
from pathlib import Path

from . import names, procs

SETTLE = 10.0  # seconds to wait for the other ranks of the node to end before removing
LOOK_EVERY = 0.5  # seconds between looks at the rank's maps


#: The reaper's command: this module without the package's ``__init__`` (which imports numpy and
#: the whole API: a reaper per rank must start in a fraction of the time).
_BOOT = ("import sys, types; pkg = types.ModuleType('pytest_ipcbench'); pkg.__path__ = [sys.argv[1]]; "
         "sys.modules['pytest_ipcbench'] = pkg; from pytest_ipcbench.core import reaper; "
         "sys.exit(reaper.main(sys.argv[2:]))")


def main(argv: list[str]) -> int:
    """``PID RANK PIDFD ERRFD PROXY [SEGMENT ...]``, as :func:`start` passes them."""
    return reap(int(argv[0]), int(argv[1]), int(argv[2]), int(argv[3]), int(argv[4]), argv[5:])


def start(rank: int) -> "subprocess.Popen[bytes] | None":
    """Start this process's reaper (None where pidfds are missing); :func:`release` at a normal end."""
    if not hasattr(os, "pidfd_open"):
        return None
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PMI_", "MPI", "HYDRA", "PMIX"))}
    try:
        # a pidfd of this process made here: valid even if this rank dies before the reaper runs
        fd = os.pidfd_open(os.getpid())
    except OSError:
        return None
    segments = [str(p) for p in procs.mapped_files(os.getpid(), "/dev/shm/mpich_shm_")]
    err = _launcher_stderr(os.getppid())
    try:
        return subprocess.Popen([sys.executable, "-c", _BOOT, str(Path(__file__).resolve().parent.parent),
                                 str(os.getpid()), str(rank), str(fd), str(err), str(os.getppid()),
                                 *sorted(set(segments))],
                                stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, start_new_session=True, env=env,
                                pass_fds=(fd,) if err < 0 else (fd, err))
    except OSError:
        return None
    finally:
        os.close(fd)
        if err >= 0:
            os.close(err)


def release(reaper: "subprocess.Popen[bytes] | None") -> None:
    """A normal end: the reaper goes away without touching anything."""
    if reaper is None:
        return
    try:
        assert reaper.stdin is not None
        reaper.stdin.write(b"done\n")
        reaper.stdin.close()
    except (OSError, ValueError):
        pass
    try:
        reaper.wait(timeout=5)
    except subprocess.TimeoutExpired:
        reaper.kill()
        reaper.wait()


def reap(pid: int, rank: int, pidfd: int, err: int, proxy: int, segments: list[str]) -> int:
    """The reaper's life (see the module docstring); its exit code."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C ends the job; the reaper must still clean
    if err >= 0:  # the launcher's stderr: the rank's own is a pipe to Hydra's proxy, gone by then
        os.dup2(err, 2)
        os.close(err)
    mapped: set[Path] = {Path(s) for s in segments}
    poll = select.poll()
    poll.register(pidfd, select.POLLIN)
    poll.register(sys.stdin.fileno(), select.POLLIN)
    done = False
    while True:
        mapped |= set(procs.mapped_files(pid, "/dev/shm/" + "mpich_shm_"))
        events = dict(poll.poll(LOOK_EVERY * 1000))
        if sys.stdin.fileno() in events:
            line = os.read(sys.stdin.fileno(), 64)
            if line.startswith(b"done"):
                done = True
            if not line:
                poll.unregister(sys.stdin.fileno())
        if pidfd in events:
            break
        if done:
            return 0
    if done:
        return 0
    how = procs.zombie_status(pid) or "ended without finishing (killed or crashed)"
    siblings = [k for k in procs.children(proxy) if k != pid]
    first = " first" if siblings and all(procs.running(k) for k in siblings) else ""
    print(f"ipcbench: rank {rank} (pid {pid}){first} {how}; its reaper removes what it left",
          file=sys.stderr, flush=True)
    deadline = time.monotonic() + SETTLE
    while time.monotonic() < deadline and proxy and any(procs.running(k) for k in procs.children(proxy)):
        time.sleep(0.1)
    removed = []
    for item in names.find_ours(pid=pid):
        names.remove(item.path)
        removed.append(item.path.name)
    busy = procs.mapped_shm_names()
    for path in sorted(mapped):
        if path.name not in busy:
            try:
                path.unlink()
                removed.append(path.name)
            except OSError:
                pass
    if removed:
        print(f"ipcbench: removed what rank {rank} left: {', '.join(removed)}\n", end="", file=sys.stderr, flush=True)
    return 0


def _launcher_stderr(parent: int) -> int:
    """A new descriptor of the launcher's stderr (``mpiexec``, up the parents), or -1."""
    here: int | None = parent
    for _ in range(8):
        if not here or here <= 1:
            return -1
        if procs.comm(here).startswith(("mpiexec", "mpirun")):
            try:
                return os.open(f"/proc/{here}/fd/2", os.O_WRONLY | os.O_APPEND | os.O_CLOEXEC)
            except OSError:
                return -1
        here = _ppid(here)
    return -1


def _ppid(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat_ = f.read()
        return int(stat_[stat_.rindex(b")") + 2:].split()[1])
    except (OSError, ValueError, IndexError):
        return None
