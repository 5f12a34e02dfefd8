"""``ipcbench run``: the standard matrix, into one folder of results, CSV, plots and tables.

Phases (one results folder, one JSON file):

1. **copy**: this machine's numpy copy bandwidth at every payload size of the matrix (the
   reference for efficiency), in this process;
2. **mpi**: every case of a backend that can run over MPI ranks (lmdb, shm, zmq, mpi-*), in one
   ``mpiexec -n RANKS python -m pytest_ipcbench.runner.job --worker`` job (launched here when
   ``ipcbench run`` is not itself under MPI; mpiexec is looked for next to ``sys.executable``
   first, then on PATH); then seed 004's MPI method matrix (:mod:`.mpi_methods`) in the same job;
3. **local**: mp-queue (it cannot cross mpiexec ranks) over a :class:`~.group.LocalWorld` of
   RANKS processes, in this process; also every other non-MPI backend when MPI is missing;
4. **seed 002**: the shared-array experiment, if ``pytest_ipcbench.shared.experiment`` has
   ``run_seed002``.

The worker reports each case as it ends (a line on stdout), so a case that hangs costs only its
timeout: the job is killed (its whole process group, which this process started), the case is
recorded as failed and a new job resumes after it. Rank 0 alone reports; the progress (case, how
many are left, elapsed) is shown here.

Folder (default ``ipcbench-results/<YYYYmmdd-HHMMSS>/``, or ``--out``): ``results.json``,
``summary.md``, the CSVs and PNGs of :mod:`.report`, ``run.log`` (what the jobs wrote on stderr
and every failure).
"""

from __future__ import annotations

import argparse
import fnmatch
import inspect
import json
import os
import queue
import shutil
import signal
import subprocess
import sys
import threading
import time
from dataclasses import asdict, dataclass, replace
from datetime import datetime
from pathlib import Path
from typing import Any, Callable, Sequence

from ..backends.base import BACKEND_NAMES, MODES, BackendSpec, get_backend, unavailable_reason
from ..core.envinfo import collect as collect_env, describe as describe_env, mpi_info
from ..core.group import Group, LocalWorld, in_mpi_job
from ..harness.measure import (PAIR_SCENARIOS, SCENARIOS, BenchSettings, BufferPayload, annotate_efficiency, copy_result,
                      payload_bytes, quiet_barrier)
from ..seed004.methods import CONFIG_NAMES, config_nbytes
from ..core.payloads import PayloadSpec, format_size, parse_size
from ..history.results import Result, ResultSet

MARK = "@@ipcbench "
LEVELS = ("quick", "default", "full")
LOCAL_ONLY = ("mp-queue",)
CHANNEL_BACKENDS = ("zmq", "mpi-bcast", "mpi-pkl5", "mpi-buffer", "mpi-p2p", "mp-queue")
MB = 10**6
KB = 10**3
MEMORY_COPY_BYTES = 64 * MB  # the copy bandwidth shown in the environment: twice the L3 of our machines


# ---------------------------------------------------------------------------------- the matrix


@dataclass(frozen=True)
class Case:
    scenario: str
    backend: str
    mode: str
    kind: str  # a payloads kind, or "buffer" (exactly ``size`` bytes)
    size: int
    ranks: int
    work: float = 0.0

    @property
    def label(self) -> str:
        size = format_size(self.size)
        work = f" work={_fmt_work(self.work)}" if self.scenario == "granularity" else ""
        ranks = 2 if self.scenario in PAIR_SCENARIOS else self.ranks
        return f"{self.scenario} {self.backend}/{self.mode} {self.kind}-{size} r{ranks}{work}"

    def payload(self) -> Any:
        return BufferPayload(self.size) if self.kind == "buffer" else PayloadSpec(self.kind, self.size)

    @property
    def phase(self) -> str:
        return "local" if self.backend in LOCAL_ONLY else "mpi"


def _fmt_work(s: float) -> str:
    if s == 0:
        return "0"
    return f"{s * 1e3:g}ms" if s >= 1e-3 else f"{s * 1e6:g}us"


@dataclass(frozen=True)
class Level:
    """What one level runs: payload sizes by kind per scenario, settings, extras."""

    broadcast: dict[str, tuple[int, ...]]
    pingpong: tuple[int, ...]
    stream: tuple[int, ...]
    granularity: tuple[float, ...]
    granularity_modes: tuple[str, ...]
    stream_modes: tuple[str, ...]
    settings: BenchSettings
    mpi_method_configs: tuple[str, ...]
    mpi_method_case_time: float
    case_timeout: float


SEED004 = {name: config_nbytes(name) for name in CONFIG_NAMES}  # seed 004's sizes, 11 KB .. 440 MB

