"""The MPI phase of ``ipcbench run``: one ``mpiexec`` job of the worker at a time, read as its
events come (as pytest-xdist reads its workers), a hung case killed at its timeout and the job
resumed after it; or, when ``ipcbench run`` itself runs under mpiexec, the cases in this process.
"""

from __future__ import annotations

import json
import queue
import subprocess
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any, Protocol

from ..backends.base import declared_resources
from ..core import launcher, names
from ..core.jobwatch import JobReaper, reap_job
from ..core.outdir import write_text
from ..core.procs import kill_group
from ..harness.plan import BenchSettings
from ..results.record import RunRecord
from ..results.results import Result
from .matrix import Case
from .progress import Progress, summary_note
from .worker import MARK, run_mpi_cases


class RunState(Protocol):
    """What the MPI phase needs of the run it is part of (:class:`~.job.Runner`)."""

    options: Any
    settings: BenchSettings
    case_timeout: float
    out: Path
    run_record: RunRecord

    def fail(self, label: str, message: str) -> None: ...

    def log(self, text: str) -> None: ...


class MpiPhase:
    """Runs the MPI cases of a run and feeds their results and failures to it."""

    def __init__(self, runner: RunState) -> None:
        self.runner = runner
        self.mpi_env: dict[str, Any] = {}  # the job's MPI library and node layout (its "env" event)
        self._job_pids: set[int] = set()  # of jobs we killed: what they left may be removed
        self._job: dict[str, Any] = {}

    def run(self, cases: list[Case], progress: Progress, methods: dict[str, Any] | None) -> None:
        if not cases and not methods:
            return
        exe = self.runner.options.mpiexec or launcher.find_mpiexec()
        if exe is None:
            for c in cases:
                self.runner.fail(c.label, "no mpiexec found (install the mpi extra: pip install "
                                 "'pytest-ipcbench[mpi]')")
                progress.finish(c.label, "no mpiexec", ok=False)
            return
        start = 0
        stalls = 0
        while start < len(cases) or methods:
            spec = {"cases": [asdict(c) for c in cases], "start": start, "settings": asdict(self.runner.settings),
                    "mpi_methods": methods}
            path = self.runner.out / ".cases.json"
            write_text(path, json.dumps(spec))
            try:
                cmd = launcher.command(self.runner.options.ranks, "pytest_ipcbench.runner.worker", [str(path)], exe)
            except launcher.ShmFull as exc:
                if start == 0:
                    raise  # before the first job: exit 2, nothing measured yet
                for c in cases[start:]:  # filled while the matrix ran: the rest fail, what ran is kept
                    self.runner.fail(c.label, str(exc))
                return
            progress.start(f"starting mpiexec -n {self.runner.options.ranks}")
            next_start, finished, methods_done = self._run_job(cmd, cases, start, progress)
            if methods_done:
                methods = None
            if finished:
                break
            stalls = stalls + 1 if next_start <= start else 0
            if stalls >= 2:  # the job dies before its first case: give up on the rest
                for c in cases[start:]:
                    self.runner.fail(c.label, "not run: the MPI job failed twice before reaching it (see run.log)")
                    progress.finish(c.label, "not run", ok=False)
                break
            start = next_start
        (self.runner.out / ".cases.json").unlink(missing_ok=True)

    def on_event(self, ev: dict[str, Any], progress: Progress) -> None:
        """One event of the MPI phase (from the job's stdout, or in-process under MPI): dispatched
        to ``event_<kind>(progress, **fields)``, as pytest-xdist dispatches worker events."""
        fields = dict(ev)
        handler = getattr(self, f"event_{fields.pop('event')}", None)
        if handler is None:
            self.runner.log(f"[mpi] unknown event {ev!r}")
            return
        handler(progress, **fields)

    def event_env(self, progress: Progress, **env: Any) -> None:
        if env.get("harness_floor") is None and self.mpi_env.get("harness_floor"):  # a resumed job: the first's
            env["harness_floor"] = self.mpi_env["harness_floor"]
        self.mpi_env = env

    def event_start(self, progress: Progress, index: int, label: str) -> None:
        self._job.update(current=index, label=label)
        progress.start(label)

    def event_result(self, progress: Progress, index: int, label: str, result: dict[str, Any],
                     wall_s: float | None = None) -> None:
        r = Result.from_dict(result)
        # the case's label is what `--only` selects it by (the gate reruns cases in doubt)
        self.runner.run_record.add(r, **({} if wall_s is None else {"wall_s": wall_s}), case=label)
        progress.finish(label, summary_note(r))
        self._job.update(resume=index + 1, current=None, label="")

    def event_skip(self, progress: Progress, index: int, label: str, reason: str) -> None:
        self.runner.log(f"skipped {label}: {reason}")
        progress.finish(label, f"skipped: {reason}", ok=True)
        self._job["resume"] = index + 1

    def event_error(self, progress: Progress, index: int, label: str, message: str) -> None:
        self.runner.fail(label, message)
        progress.finish(label, message[:160], ok=False)
        if index >= 0:
            self._job["resume"] = index + 1
        else:  # the MPI methods (index -1)
            self._job["methods_done"] = True
        self._job.update(current=None, label="")

    def event_extra(self, progress: Progress, label: str, result: dict[str, Any]) -> None:
        self.runner.run_record.add(Result.from_dict(result))

    def event_note(self, progress: Progress, label: str, message: str) -> None:
        self.runner.log(f"[{label}] {message}")

    def event_end(self, progress: Progress, index: int, label: str) -> None:
        self._job.update(methods_done=True, current=None, label="")
        progress.finish(label, "done")

    def event_done(self, progress: Progress) -> None:
        self._job["done"] = True

    def _run_job(self, cmd: list[str], cases: list[Case], start: int, progress: Progress) -> tuple[int, bool, bool]:
        """One mpiexec job from case ``start``; (where to resume, finished, methods done)."""
        job = launcher.Job(cmd)
        proc, lines = job.proc, job.lines
        self._reaper = JobReaper(proc.pid).start()  # its ranks, and what they map: see _clean_after
        st = self._job = {"current": None, "label": "", "resume": start, "methods_done": False, "done": False}
        open_streams = 2
        deadline = time.monotonic() + self.runner.case_timeout + 60  # start-up included
        while open_streams:
            try:
                name, line = lines.get(timeout=max(0.1, deadline - time.monotonic()))
            except KeyboardInterrupt:
                self._kill(proc)  # it runs in a session of its own: Ctrl-C does not reach it
                self._clean_after(proc)
                raise
            except queue.Empty:
                what = st["label"] or "start-up of the MPI job"
                self.runner.fail(what, f"no progress for {self.runner.case_timeout:g} s: the MPI job was killed")
                progress.finish(what, "timed out", ok=False)
                self._kill(proc)
                self._clean_after(proc)
                cur = st["current"]
                if cur is None:
                    return st["resume"], False, st["methods_done"]
                return (cur + 1, False, False) if cur >= 0 else (st["resume"], False, True)
            if line is None:
                open_streams -= 1
                continue
            self._reaper.feed(line)
            if name == "err":
                self.runner.log(f"[mpi stderr] {line}")
                continue
            event = launcher.record(line, MARK)
            if event is None:
                self.runner.log(f"[mpi stdout] {line}")
                continue
            deadline = time.monotonic() + self.runner.case_timeout
            self.on_event(event, progress)
        proc.wait()
        if st["done"]:
            self._reaper.stop()
            return st["resume"], True, True
        what = st["label"] or "the MPI job"
        self.runner.fail(what, f"the MPI job ended with exit code {proc.returncode} before finishing")
        progress.finish(what, f"exit {proc.returncode}", ok=False)
        self._clean_after(proc)
        cur = st["current"]
        if cur is not None and cur >= 0:
            return cur + 1, False, st["methods_done"]
        if cur == -1:
            return st["resume"], False, True
        return st["resume"], st["resume"] >= len(cases), st["methods_done"]

    def _kill(self, proc: subprocess.Popen[str]) -> None:
        self._job_pids |= kill_group(proc)

    def _clean_after(self, proc: subprocess.Popen[str]) -> None:
        """Remove what the killed job's ranks left (only resources of processes that are gone),
        and say which rank died and how (core.jobwatch.JobReaper)."""
        for item in names.find_ours(patterns=declared_resources(load_all=True)):
            if not item.alive and item.pid in self._job_pids:
                names.remove(item.path)
        reap_job(self._reaper, self.runner.log, declared_resources(load_all=True))

    def inprocess(self, world: Any, cases: list[Case], progress: Progress, methods: dict[str, Any] | None) -> None:
        """The MPI phase when ``ipcbench run`` itself runs under mpiexec: every rank runs the
        cases here; a watchdog aborts the job if a case hangs (no resume in this mode)."""
        from mpi4py import MPI

        from ..core.watchdog import Watchdog

        spec = {"cases": [asdict(c) for c in cases], "start": 0, "settings": asdict(self.runner.settings),
                "mpi_methods": methods}
        self._job = {"current": None, "label": "", "resume": 0, "methods_done": False, "done": False}
        rank0 = world.rank == 0
        emit = (lambda event, **f: self.on_event({"event": event, **f}, progress)) if rank0 else None
        dog = Watchdog(world.rank, MPI.COMM_WORLD.Abort) if self.runner.case_timeout > 0 else None
        if dog is not None:
            dog.watch_interrupts()  # Ctrl-C must end the job even if a rank is blocked in MPI
        try:
            run_mpi_cases(world, spec, emit, dog, self.runner.case_timeout)
        finally:
            if dog is not None:
                dog.close()
