"""The one MPI launcher: ``mpiexec -n N python -m MODULE ARGS`` and the records its ranks print.

``ipcbench run``, the reference checks and the self-check start their jobs here: mpiexec found
by :func:`~.procs.find_mpiexec`, started in its own session (a Ctrl-C or a timeout ends mpiexec
*and* its ranks) with ``PYTHONUNBUFFERED``; rank 0 prints each record as ``MARK`` + JSON on one
line (:func:`emit`), picked out of the rest by :func:`record`. :func:`run` waits and returns the
records; :func:`start` hands back the running job for a caller that reads them as they come.
"""

from __future__ import annotations

import json
import os
import queue
import subprocess
import sys
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from .errors import IpcbenchError
from .procs import find_mpiexec, kill_group

NO_MPIEXEC = "no mpiexec found (next to python or on PATH)"


class MPIExecNotFound(IpcbenchError, FileNotFoundError):
    """Neither next to this Python nor on PATH (install the mpi extra: the mpich wheel brings it)."""


#: what MPICH maps in /dev/shm per rank of a job on one node (about 1.06 MiB, measured), with room
#: to spare; and for the job
SHM_PER_RANK = 2 << 20
SHM_PER_JOB = 4 << 20


class ShmFull(IpcbenchError, OSError):
    """/dev/shm has no room for an MPI job: MPICH would die at start-up with SIGBUS."""


def check_shm_room(ranks: int, shm: str = "/dev/shm") -> None:
    """Room in ``shm`` for MPICH's segment of a job of ``ranks`` ranks, or ShmFull naming it: a nearly
    full /dev/shm killed MPICH at init with SIGBUS, in a message that never named /dev/shm, and left
    its ``mpich_shm_*`` segment."""
    try:
        st = os.statvfs(shm)
    except OSError:
        return  # no /dev/shm: MPICH says what it lacks
    free, need = st.f_bavail * st.f_frsize, SHM_PER_JOB + ranks * SHM_PER_RANK
    if free < need:
        raise ShmFull(f"{shm} has {free >> 20} MiB free, an MPI job of {ranks} ranks needs about "
                      f"{need >> 20} MiB there for MPICH's shared memory: free some (`ipcbench clean`, "
                      f"`ls -la {shm}`) or make it larger")


def command(ranks: int, module: str, args: Sequence[str] = (), mpiexec: str | None = None) -> list[str]:
    """``mpiexec -n ranks python -m module args...``; MPIExecNotFound when there is no mpiexec,
    ShmFull when /dev/shm has no room for it."""
    exe = mpiexec or find_mpiexec()
    if exe is None:
        raise MPIExecNotFound(NO_MPIEXEC)
    check_shm_room(ranks)
    return [exe, "-n", str(ranks), sys.executable, "-m", module, *args]


def _env() -> dict[str, str]:
    # records must not wait in a rank's buffer; the ranks' reapers end the job if this process dies
    # (core/reaper.py: nothing else would, and a rank blocked in MPI never notices)
    return {**os.environ, "PYTHONUNBUFFERED": "1", "IPCBENCH_LAUNCHER": str(os.getpid())}


def ended_with_us(cmd: list[str]) -> list[str]:
    """``cmd`` run so that it gets SIGTERM the moment this process dies (``setpriv --pdeathsig``,
    util-linux; the setting survives the exec into mpiexec). mpiexec then ends its job the orderly
    way at once, even when this process is killed before any rank's reaper runs. Only from the
    main thread: the kernel sends the signal when the thread that started the child ends."""
    import shutil

    setpriv = shutil.which("setpriv")
    if setpriv is None or threading.current_thread() is not threading.main_thread():
        return cmd
    return [setpriv, "--pdeathsig", "TERM", "--", *cmd]


# ------------------------------------------------------------------------------ rank side


def emit(mark: str, obj: Any) -> None:
    """On a rank (rank 0, by the callers' convention): one record for the launcher, as a line."""
    sys.stdout.write(mark + json.dumps(obj, default=str) + "\n")
    sys.stdout.flush()


def record(line: str, mark: str) -> Any | None:
    """The record a line carries (None: another line the ranks printed)."""
    return json.loads(line[len(mark):]) if line.startswith(mark) else None


# ---------------------------------------------------------------------------- launcher side


@dataclass
class Finished:
    """A job :func:`run` waited for: its exit code (None: killed at its timeout) and output."""

    returncode: int | None
    records: list[Any] = field(default_factory=list)
    stdout: str = ""
    stderr: str = ""

    @property
    def timed_out(self) -> bool:
        return self.returncode is None


def run(ranks: int, module: str, args: Sequence[str] = (), *, mark: str, timeout: float,
        mpiexec: str | None = None) -> Finished:
    """Start the job, wait at most ``timeout`` seconds (then end it, ranks too), gather its records;
    MPIExecNotFound when there is no mpiexec."""
    cmd = command(ranks, module, args, mpiexec)
    proc = subprocess.Popen(ended_with_us(cmd), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True, env=_env())
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        kill_group(proc)
        out, err = proc.communicate()
        return Finished(None, [], out, err)
    except BaseException:  # Ctrl-C: its own session does not get the signal, so end it here
        kill_group(proc)
        proc.wait()
        raise
    return Finished(proc.returncode, [record(ln, mark) for ln in out.splitlines() if ln.startswith(mark)], out, err)


class Job:
    """A running job whose output lines are read as they come (``("out" | "err", line)``, and
    ``(name, None)`` when that stream ends): :meth:`lines` is a queue fed by two threads."""

    def __init__(self, cmd: list[str]) -> None:
        self.cmd = cmd
        # SIGPIPE stays ignored in mpiexec (restore_signals=False): were this process killed, mpiexec's
        # next write fails with EPIPE and it ends its job the orderly way (its ranks, Hydra's topology
        # file) instead of dying on the spot and leaving them
        self.proc = subprocess.Popen(ended_with_us(cmd), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                     start_new_session=True, env=_env(), restore_signals=False)
        self.lines: queue.Queue[tuple[str, str | None]] = queue.Queue()
        for stream, name in ((self.proc.stdout, "out"), (self.proc.stderr, "err")):
            threading.Thread(target=self._pump, args=(stream, name), daemon=True).start()

    def _pump(self, stream: Any, name: str) -> None:
        for line in stream:
            self.lines.put((name, line.rstrip("\n")))
        self.lines.put((name, None))

    def kill(self) -> set[int]:
        """End mpiexec and its ranks; the pids they had (to remove what they left)."""
        return kill_group(self.proc)


def start(ranks: int, module: str, args: Sequence[str] = (), mpiexec: str | None = None) -> Job:
    """Start the job and return at once; MPIExecNotFound when there is no mpiexec."""
    return Job(command(ranks, module, args, mpiexec))


__all__ = ["Finished", "Job", "MPIExecNotFound", "NO_MPIEXEC", "command", "emit", "find_mpiexec", "record",
           "run", "start"]