LEVEL_SPECS: dict[str, Level] = {
    "quick": Level(
        broadcast={"dict": (10 * KB, 1 * MB), "ndarray": (10 * KB, 1 * MB)},
        pingpong=(1, 1 * MB),
        stream=(1 * KB,),
        granularity=(0.0, 1e-3),
        granularity_modes=("bytes",),
        stream_modes=("native",),
        settings=BenchSettings(time_budget=0.12, min_iterations=5, max_iterations=2000),
        mpi_method_configs=("Small", "Medium"),
        mpi_method_case_time=0.05,
        case_timeout=90.0,
    ),
    "default": Level(
        broadcast={
            "dict": (1 * KB, 10 * KB, 100 * KB, 1 * MB),  # seed 001: 10 .. 10000 entries
            "ndarray": (10 * KB, 1 * MB, 10 * MB, 100 * MB),
            "array1d": (SEED004["Small"], SEED004["Large"], SEED004["XLarge"]),
            "ragged2d": (SEED004["Small"], SEED004["Large"], SEED004["XLarge"]),
        },
        pingpong=(1, 1 * KB, 64 * 1024, 1 * MB, 16 * 1024 * 1024),
        stream=(1 * KB, 64 * 1024, 1 * MB),
        granularity=(0.0, 1e-4, 1e-3, 1e-2),
        granularity_modes=("bytes",),
        stream_modes=MODES,
        settings=BenchSettings(time_budget=0.4, min_iterations=5),
        mpi_method_configs=("Small", "Medium", "Large", "XLarge"),
        mpi_method_case_time=0.6,
        case_timeout=240.0,
    ),
    "full": Level(
        broadcast={
            "dict": (1 * KB, 10 * KB, 100 * KB, 1 * MB, 10 * MB),  # up to 100000 entries
            "ndarray": (10 * KB, 1 * MB, 10 * MB, 100 * MB, 602 * MB),  # seed 002's 250000 x 602 float32
            "array1d": tuple(SEED004.values()),  # 11 KB .. 440 MB (seed 004)
            "ragged2d": tuple(SEED004.values()),
        },
        pingpong=(1, 64, 1 * KB, 16 * 1024, 64 * 1024, 1 * MB, 16 * 1024 * 1024, 256 * 1024 * 1024),
        stream=(64, 1 * KB, 64 * 1024, 1 * MB, 16 * MB),
        granularity=(0.0, 1e-5, 1e-4, 1e-3, 1e-2, 1e-1),
        granularity_modes=MODES,
        stream_modes=MODES,
        settings=BenchSettings(time_budget=1.0, min_iterations=3),
        mpi_method_configs=tuple(SEED004),
        mpi_method_case_time=1.5,
        case_timeout=1200.0,
    ),
}


def build_matrix(
    level: str = "default",
    ranks: int = 4,
    backends: Sequence[str] = BACKEND_NAMES,
    modes: Sequence[str] = MODES,
    kinds: Sequence[str] | None = None,
    scenarios: Sequence[str] = SCENARIOS,
    sizes: Sequence[int] | None = None,
    only: Sequence[str] = (),
) -> list[Case]:
    """Every case of a level, filtered; MPI-phase cases first, in a stable order."""
    spec = LEVEL_SPECS[level]
    cases: list[Case] = []
    for backend in backends:
        for mode in modes:
            if "broadcast" in scenarios:
                for kind, kind_sizes in spec.broadcast.items():
                    if kinds is not None and kind not in kinds:
                        continue
                    for size in sizes or kind_sizes:
                        cases.append(Case("broadcast", backend, mode, kind, size, ranks))
            if "pingpong" in scenarios and (kinds is None or "buffer" in kinds):
                for size in sizes or spec.pingpong:
                    cases.append(Case("pingpong", backend, mode, "buffer", size, ranks))
            if "stream" in scenarios and backend in CHANNEL_BACKENDS and mode in spec.stream_modes \
                    and (kinds is None or "buffer" in kinds):
                for size in sizes or spec.stream:
                    cases.append(Case("stream", backend, mode, "buffer", size, ranks))
            if "granularity" in scenarios and mode in spec.granularity_modes and (kinds is None or "tiny" in kinds):
                for work in spec.granularity:
                    cases.append(Case("granularity", backend, mode, "tiny", 64, ranks, work))
    if only:
        cases = [c for c in cases if any(fnmatch.fnmatchcase(c.label, pat) or pat in c.label for pat in only)]
    order = {s: i for i, s in enumerate(SCENARIOS)}
    return sorted(cases, key=lambda c: (c.phase != "mpi", order[c.scenario], c.kind, c.size, c.work,
                                        BACKEND_NAMES.index(c.backend) if c.backend in BACKEND_NAMES else 99, c.mode))


# ------------------------------------------------------------------------------- running a case


