"""Processes on this machine, read from ``/proc``: the one place that scans it.

Used to end a job we started (its whole process group), to find what an aborted job left, to
know which ``/dev/shm`` files some live process maps, and to read the load average that every
measurement records.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Proc:
    pid: int
    ppid: int
    pgid: int
    comm: str
    ticks: int = 0  # CPU clock ticks used, with the children it reaped (stat fields 14-17)


def cores() -> int:
    """CPUs this process may run on (affinity), else the machine's count."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def _stat(pid: int | str) -> tuple[str, list[bytes]] | None:
    """``/proc/<pid>/stat``: (command name, the fields after it, from ``state``); None if gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
        # the command name is in parentheses and may itself hold spaces or ')'
        end = stat.rindex(b")")
        return stat[stat.index(b"(") + 1 : end].decode(errors="replace"), stat[end + 2 :].split()
    except (OSError, ValueError):
        return None


def processes() -> Iterator[Proc]:
    """Every process we may read, from ``/proc/<pid>/stat`` (vanished ones are skipped)."""
    for entry in os.listdir("/proc"):
        got = _stat(entry) if entry.isdigit() else None
        try:
            if got is not None:
                comm, f = got
                yield Proc(int(entry), int(f[1]), int(f[2]), comm, sum(int(x) for x in f[11:15]))
        except (ValueError, IndexError):
            continue


def group_pids(pgid: int) -> set[int]:
    """Pids of the live processes in process group ``pgid``."""
    return {p.pid for p in processes() if p.pgid == pgid}


def descendants(pid: int | None = None, procs: list[Proc] | None = None) -> set[int]:
    """Pids of the live processes below ``pid`` (default: this process)."""
    parent_of = {p.pid: p.ppid for p in (processes() if procs is None else procs)}
    found: set[int] = set()
    frontier = {os.getpid() if pid is None else pid}
    while frontier:
        frontier = {c for c, parent in parent_of.items() if parent in frontier} - found
        found |= frontier
    return found


def ppid(pid: int) -> int | None:
    """The parent of ``pid`` (None when it is gone)."""
    got = _stat(pid)
    try:
        return int(got[1][1]) if got else None
    except (ValueError, IndexError):
        return None


def children(pid: int) -> list[int]:
    """Direct children of ``pid`` (of every thread), from ``/proc/<pid>/task/*/children``."""
    kids: list[int] = []
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return kids
    for tid in tids:
        try:
            with open(f"/proc/{pid}/task/{tid}/children") as f:
                kids.extend(int(x) for x in f.read().split())
        except (OSError, ValueError):
            continue
    return kids


def children_tree(pid: int) -> list[int]:
    """Live processes below ``pid``, reading only their own entries (cheap enough to poll);
    :func:`descendants` when the kernel lacks ``task/*/children``."""
    if not os.path.exists(f"/proc/{pid}/task/{pid}/children"):
        return sorted(descendants(pid))
    found: list[int] = []
    frontier = [pid]
    while frontier:
        frontier = [k for p in frontier for k in children(p) if k not in found]
        found.extend(frontier)
    return found


def comm(pid: int) -> str:
    """The command name of ``pid`` ("" when it is gone)."""
    try:
        with open(f"/proc/{pid}/comm") as f:
            return f.read().strip()
    except OSError:
        return ""


def running(pid: int) -> bool:
    """Alive and not a zombie (a dead child its parent has not reaped yet)."""
    got = _stat(pid)
    return got is not None and got[1][:1] not in ([b"Z"], [b"X"])


def mapped_files(pid: int, prefix: str) -> list[Path]:
    """Files whose path starts with ``prefix`` that ``pid`` maps."""
    found: list[Path] = []
    key = prefix.encode()
    try:
        with open(f"/proc/{pid}/maps", "rb") as f:
            for line in f:
                i = line.find(key)
                if i >= 0:
                    found.append(Path(line[i:].split(b" ")[0].strip().decode(errors="replace")))
    except OSError:
        pass
    return found


def open_files(pid: int, name_prefix: str) -> list[Path]:
    """Files named ``name_prefix*`` that ``pid`` holds open."""
    found: list[Path] = []
    try:
        fds = os.listdir(f"/proc/{pid}/fd")
    except OSError:
        return found
    for fd in fds:
        try:
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        if os.path.basename(target).startswith(name_prefix):
            found.append(Path(target))
    return found


def launcher_running() -> bool:
    """Is an MPICH launcher (mpiexec / hydra proxy) running on this machine?"""
    return any(p.comm.startswith(("mpiexec", "hydra_pmi_proxy", "mpirun")) for p in processes())


def mapped_shm_names() -> set[str]:
    """Names of the /dev/shm files that some live process has mapped (from /proc/*/maps)."""
    return {path[len("/dev/shm/"):] for path in mapped_paths() if path.startswith("/dev/shm/")}


#: The inode of the initial PID namespace (the kernel's PROC_PID_INIT_INO): from it every process
#: of the machine is visible, containers' too.
INIT_PID_NS = 0xEFFFFFFC


def pid_namespace(pid: int | str = "self") -> int | None:
    """The inode of ``pid``'s PID namespace (None when it cannot be read)."""
    try:
        return os.stat(f"/proc/{pid}/ns/pid").st_ino
    except OSError:
        return None


def sees_every_process() -> bool:
    """Is this process in the initial PID namespace, where no live process is hidden from it?"""
    return pid_namespace() == INIT_PID_NS


def only_namespace() -> bool:
    """Does every process of the machine live in this one PID namespace, the initial one? Then a
    pid that is not running is dead whatever namespace its name was made in (no container runs
    now), even for a name that records none. Seen from the initial namespace, a process in it has
    one pid in ``NSpid`` (readable for every process, unlike the namespace link)."""
    if not sees_every_process():
        return False
    return all(len(_nspid(entry)) <= 1 for entry in os.listdir("/proc") if entry.isdigit())  # 0: it ended


def owner_state(pid: int, ns: int | None) -> str:
    """``"alive"``, ``"dead"`` or ``"unseen"``: what this process can tell of the process ``pid``
    of PID namespace ``ns`` (its inode; None when unknown).

    A pid that is not running *here* is not a dead pid: it may live in a PID namespace this one
    cannot see (a container sharing /dev/shm or /tmp). Dead is said only when it is proven: the
    namespace is this one, or a namespace whose processes are visible here (all of a namespace's
    processes are visible or none is) and none of them has that pid, or no process is in that
    namespace any more while this one sees every process.
    """
    mine = pid_namespace()
    if ns is None or mine is None:
        return "alive" if running(pid) else "unseen"
    if ns == mine:
        return "alive" if running(pid) else "dead"
    seen, unsure = False, False
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            if os.stat(f"/proc/{entry}/ns/pid").st_ino != ns:
                continue
        except FileNotFoundError:
            continue
        except OSError:  # its namespace link is not ours to read: one pid per level says where it is
            if len(_nspid(entry)) != 1:  # in our namespace if 1 (and ns is not ours); else it may be ns's
                unsure = True
            continue
        seen = True
        nspid = _nspid(entry)
        if nspid and nspid[-1] == pid and running(int(entry)):
            return "alive"
    if unsure:
        return "unseen"
    if seen or mine == INIT_PID_NS:
        return "dead"
    return "unseen"


def _nspid(pid: int | str) -> list[int]:
    """``pid``'s pid in each PID namespace from this one down to its own (``NSpid``; [] if gone)."""
    try:
        with open(f"/proc/{pid}/status") as f:
            return next(([int(x) for x in line.split()[1:]] for line in f if line.startswith("NSpid:")), [])
    except (OSError, ValueError):
        return []


def signal_name(number: int) -> str:
    """``9`` -> ``SIGKILL``."""
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


def zombie_status(pid: int) -> str:
    """How the zombie ``pid`` ended (``exit_code`` of /proc/<pid>/stat, as waitpid reports it):
    ``was killed by signal 9 (SIGKILL)`` or ``exited with code 2``; "" once its parent reaped it."""
    fields = (_stat(pid) or ("", []))[1]
    if fields[:1] != [b"Z"] or len(fields) < 50:
        return ""
    code = int(fields[49])
    if code & 0x7F:
        return f"was killed by signal {code & 0x7F} ({signal_name(code & 0x7F)})"
    return f"exited with code {code >> 8}"


def mapped_paths(exclude: int | None = None) -> set[str]:
    """Every path some live process maps (/proc/*/maps), holds open or works in (its fds, its cwd: a
    folder an orphaned run still writes into is in use); unreadable processes skipped, ``exclude``
    (a pid) left out."""
    found: set[str] = set()
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == exclude:
            continue
        try:
            found.add(os.readlink(f"/proc/{entry}/cwd"))
            for fd in os.listdir(f"/proc/{entry}/fd"):
                with contextlib.suppress(OSError):
                    found.add(os.readlink(f"/proc/{entry}/fd/{fd}"))
        except OSError:
            pass
        try:
            with open(f"/proc/{entry}/maps", "rb") as f:
                for line in f:
                    i = line.find(b" /")
                    if i >= 0:
                        found.add(line[i + 1:].rstrip(b"\n").decode(errors="replace").removesuffix(" (deleted)"))
        except OSError:
            continue
    return found


def kill_group(proc: subprocess.Popen, grace: float = 5.0) -> set[int]:
    """End a job we started in a session of its own (mpiexec and its ranks): TERM, then KILL
    after ``grace`` seconds. Returns the pids the group had, so what they left can be removed."""
    pids = group_pids(proc.pid)
    for sig, wait in ((signal.SIGTERM, grace), (signal.SIGKILL, max(grace, 1.0))):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            break
        if _gone(proc, pids, wait):
            break
    return pids


def _gone(proc: subprocess.Popen, pids: set[int], seconds: float) -> bool:
    """Wait up to ``seconds`` for ``proc`` and every other process of ``pids`` to end: a rank signalled
    with its launcher may still be running (not yet scheduled to die) when the launcher is gone."""
    deadline = time.monotonic() + seconds
    while True:
        if proc.poll() is not None and not any(running(p) for p in pids if p != proc.pid):
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.01)


def load_average() -> float | None:
    """The 1-minute load average, or None where the OS does not tell."""
    try:
        return os.getloadavg()[0]
    except OSError:
        return None


#: other processes' share of the CPUs (``others_busy``) above which a measurement is called
#: busy: its figures less reliable, a figure below physics not a harness error
BUSY_SHARE = 0.10


def _tree_cpu_ticks() -> int:
    """Clock ticks of CPU used by the live processes below this one, with the children each has
    reaped: a rank still running is ours too."""
    every = list(processes())
    below = descendants(procs=every)
    return sum(p.ticks for p in every if p.pid in below)


def cpu_mark() -> tuple[float, float, float] | None:
    """Now: (wall seconds, CPU seconds the whole machine has been busy, CPU seconds of this process,
    its reaped children and its live descendants); None where ``/proc/stat`` cannot be read. See
    ``others_busy``."""
    try:
        with open("/proc/stat") as f:
            fields = f.readline().split()
        user, nice, system, _idle, _iowait, irq, softirq, steal = (int(x) for x in fields[1:9])
        tick = os.sysconf("SC_CLK_TCK")
        below = _tree_cpu_ticks() / tick
    except (OSError, ValueError):
        return None
    t = os.times()
    busy = (user + nice + system + irq + softirq + steal) / tick
    return time.monotonic(), busy, t.user + t.system + t.children_user + t.children_system + below


def others_busy(mark: tuple[float, float, float] | None) -> float | None:
    """The share of the machine's CPUs (0-1) that processes other than this one and its
    descendants used since ``mark``: other jobs competing with a measurement while it ran. The
    1-minute load average lags by a minute and counts our own ranks; this counts only the others,
    over exactly the measured interval."""
    now = cpu_mark()
    if mark is None or now is None or now[0] <= mark[0]:
        return None
    others = (now[1] - mark[1]) - (now[2] - mark[2])
    return max(0.0, others) / ((now[0] - mark[0]) * (os.cpu_count() or 1))


def has_module(name: str) -> bool:
    """Can ``name`` be imported here (without importing it)?"""
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):
        return False


def find_mpiexec() -> str | None:
    """mpiexec next to this Python (the mpich wheel puts it there), else on PATH."""
    here = Path(sys.executable).parent / "mpiexec"
    if here.exists() and os.access(here, os.X_OK):
        return str(here)
    return shutil.which("mpiexec")
