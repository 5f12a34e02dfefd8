"""Deep mode: bytes copied and instructions executed per message, under valgrind (opt-in).

docs/counters.md "Deep mode". Every rank of one case runs under valgrind twice: DHAT in copy
mode (``copied.bytes``, ``copied.calls``) and callgrind (``instructions``). Start-up cancels by
difference: run ``k`` (1 .. repeats + 1) makes ``k * n`` message iterations and
``(repeats + 1 - k) * n`` of the harness's waits alone, so run ``k+1`` minus run ``k`` is ``n``
messages; the ``repeats`` differences agree for an exact counter. callgrind counts only the
window between two marker calls (MPI collectives outside it poll as long as valgrind stretches a
wait). Under MPI: ``mpiexec -n R valgrind ... python -m pytest_ipcbench.harness.deep``; local
backends: ``valgrind --trace-children=yes``. Ranks report their pids to map valgrind's ``%p``
files; PYTHONHASHSEED is fixed (hash randomisation changes instruction counts).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ..backends.base import BackendSpec, get_backend
from ..core.counters import DEEP_COUNTERS, Counters, RankCounters
from ..core.errors import UsageError
from ..core.launcher import command as mpi_command, emit, record
from ..core.payloads import PayloadSpec
from ..core.procs import kill_group
from ..core.wait import WAIT_ENV
from .count import _harness_waits, _never, messages_per_iteration, role
from .payload import BufferPayload
from .plan import BenchSettings
from .scenarios import _SCENARIO_CLASSES, _Case

MARK = "@@ipcbench-deep "
TOOLS = ("dhat", "callgrind")
#: defaults: valgrind runs Python 30-100x slower, so few messages and small payloads
ITERATIONS = 4
REPEATS = 2
WARMUP = 2
STREAM_WINDOW = 8  # a stream's messages per acknowledgement in deep mode (the timed default is 64)
TIMEOUT = 900.0  # seconds per valgrind run
#: libc functions the rank calls (os.getppid, os.getpgrp) just before and just after the messages
#: and waits it counts: callgrind zeroes its counts at the first and writes them out at the second
ZERO_MARK, DUMP_MARK = "getppid", "getpgrp"


def valgrind_unavailable() -> str | None:
    """Why deep mode cannot run here, or None."""
    exe = shutil.which("valgrind")
    if exe is None:
        return "valgrind not found on PATH (install the distribution's valgrind package: apt-get install valgrind)"
    try:
        out = subprocess.run([exe, "--version"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"valgrind at {exe} did not run: {exc}"
    if out.returncode != 0:
        return f"valgrind at {exe} failed: {out.stderr.strip()[:200]}"
    return None


# ------------------------------------------------------------------------------ parsing


def parse_dhat(text: str) -> tuple[int, int]:
    """(bytes copied, copy calls) from a DHAT ``--mode=copy`` JSON file's text: the sums over its
    program points (``tb``: total bytes, ``tbk``: total blocks, i.e. calls)."""
    data = json.loads(text)
    if data.get("mode") != "copy":
        raise ValueError(f"not a DHAT copy profile (mode {data.get('mode')!r}); run dhat with --mode=copy")
    pps = data.get("pps") or []
    return sum(int(p["tb"]) for p in pps), sum(int(p["tbk"]) for p in pps)


_TOTALS = re.compile(r"^(totals|summary):\s*(\d+)", re.MULTILINE)


def parse_callgrind(text: str) -> int:
    """Instructions (Ir) from a callgrind output file: its ``totals:`` line (else ``summary:``).
    Only Ir is collected by default, so the first number is Ir."""
    found = {m.group(1): int(m.group(2)) for m in _TOTALS.finditer(text)}
    if not found:
        raise ValueError("no 'totals:' or 'summary:' line in the callgrind output")
    return found.get("totals", found.get("summary", 0))


# ----------------------------------------------------------------------------- rank side


class _SocketBarrier:
    """A barrier that blocks in the kernel (a Unix socket, rank 0 the hub) and never polls: a
    polling barrier's instructions grow with the time waited, which valgrind stretches differently
    in every run, while blocking reads execute the same instructions however long they wait."""

    def __init__(self, group: Any, path: str) -> None:
        import socket

        self.rank, self.size = group.rank, group.size
        self.peers: list[Any] = []
        if self.rank == 0:
            server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            server.bind(path)
            server.listen(self.size)
            group.barrier()
            for _ in range(self.size - 1):
                self.peers.append(server.accept()[0])
            server.close()
            os.unlink(path)
        else:
            group.barrier()
            peer = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            peer.connect(path)
            self.peers.append(peer)
        group.barrier()

    def __call__(self) -> None:
        if self.rank == 0:
            for peer in self.peers:
                if not peer.recv(1):
                    raise RuntimeError("deep mode: a rank left the barrier")
            for peer in self.peers:
                peer.sendall(b"b")
        else:
            self.peers[0].sendall(b"b")
            if not self.peers[0].recv(1):
                raise RuntimeError("deep mode: rank 0 left the barrier")

    def close(self) -> None:
        for peer in self.peers:
            peer.close()


def _run_case(group: Any, name: str, mode: str, kind: str, size: int, scenario: str, messages: int,
              waits: int) -> Any:
    """Collective, on every rank: open the case, warm it up, then ``messages`` message iterations
    and ``waits`` iterations of the harness's waits alone; rank 0 gets every rank's (pid, rank, role)."""
    import gc

    from ..shared import _cache

    # the shared-array cache's sweeper wakes every SWEEP_INTERVAL seconds and lists /proc: on the
    # clock, not per message, and valgrind's slowness multiplies its wakes (a run k+1 lasts longer
    # than run k); it unmaps nothing a run of a few messages needs
    _cache.SWEEP_INTERVAL = 1e9
    # every wait of the harness (and of a stream's acknowledgement) goes through group.barrier
    settings = BenchSettings(count=False, window=STREAM_WINDOW, touch=False, quiet_waits=False)
    payload = BufferPayload(size) if kind == "buffer" else PayloadSpec(kind, size)
    case: _Case = _SCENARIO_CLASSES[scenario](group, BackendSpec(name, mode), payload, settings)
    barrier = None
    if group.size > 1:
        barrier = _SocketBarrier(group, os.path.join(os.getcwd(), "barrier.sock"))
    try:
        case.open()
        if barrier is not None:
            group.barrier = barrier  # this group's barrier from now on
        case.block(0, WARMUP, False, _never)  # unverified, as the counting pass
        harness = _harness_waits(case, settings)
        gc.collect()
        gc.disable()  # a collection would fall in one run and not the other
        group.barrier()
        os.getppid()  # callgrind: --zero-before=getppid (the count starts here: MPI's set-up spins)
        case.block(WARMUP, messages, False, _never)
        group.barrier()
        for _ in range(waits):
            harness()
        group.barrier()
        os.getpgrp()  # callgrind: --dump-before=getpgrp (the count of the window, before MPI's close)
        gc.enable()
        mine = (os.getpid(), group.rank, role(case), messages_per_iteration(case))
    finally:
        case.close()
        if barrier is not None:
            group.__dict__.pop("barrier", None)  # the class's again (close and gather are the group's own)
            barrier.close()
    return group.gather(mine)


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m pytest_ipcbench.harness.deep")
    p.add_argument("--backend", required=True)
    p.add_argument("--mode", default="native")
    p.add_argument("--kind", default="ndarray")
    p.add_argument("--size", type=int, required=True)
    p.add_argument("--scenario", default="broadcast")
    p.add_argument("--messages", type=int, required=True, help="message iterations of this run")
    p.add_argument("--waits", type=int, required=True, help="harness-wait iterations of this run")
    p.add_argument("--ranks", type=int, default=2, help="local ranks (without MPI)")
    a = p.parse_args(argv)
    args = (a.backend, a.mode, a.kind, a.size, a.scenario, a.messages, a.waits)
    from ..core.group import MPIGroup, in_mpi_job
    from ..core.local import LocalWorld

    if in_mpi_job():
        group = MPIGroup.world()
        ranks = _run_case(group, *args)
        if group.rank == 0:
            emit(MARK, ranks)
    else:
        with LocalWorld(a.ranks) as world:
            outcomes = world.run(_run_case, *args, ranks=a.ranks)
        emit(MARK, outcomes[0])
    return 0


# --------------------------------------------------------------------------- driver side


@dataclass(frozen=True)
class DeepCase:
    """One case for deep mode."""

    backend: str
    mode: str = "native"
    kind: str = "ndarray"
    size: int = 1024
    scenario: str = "broadcast"
    ranks: int = 2

    @property
    def label(self) -> str:
        return f"{self.scenario} {self.backend}/{self.mode} {self.kind}-{self.size}B r{self.ranks}"


def _valgrind_args(tool: str, out_dir: str) -> list[str]:
    common = ["valgrind", "-q", "--error-exitcode=0"]
    if tool == "dhat":
        return [*common, "--tool=dhat", "--mode=copy", f"--dhat-out-file={out_dir}/dhat.%p"]
    if tool == "callgrind":
        # only the window between two marker calls (_run_case): MPI's collectives outside it poll,
        # for as long as valgrind makes a rank wait, and their instructions differed by millions
        return [*common, "--tool=callgrind", f"--zero-before={ZERO_MARK}", f"--dump-before={DUMP_MARK}",
                f"--callgrind-out-file={out_dir}/callgrind.%p"]
    raise UsageError(f"unknown deep tool {tool!r}; choose from {', '.join(TOOLS)}")


def _command(case: DeepCase, tool: str, out_dir: str, messages: int, waits: int) -> list[str]:
    worker = ["--backend", case.backend, "--mode", case.mode, "--kind", case.kind, "--size", str(case.size),
              "--scenario", case.scenario, "--messages", str(messages), "--waits", str(waits),
              "--ranks", str(case.ranks)]
    vg = _valgrind_args(tool, out_dir)
    if get_backend(case.backend).process_model() == "mpi":
        cmd = mpi_command(case.ranks, "pytest_ipcbench.harness.deep", worker)
        # mpiexec -n R valgrind ... python -m ...: the launcher is not traced, every rank is
        return [*cmd[:3], *vg, *cmd[3:]]
    return [*vg, "--trace-children=yes", sys.executable, "-m", "pytest_ipcbench.harness.deep", *worker]


def _window_part(out_dir: str, pid: int, label: str) -> str:
    """The callgrind part file that --dump-before=getpgrp wrote (the counted window)."""
    parts = []
    for name in os.listdir(out_dir):
        if name.startswith(f"callgrind.{pid}."):
            path = os.path.join(out_dir, name)
            with open(path) as f:
                head = f.read(4096)
            if f"--dump-before={DUMP_MARK}" in head:
                parts.append(path)
    if len(parts) != 1:
        raise RuntimeError(f"deep callgrind run of {label}: {len(parts)} dumps at {DUMP_MARK}() in process {pid}, "
                           f"expected 1 (something else called it: the window is not known)")
    return parts[0]


def _one_run(case: DeepCase, tool: str, messages: int, waits: int,
             timeout: float) -> dict[int, tuple[int, str, int, dict[str, int]]]:
    """One valgrind run: rank -> (pid, role, messages per iteration, counts)."""
    with tempfile.TemporaryDirectory(prefix="ipcbench-deep-") as out_dir:
        cmd = _command(case, tool, out_dir, messages, waits)
        quiet = os.path.join(out_dir, "cwd")
        os.mkdir(quiet)
        # a backend's reader polls while it waits; under backoff its sleeps grow, so a wait that
        # valgrind stretches adds few polls (under block it polls every 20 us: instructions by time)
        env = {**os.environ, "PYTHONHASHSEED": "0", "PYTHONUNBUFFERED": "1", WAIT_ENV: "backoff"}
        # in a folder of its own: imports list the directories on sys.path (the current one too),
        # and a busy /tmp or checkout would change what a run copies between runs
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                start_new_session=True, env=env, cwd=quiet)
        try:
            out, err = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            kill_group(proc)
            proc.communicate()
            raise RuntimeError(f"deep {tool} run of {case.label} did not end within {timeout:g} s") from None
        except BaseException:
            kill_group(proc)
            proc.wait()
            raise
        recs = [r for ln in out.splitlines() if ln.startswith(MARK) and (r := record(ln, MARK)) is not None]
        if proc.returncode != 0 or not recs:
            tail = "\n".join(err.strip().splitlines()[-15:])
            raise RuntimeError(f"deep {tool} run of {case.label} failed (exit {proc.returncode}): {tail}")
        found: dict[int, tuple[int, str, int, dict[str, int]]] = {}
        for pid, rank, role_, per in recs[-1]:
            path = os.path.join(out_dir, f"{tool}.{pid}")
            if tool == "callgrind":
                path = _window_part(out_dir, pid, case.label)
            try:
                with open(path) as f:
                    text = f.read()
            except OSError as exc:
                raise RuntimeError(f"deep {tool} run of {case.label}: no output of rank {rank} ({exc})") from exc
            if tool == "dhat":
                nbytes, calls = parse_dhat(text)
                counts = {"copied.bytes": nbytes, "copied.calls": calls}
            else:
                counts = {"instructions": parse_callgrind(text)}
            found[int(rank)] = (int(pid), str(role_), int(per), counts)
        return found


def deep_counters(case: DeepCase, iterations: int = ITERATIONS, repeats: int = REPEATS,
                  tools: Sequence[str] = TOOLS, timeout: float = TIMEOUT) -> Counters:
    """Deep mode's counters of one case (every rank); absent with the reason without valgrind.

    ``iterations`` message iterations per repeat; ``repeats`` + 1 runs per tool."""
    if iterations < 1 or repeats < 1:
        raise UsageError(f"deep mode needs iterations >= 1 and repeats >= 1 (got {iterations}, {repeats})")
    if case.scenario not in _SCENARIO_CLASSES or case.scenario in ("granularity", "idle"):
        raise UsageError(f"deep mode runs broadcast, pingpong or stream, not {case.scenario!r}")
    for tool in tools:
        _valgrind_args(tool, "")  # unknown tool: a usage error before anything runs
    missing = valgrind_unavailable()
    wanted = [n for t in tools for n in (("copied.bytes", "copied.calls") if t == "dhat" else ("instructions",))]
    if missing is not None:
        ranks = [RankCounters(r, "writer" if r == 0 else "reader", {}, 0, {n: missing for n in wanted})
                 for r in range(case.ranks)]
        return Counters(ranks, iterations, 1, repeats)
    totals: dict[int, dict[str, list[int]]] = {}
    roles: dict[int, str] = {}
    per = 1
    for tool in tools:
        runs = [_one_run(case, tool, k * iterations, (repeats + 1 - k) * iterations, timeout)
                for k in range(1, repeats + 2)]
        for rank, (_, role_, per_rank, _) in runs[0].items():
            roles[rank], per = role_, per_rank
            for name in runs[0][rank][3]:
                totals.setdefault(rank, {})[name] = [b[rank][3][name] - a[rank][3][name]
                                                     for a, b in zip(runs, runs[1:])]
    ranks = [RankCounters(r, roles[r], totals[r], iterations * per, {}, iterations * per) for r in sorted(totals)]
    return Counters(ranks, iterations, per, repeats)


def merge(counters: Counters | None, deep: Counters) -> Counters:
    """The counting pass's counters with deep mode's added (rank by rank); deep's alone if none."""
    if counters is None:
        return deep
    by_rank = {r.rank: r for r in deep.ranks}
    for r in counters.ranks:
        d = by_rank.get(r.rank)
        if d is None:
            continue
        for name in DEEP_COUNTERS:
            r.totals.pop(name, None)
            r.absent.pop(name, None)
            if name in d.totals:
                r.totals[name] = list(d.totals[name])
            elif name in d.absent:
                r.absent[name] = d.absent[name]
        r.deep_messages = d.deep_messages or d.messages
    return counters


if __name__ == "__main__":
    sys.exit(main())