def _bench_case(group: Group, case: Case, settings: BenchSettings) -> Result | None:
    from ..harness.measure import bench

    s = replace(settings, work=case.work) if case.scenario == "granularity" else settings
    return bench(group, BackendSpec(case.backend, case.mode), case.payload(), case.scenario, s)


def _noop(group: Group) -> None:
    return None


def run_case_local(world: LocalWorld, case: Case, settings: BenchSettings) -> Result:
    ranks = 2 if case.scenario in PAIR_SCENARIOS else case.ranks
    return world.run(_bench_case, case, settings, ranks=ranks)[0]


def _case_unavailable(case: Case, group: Any) -> str | None:
    try:
        get_backend(case.backend)
    except Exception as exc:  # BackendUnavailable or unknown
        return str(exc)
    return unavailable_reason(case.backend, group)


# ------------------------------------------------------------------------------ the MPI worker


def _emit(event: str, **fields: Any) -> None:
    sys.stdout.write(MARK + json.dumps({"event": event, **fields}, default=str) + "\n")
    sys.stdout.flush()


def worker_main(args: argparse.Namespace) -> int:
    """Under mpiexec (launched by ``ipcbench run``): run the cases of a file on every rank; rank 0
    reports each event as a line on stdout."""
    from ..core.group import MPIGroup

    world = MPIGroup.world()
    spec = json.loads(Path(args.cases).read_text()) if world.rank == 0 else None
    spec = world.bcast(spec)
    run_mpi_cases(world, spec, _emit if world.rank == 0 else None)
    return 0


def run_mpi_cases(world: Any, spec: dict[str, Any], emit: Callable[..., None] | None,
                  watchdog: Any = None, case_timeout: float = 0.0) -> None:
    """Collective over ``world``: the cases of ``spec`` from ``spec["start"]``, then seed 004's
    methods if asked; ``emit(event, **fields)`` on rank 0 reports (None elsewhere)."""
    settings = BenchSettings(**spec["settings"])
    cases = [Case(**c) for c in spec["cases"]]
    say = emit or (lambda *a, **k: None)
    say("env", mpi=mpi_info(), ranks=world.size)
    for index, case in enumerate(cases):
        if index < spec.get("start", 0):
            continue
        reason = _case_unavailable(case, world)
        if reason:
            say("skip", index=index, label=case.label, reason=reason)
            continue
        say("start", index=index, label=case.label)
        if watchdog is not None:
            watchdog.arm(case.label, case_timeout, "case")
        t0 = time.perf_counter()
        try:
            group = world if case.ranks >= world.size else world.split(case.ranks)
            result = None
            if group is not None:
                result = group.run(_bench_case, case, settings)[0]
            quiet_barrier(world)
        except Exception as exc:
            quiet_barrier(world)
            say("error", index=index, label=case.label, message=_short(exc))
            continue
        finally:
            if watchdog is not None:
                watchdog.disarm()
        if result is not None:
            result.extra["wall_s"] = round(time.perf_counter() - t0, 3)
            say("result", index=index, label=case.label, result=result.to_dict())
    if spec.get("mpi_methods"):
        if watchdog is not None:
            watchdog.arm("seed 004: MPI methods", case_timeout * 10, "case")
        _run_mpi_methods(world, spec["mpi_methods"], say)
        if watchdog is not None:
            watchdog.disarm()
    say("done")


def _run_mpi_methods(world: Any, opts: dict[str, Any], say: Callable[..., None]) -> None:
    """The hook for seed 004's MPI method matrix: ``pytest_ipcbench.seed004.methods.run_matrix``
    (collective; Result records on rank 0), if that module is there."""
    try:
        from ..seed004 import methods
    except ImportError:
        return
    say("start", index=-1, label="seed 004: MPI methods")
    try:
        plan = mpi_methods.Plan(case_time=float(opts.get("case_time", 1.5)))
        configs = [c for c in opts.get("configs", ()) if c in mpi_methods.CONFIGS]

        def progress(line: str) -> None:
            say("note", label="seed 004", message=line.strip())

        results = mpi_methods.run_matrix(world, configs=configs, plan=plan,
                                         progress=progress if world.rank == 0 else None)
        quiet_barrier(world)
    except Exception as exc:
        say("error", index=-1, label="seed 004: MPI methods", message=_short(exc))
        return
    for r in results:
        say("extra", label="seed 004", result=r.to_dict())
    say("end", index=-1, label="seed 004: MPI methods")


def _short(exc: BaseException) -> str:
    text = f"{type(exc).__name__}: {exc}"
    return text if len(text) < 2000 else text[:2000] + " ..."


# ----------------------------------------------------------------------------- the orchestrator


def find_mpiexec() -> str | None:
    """mpiexec next to this Python (the mpich wheel puts it there), else on PATH."""
    here = Path(sys.executable).parent / "mpiexec"
    if here.exists() and os.access(here, os.X_OK):
        return str(here)
    return shutil.which("mpiexec")


class Progress:
    """Progress on the terminal: rich when it is one, plain lines otherwise, or nothing."""

    def __init__(self, total: int, mode: str = "auto") -> None:
        self.total = max(total, 1)
        self.done = 0
        self.t0 = time.monotonic()
        self.mode = mode
        self._rich: Any = None
        if mode in ("auto", "rich"):
            try:
                from rich.console import Console
                from rich.progress import BarColumn, MofNCompleteColumn, Progress as RichProgress, \
                    TextColumn, TimeElapsedColumn, TimeRemainingColumn

                console = Console(stderr=False)
                if mode == "rich" or console.is_terminal:
                    self._rich = RichProgress(
                        TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
                        TextColumn("elapsed"), TimeElapsedColumn(), TextColumn("left ~"), TimeRemainingColumn(),
                        console=console, transient=False,
                    )
                    self._task = self._rich.add_task("starting", total=self.total)
                    self._rich.start()
            except ImportError:
                self._rich = None
        if self._rich is None and mode == "auto":
            self.mode = "plain"

    def _elapsed(self) -> str:
        s = int(time.monotonic() - self.t0)
        return f"{s // 60:02d}:{s % 60:02d}"

    def start(self, label: str) -> None:
        if self._rich is not None:
            self._rich.update(self._task, description=label[:70])

    def finish(self, label: str, note: str = "", ok: bool = True) -> None:
        self.done += 1
        mark = "ok  " if ok else "FAIL"
        line = f"[{self.done}/{self.total} {self._elapsed()}] {mark} {label}" + (f"  {note}" if note else "")
        if self._rich is not None:
            self._rich.update(self._task, completed=self.done)
            self._rich.console.print(line, markup=False, highlight=False)
        elif self.mode != "none":
            print(line, flush=True)

    def note(self, text: str) -> None:
        if self._rich is not None:
            self._rich.console.print(text, markup=False, highlight=False)
        elif self.mode != "none":
            print(text, flush=True)

    def close(self) -> None:
        if self._rich is not None:
            self._rich.stop()


def _summary_note(r: Result) -> str:
    from ..report.tables import fmt_time

    med = r.summary().median
    n = r.summary().n
    extra = ""
    if r.extra.get("efficiency") is not None and r.scenario == "broadcast":
        extra = f", {r.extra['efficiency']:.0%} of copy bw"
    return f"{r.primary} {fmt_time(med)} (n={n}{extra})"


class Runner:
    """Runs the phases, collects results and failures, writes the folder."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.level = LEVEL_SPECS[args.level]
        settings = self.level.settings
        if args.time_budget is not None:
            settings = replace(settings, time_budget=args.time_budget)
        self.settings = settings
        self.case_timeout = args.case_timeout or self.level.case_timeout
        self.out = Path(args.out) if args.out else Path("ipcbench-results") / datetime.now().strftime("%Y%m%d-%H%M%S")
        self.results = ResultSet()
        self.copies: dict[int, Result] = {}
        self.failures: list[str] = []
        self.log_lines: list[str] = []
        self.mpi_env: dict[str, Any] = {}

    # ------------------------------------------------------------------ helpers
    def log(self, text: str) -> None:
        self.log_lines.append(text)

    def fail(self, label: str, message: str) -> None:
        self.failures.append(f"{label}: {message}")
        self.log(f"FAILED {label}: {message}")

    # ------------------------------------------------------------------ phases
    def copy_phase(self, cases: Sequence[Case], progress: Progress | None) -> dict[int, float]:
        """numpy copy bandwidth at every payload size (and 64 MB). Called before and after the
        other phases: per size the faster measurement is kept (a copy is never faster than the
        machine allows, only slowed down by what else runs), so one busy moment does not skew
        every efficiency."""
        sizes = sorted({payload_bytes(c.payload()) for c in cases if c.scenario != "granularity"} | {MEMORY_COPY_BYTES})
        if progress is not None:
            progress.start("copy bandwidth (numpy)")
        for n in sizes:
            r = copy_result(n, time_budget=0.05 if self.args.level == "quick" else 0.2)
            old = self.copies.get(n)
            r.extra["passes"] = 1 if old is None else old.extra.get("passes", 1) + 1
            if old is None or r.throughput() > old.throughput():
                self.copies[n] = r
            else:
                old.extra["passes"] = r.extra["passes"]
        if progress is not None:
            progress.finish("copy bandwidth (numpy)", f"{len(sizes)} sizes")
        return {n: r.throughput() for n, r in self.copies.items()}

    def mpi_phase(self, cases: list[Case], progress: Progress, methods: dict[str, Any] | None) -> None:
        if not cases and not methods:
            return
        exe = self.args.mpiexec or find_mpiexec()
        if exe is None:
            for c in cases:
                self.fail(c.label, "no mpiexec found (install the mpi extra: pip install 'pytest-ipcbench[mpi]')")
                progress.finish(c.label, "no mpiexec", ok=False)
            return
        start = 0
        stalls = 0
        while start < len(cases) or methods:
            spec = {"cases": [asdict(c) for c in cases], "start": start, "settings": asdict(self.settings),
                    "mpi_methods": methods}
            path = self.out / ".cases.json"
            path.write_text(json.dumps(spec))
            cmd = [exe, "-n", str(self.args.ranks), sys.executable, "-m", "pytest_ipcbench.runner.job",
                   "--worker", "--cases", str(path)]
            progress.start(f"starting mpiexec -n {self.args.ranks}")
            next_start, finished, methods_done = self._run_job(cmd, cases, start, progress)
            if methods_done:
                methods = None
            if finished:
                break
            stalls = stalls + 1 if next_start <= start else 0
            if stalls >= 2:  # the job dies before its first case: give up on the rest
                for c in cases[start:]:
                    self.fail(c.label, "not run: the MPI job failed twice before reaching it (see run.log)")
                    progress.finish(c.label, "not run", ok=False)
                break
            start = next_start
        try:
            (self.out / ".cases.json").unlink()
        except FileNotFoundError:
            pass

    def on_event(self, ev: dict[str, Any], progress: Progress) -> None:
        """One event of the MPI phase (from the job's stdout, or in-process under MPI)."""
        kind = ev["event"]
        st = self._job
        if kind == "env":
            self.mpi_env = ev
        elif kind == "start":
            st["current"], st["label"] = ev["index"], ev["label"]
            progress.start(ev["label"])
        elif kind == "result":
            r = Result.from_dict(ev["result"])
            self.results.add(r)
            progress.finish(ev["label"], _summary_note(r))
            st["resume"], st["current"], st["label"] = ev["index"] + 1, None, ""
        elif kind == "skip":
            self.log(f"skipped {ev['label']}: {ev['reason']}")
            progress.finish(ev["label"], f"skipped: {ev['reason']}", ok=True)
            st["resume"] = ev["index"] + 1
        elif kind == "error":
            self.fail(ev["label"], ev["message"])
            progress.finish(ev["label"], ev["message"][:160], ok=False)
            if ev["index"] >= 0:
                st["resume"] = ev["index"] + 1
            else:
                st["methods_done"] = True
            st["current"], st["label"] = None, ""
        elif kind == "extra":
            self.results.add(Result.from_dict(ev["result"]))
        elif kind == "note":
            self.log(f"[{ev['label']}] {ev['message']}")
        elif kind == "end":
            st["methods_done"] = True
            progress.finish(ev["label"], "done")
            st["current"], st["label"] = None, ""
        elif kind == "done":
            st["done"] = True

    def _run_job(self, cmd: list[str], cases: list[Case], start: int, progress: Progress) -> tuple[int, bool, bool]:
        """One mpiexec job from case ``start``; (where to resume, finished, methods done)."""
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                start_new_session=True, env=env)
        lines: queue.Queue[tuple[str, str | None]] = queue.Queue()

        def pump(stream: Any, name: str) -> None:
            for line in stream:
                lines.put((name, line.rstrip("\n")))
            lines.put((name, None))

        for stream, name in ((proc.stdout, "out"), (proc.stderr, "err")):
            threading.Thread(target=pump, args=(stream, name), daemon=True).start()
        st = self._job = {"current": None, "label": "", "resume": start, "methods_done": False, "done": False}
        open_streams = 2
        deadline = time.monotonic() + self.case_timeout + 60  # start-up included
        while open_streams:
            try:
                name, line = lines.get(timeout=max(0.1, deadline - time.monotonic()))
            except KeyboardInterrupt:
                _kill_group(proc)  # it runs in a session of its own: Ctrl-C does not reach it
                self._clean_after(proc)
                raise
            except queue.Empty:
                what = st["label"] or "start-up of the MPI job"
                self.fail(what, f"no progress for {self.case_timeout:g} s: the MPI job was killed")
                progress.finish(what, "timed out", ok=False)
                _kill_group(proc)
                self._clean_after(proc)
                cur = st["current"]
                if cur is None:
                    return st["resume"], False, st["methods_done"]
                return (cur + 1, False, False) if cur >= 0 else (st["resume"], False, True)
            if line is None:
                open_streams -= 1
                continue
            if name == "err":
                self.log(f"[mpi stderr] {line}")
                continue
            if not line.startswith(MARK):
                self.log(f"[mpi stdout] {line}")
                continue
            deadline = time.monotonic() + self.case_timeout
            self.on_event(json.loads(line[len(MARK):]), progress)
        proc.wait()
        if st["done"]:
            return st["resume"], True, True
        what = st["label"] or "the MPI job"
        self.fail(what, f"the MPI job ended with exit code {proc.returncode} before finishing")
        progress.finish(what, f"exit {proc.returncode}", ok=False)
        self._clean_after(proc)
        cur = st["current"]
        if cur is not None and cur >= 0:
            return cur + 1, False, st["methods_done"]
        if cur == -1:
            return st["resume"], False, True
        return st["resume"], st["resume"] >= len(cases), st["methods_done"]

    def _clean_after(self, proc: subprocess.Popen[str]) -> None:
        """Remove what the killed job's ranks left (only resources of processes that are gone)."""
        from ..core import names

        for item in names.find_ours():
            if not item.alive and item.pid in self._job_pids:
                names.remove(item.path)

    _job_pids: set[int] = set()
    _job: dict[str, Any] = {}

    def local_phase(self, cases: list[Case], progress: Progress) -> None:
        if not cases:
            return
        with LocalWorld(self.args.ranks, timeout=self.case_timeout) as world:
            world.run(_noop)  # start the workers: their mailboxes exist from now on
            for case in cases:
                group = world.group(2 if case.scenario in PAIR_SCENARIOS else case.ranks)
                reason = _case_unavailable(case, group)
                if reason:
                    self.log(f"skipped {case.label}: {reason}")
                    progress.finish(case.label, f"skipped: {reason}")
                    continue
                progress.start(case.label)
                t0 = time.perf_counter()
                try:
                    r = run_case_local(world, case, self.settings)
                except Exception as exc:
                    self.fail(case.label, _short(exc))
                    progress.finish(case.label, _short(exc)[:160], ok=False)
                    continue
                r.extra["wall_s"] = round(time.perf_counter() - t0, 3)
                self.results.add(r)
                progress.finish(case.label, _summary_note(r))

    def seed002_phase(self, progress: Progress) -> None:
        """The hook for seed 002's shared-array experiment (``shared.experiment.run_seed002``)."""
        try:
            from ..shared.experiment import run_seed002  # type: ignore[import-not-found]
        except ImportError:
            return
        rows = {"quick": 25_000, "default": 250_000, "full": 250_000}[self.args.level]
        label = f"seed 002: {rows * 602 * 4 / 1e6:.0f} MB array between two processes"
        repeats = {"quick": 3, "default": 3, "full": 7}[self.args.level]
        params = inspect.signature(run_seed002).parameters
        kwargs = {k: v for k, v in (("nbytes_rows", rows), ("repeats", repeats)) if k in params}
        progress.start(label)
        try:
            got = run_seed002(**kwargs)
        except Exception as exc:
            self.fail(label, _short(exc))
            progress.finish(label, _short(exc)[:160], ok=False)
            return
        results = seed002_results(got)
        self.results.extend(results)
        (self.out / "seed002.json").write_text(json.dumps(got, indent=1, default=str) + "\n")
        med = got.get("median", {}) if isinstance(got, dict) else {}
        progress.finish(label, ", ".join(f"{k} {v:.3g} s" for k, v in med.items()))

    # ------------------------------------------------------------------ all
    def mpi_inprocess(self, world: Any, cases: list[Case], progress: Progress, methods: dict[str, Any] | None) -> None:
        """The MPI phase when ``ipcbench run`` itself runs under mpiexec: every rank runs the
        cases here; a watchdog aborts the job if a case hangs (no resume in this mode)."""
        from mpi4py import MPI

        from ..plugin.watchdog import Watchdog

        spec = {"cases": [asdict(c) for c in cases], "start": 0, "settings": asdict(self.settings),
                "mpi_methods": methods}
        self._job = {"current": None, "label": "", "resume": 0, "methods_done": False, "done": False}
        rank0 = world.rank == 0
        emit = (lambda event, **f: self.on_event({"event": event, **f}, progress)) if rank0 else None
        dog = Watchdog(world.rank, MPI.COMM_WORLD.Abort) if self.case_timeout > 0 else None
        try:
            run_mpi_cases(world, spec, emit, dog, self.case_timeout)
        finally:
            if dog is not None:
                dog.close()

    def run(self) -> int:
        args = self.args
        world = None
        if in_mpi_job():
            from ..core.group import MPIGroup

            world = MPIGroup.world()
            self.out = Path(world.bcast(str(self.out)))
        rank0 = world is None or world.rank == 0
        cases = build_matrix(args.level, args.ranks if world is None else world.size, args.backends, args.modes,
                             args.kinds, args.scenarios, args.sizes, args.only)
        have_mpi = _mpi_available()
        mpi_cases = [c for c in cases if c.phase == "mpi" and have_mpi and not args.no_mpi]
        local_cases = [c for c in cases if c not in mpi_cases and (c.phase == "local" or not _needs_mpi(c.backend))]
        dropped = [c for c in cases if c not in mpi_cases and c not in local_cases]
        methods = None
        if not args.no_extras and have_mpi and not args.no_mpi and not args.only and _has_module("pytest_ipcbench.seed004.methods"):
            methods = {"configs": list(self.level.mpi_method_configs), "case_time": self.level.mpi_method_case_time}
        seed002 = not args.no_extras and not args.only and _has_module("pytest_ipcbench.shared.experiment")
        if args.list:
            if rank0:
                for c in mpi_cases + local_cases:
                    print(f"{c.phase:5} {c.label}")
                for c in dropped:
                    print(f"skip  {c.label} (needs MPI)")
                print(f"{len(mpi_cases) + len(local_cases)} cases"
                      + (" + seed 004 MPI methods" if methods else "") + (" + seed 002" if seed002 else ""))
            return 0
        ranks = args.ranks if world is None else world.size
        env: dict[str, Any] = {}
        if rank0:
            self.out.mkdir(parents=True, exist_ok=True)
            env = collect_env(ranks, group_kind="mpi+local", extra={"level": args.level})
            print(f"ipcbench run ({args.level}): {len(mpi_cases)} MPI cases on {ranks} ranks, "
                  f"{len(local_cases)} local cases" + (", seed 004's MPI methods" if methods else "")
                  + (", seed 002" if seed002 else "") + f" -> {self.out}")
            for line in describe_env(env):
                print(f"  {line}")
        for c in dropped:
            self.fail(c.label, "needs MPI (mpi4py is not installed, or --no-mpi)")
        total = 1 + len(mpi_cases) + len(local_cases) + (1 if methods else 0) + (1 if seed002 else 0)
        progress = Progress(total, args.progress if rank0 else "none")
        t0 = time.monotonic()
        copies: dict[int, float] = {}
        try:
            if rank0:
                copies = self.copy_phase(mpi_cases + local_cases, progress)
            if world is not None:
                quiet_barrier(world)  # the others wait asleep while rank 0 copies
                self.mpi_inprocess(world, mpi_cases, progress, methods)
            else:
                self.mpi_phase(mpi_cases, progress, methods)
            if rank0:
                self.local_phase(local_cases, progress)
                if seed002:
                    self.seed002_phase(progress)
            if rank0:
                copies = self.copy_phase(mpi_cases + local_cases, None)  # again: the faster one counts
            if world is not None:
                quiet_barrier(world)
        except KeyboardInterrupt:
            self.fail("run", "interrupted")
        finally:
            progress.close()
        if not rank0:
            return 0
        return self.finish(env, copies, time.monotonic() - t0, len(mpi_cases) + len(local_cases))

    def finish(self, env: dict[str, Any], copies: dict[int, float], wall: float, n_cases: int) -> int:
        """Efficiency, environment, results.json, the report, the summary on the terminal."""
        self.results.extend(self.copies[n] for n in sorted(self.copies))
        for r in self.results.results:
            if r.scenario in ("broadcast", "pingpong", "stream") and r.nbytes in copies:
                annotate_efficiency(r, copies[r.nbytes])
        if self.mpi_env.get("mpi"):
            env["mpi"] = self.mpi_env["mpi"]
        if MEMORY_COPY_BYTES in copies:  # beyond the caches: the machine's memory copy bandwidth
            env["copy_bandwidth_MBps"] = copies[MEMORY_COPY_BYTES] / 1e6
            env["copy_bandwidth_size"] = MEMORY_COPY_BYTES
        env.update(wall_s=round(wall, 1), cases=n_cases, failures=self.failures,
                   settings=asdict(self.settings), case_timeout_s=self.case_timeout)
        self.results.env = env
        path = self.results.save(self.out / "results.json")
        from ..report.tables import headline, write_report

        summary = write_report(self.results, self.out)
        (self.out / "run.log").write_text("\n".join(self.log_lines) + "\n")
        print()
        print(headline(self.results.results) or "(no results)")
        print()
        print(f"{len(self.results.results)} results in {wall:.0f} s; {len(self.failures)} failed")
        for f in self.failures[:20]:
            print(f"  failed: {f}")
        if len(self.failures) > 20:
            print(f"  ... and {len(self.failures) - 20} more (run.log)")
        print(f"results: {path}\nreport:  {summary}")
        return 1 if self.failures else 0


def seed002_results(got: Any) -> list[Result]:
    """Result records (scenario ``seed002``, one per path) of run_seed002's dictionary."""
    if isinstance(got, ResultSet):
        return list(got.results)
    if isinstance(got, (list, tuple)):
        return [r for r in got if isinstance(r, Result)]
    if not isinstance(got, dict) or "samples" not in got:
        return []
    nbytes = int(got.get("nbytes", 0))
    return [
        Result(scenario="seed002", backend=path, mode="native", payload="ndarray", size=nbytes, ranks=2,
               samples={"completion": [float(x) for x in samples]}, nbytes=nbytes,
               extra={"shape": list(got.get("shape", ())), "ratios": got.get("ratios", {}),
                      "what": "put until the consumer holds the array (seed 002)"})
        for path, samples in got["samples"].items() if samples
    ]


def _kill_group(proc: subprocess.Popen[str]) -> None:
    """End the job we started: its process group (mpiexec and the ranks), TERM then KILL."""
    Runner._job_pids |= _group_pids(proc.pid)
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(timeout=5)
            return
        except subprocess.TimeoutExpired:
            continue


def _group_pids(pgid: int) -> set[int]:
    pids = set()
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
            fields = stat[stat.rindex(")") + 2:].split()
            if int(fields[2]) == pgid:
                pids.add(int(entry))
        except (OSError, ValueError, IndexError):
            continue
    return pids


def _mpi_available() -> bool:
    return _has_module("mpi4py")


def _has_module(name: str) -> bool:
    import importlib.util

    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):
        return False


def _needs_mpi(backend: str) -> bool:
    return backend.startswith("mpi-")


# ----------------------------------------------------------------------------------- the CLI


def _csv(value: str) -> list[str]:
    return [v.strip() for v in value.split(",") if v.strip()]


def _sizes(value: str) -> list[int]:
    return [parse_size(v) for v in _csv(value)]


def configure(parser: argparse.ArgumentParser) -> None:
    lv = parser.add_mutually_exclusive_group()
    lv.add_argument("--quick", dest="level", action="store_const", const="quick",
                    help="a small matrix (within 2 minutes on 2 cores)")
    lv.add_argument("--full", dest="level", action="store_const", const="full",
                    help="the seeds' sizes: 602 MB arrays, 100000-entry dicts, 440 MB seed-004 data")
    parser.set_defaults(level="default")
    parser.add_argument("--out", help="results folder (default ipcbench-results/<timestamp>/)")
    parser.add_argument("--ranks", type=int, default=4, help="ranks of the broadcast and stream cases (default 4)")
    parser.add_argument("--backends", type=_csv, default=list(BACKEND_NAMES), help="comma list (default: all)")
    parser.add_argument("--modes", type=_csv, default=list(MODES), help="bytes,native (default both)")
    parser.add_argument("--kinds", type=_csv, default=None,
                        help="payload kinds: dict,ndarray,array1d,ragged2d,buffer (ping-pong, stream),tiny (granularity)")
    parser.add_argument("--scenarios", type=_csv, default=list(SCENARIOS), help=f"comma list of {','.join(SCENARIOS)}")
    parser.add_argument("--sizes", type=_sizes, default=None, help="override every size list, e.g. 1KB,1MB")
    parser.add_argument("--only", action="append", default=[], metavar="PATTERN",
                        help="run the cases whose label matches (glob or substring; repeatable); see --list")
    parser.add_argument("--list", action="store_true", help="print the cases and exit")
    parser.add_argument("--time-budget", type=float, default=None, help="seconds of timed iterations per case")
    parser.add_argument("--case-timeout", type=float, default=None, help="seconds without progress before a job is killed")
    parser.add_argument("--no-mpi", action="store_true", help="do not launch mpiexec (local backends only)")
    parser.add_argument("--no-extras", action="store_true", help="skip seed 004's MPI methods and seed 002")
    parser.add_argument("--mpiexec", help="the mpiexec to launch (default: next to python, then PATH)")
    parser.add_argument("--progress", choices=("auto", "rich", "plain", "none"), default="auto")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--cases", help=argparse.SUPPRESS)


def _check(args: argparse.Namespace) -> None:
    for b in args.backends:
        if b not in BACKEND_NAMES:
            raise ValueError(f"unknown backend {b!r}; choose from {', '.join(BACKEND_NAMES)}")
    for m in args.modes:
        if m not in MODES:
            raise ValueError(f"unknown mode {m!r}; choose bytes or native")
    for s in args.scenarios:
        if s not in SCENARIOS:
            raise ValueError(f"unknown scenario {s!r}; choose from {', '.join(SCENARIOS)}")
    if args.ranks < 2:
        raise ValueError("--ranks must be at least 2 (1 writer + readers)")


def run(args: argparse.Namespace) -> int:
    if args.worker:
        return worker_main(args)
    _check(args)
    return Runner(args).run()


COMMANDS = {"run": ("run the standard matrix and write results, CSV, plots and tables into a folder", configure, run)}


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m pytest_ipcbench.runner.job")
    configure(parser)
    return run(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
