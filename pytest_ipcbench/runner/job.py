"""``ipcbench run``: the standard matrix, into one folder of results, CSV, plots and tables.

Phases, one results file: copy (the copy bandwidth at every size), mpi (the MPI cases in mpiexec
jobs of :mod:`.worker`, then the MPI methods: :mod:`.mpijob`), local (the others over a LocalWorld)
and shared arrays. The folder holds ``results.json``, the report, ``run.log`` (stderr, failures).
"""

from __future__ import annotations

import fnmatch
import json
import sys
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field, replace
from datetime import datetime
from pathlib import Path
from typing import Any

from ..backends.base import BACKENDS, MODES, backend_names, holds_payload_in_shm, parse_wait, set_default_wait
from ..comparison.compare_notes import host_state_change
from ..core.cpu_pair import NBYTES as CROSS_CPU_BYTES, cross_cpu_copy
from ..core.envinfo import INJECT_ENV, describe as describe_env
from ..core.errors import UsageError
from ..core.group import MPIGroup, in_mpi_job
from ..core.injection import injected
from ..core.options import LEVELS
from ..core.outdir import FolderLock, OutputFolderError, claim, save_or_keep, write_text
from ..core.payloads import PAYLOADS
from ..core.procs import has_module
from ..core.units import admit_sizes
from ..harness.measure import PIPE_REFERENCE_SIZES, copy_result, payload_bytes, pipe_pingpong_result
from ..harness.physics import below_physics, judge
from ..harness.scenarios import SCENARIOS, quiet_barrier
from ..report import headline, write_report
from ..results.record import RunRecord
from ..results.results import Result, ResultSet
from ..shared.experiment import run_experiment
from .deep_phase import deep_phase
from .local_phase import local_phase
from .matrix import BUFFER, LEVEL_SPECS, MEMORY_COPY_BYTES, Case, build_matrix, load_problem, needs_mpi
from .mpijob import MpiPhase
from .progress import Progress
from .shared_arrays import experiment_results
from .worker import error_text


@dataclass
class RunOptions:
    """What ``ipcbench run`` was asked to do (the command line, typed and checked)."""

    level: str = "default"
    out: str | None = None
    ranks: int = 4
    backends: Sequence[str] | None = None  # None: every registered backend (entry points, plugins too)
    modes: Sequence[str] = MODES
    kinds: Sequence[str] | None = None
    scenarios: Sequence[str] = SCENARIOS
    sizes: Sequence[int] | None = None
    only: Sequence[str] = ()
    list: bool = False
    time_budget: float | None = None
    case_timeout: float | None = None
    no_mpi: bool = False
    no_extras: bool = False
    mpiexec: str | None = None
    progress: str = "auto"
    wait: str | None = None  # auto | block | backoff; None: $IPCBENCH_WAIT, else auto
    pin: str | None = None  # none | core (core/affinity.py); None: BenchSettings' default
    results_only: bool = False  # results.json and run.log, no CSV, plots or tables (the gate's rounds)
    # the counting pass (harness/count.py): on unless turned off (--no-count); cost: docs/counters.md
    count: bool | None = None
    # deep mode (harness/deep.py): labels matching these patterns get valgrind's counters after the run
    deep: Sequence[str] = ()
    every_backend: bool = field(default=False, init=False)

    def __post_init__(self) -> None:
        if self.wait is not None:
            parse_wait(self.wait, "--wait")
        if self.level not in LEVELS:
            raise ValueError(f"unknown level {self.level!r}; choose from {', '.join(LEVELS)}")
        if self.backends is None:
            self.every_backend = True  # not chosen: the MPI ones are skipped where MPI is not used
            self.backends = backend_names()
        for b in self.backends:
            BACKENDS.check_name(b)  # ValueError naming the known ones (entry points included)
        for k in self.kinds or ():
            if k != BUFFER and k not in PAYLOADS:
                raise ValueError(f"unknown payload kind {k!r}; choose from {', '.join(PAYLOADS.names())}, or {BUFFER}")
        for what, given, known in (("mode", self.modes, MODES), ("scenario", self.scenarios, SCENARIOS)):
            if unknown := [x for x in given if x not in known]:
                raise ValueError(f"unknown {what} {unknown[0]!r}; choose from {', '.join(known)}")
        if self.ranks < 2:
            raise ValueError("--ranks must be at least 2 (1 writer + readers)")


#: The extras' names for ``--only``: the whole block runs when a pattern is its name (no per-case
#: selection: one MPI job, one experiment); the names of before 0.2 are still accepted.
METHODS_BLOCK, SHARED_ARRAYS_BLOCK = "mpi-methods", "shared-arrays"
OLD_BLOCK_NAMES = {"seed004": METHODS_BLOCK, "seed002": SHARED_ARRAYS_BLOCK}


def extra_selected(opts: RunOptions, block: str) -> bool:
    """Whether an extra block runs: by default yes (unless no_extras); under ``only``, when a
    pattern names it exactly (or as a glob)."""
    if opts.no_extras:
        return False
    return not opts.only or any(fnmatch.fnmatchcase(block, OLD_BLOCK_NAMES.get(pat, pat)) for pat in opts.only)


class Runner:
    """Runs the phases, collects results and failures, writes the folder."""

    def __init__(self, options: RunOptions) -> None:
        self.options = opts = options
        self.level = LEVEL_SPECS[opts.level]
        level = self.level.settings
        self.settings = replace(level, count=opts.count is not False, pin=opts.pin or level.pin,
                                time_budget=level.time_budget if opts.time_budget is None else opts.time_budget)
        self.case_timeout = opts.case_timeout or self.level.case_timeout
        self.out = Path(opts.out) if opts.out else Path("ipcbench-results") / datetime.now().strftime("%Y%m%d-%H%M%S")
        self._lock: FolderLock | None = None  # held while the run writes into self.out
        self.run_record = RunRecord()  # rank 0 starts it with the environment (_run)
        self.results: ResultSet | None = None  # what finish() wrote
        self.copies: dict[int, Result] = {}
        self.references: dict[int, Result] = {}
        self.cross_cpu: list[float | None] = []  # the host's state at the start and the end (core/cpu_pair.py)
        self.failures: list[str] = []
        self.log_lines: list[str] = []
        self.mpi = MpiPhase(self)

    # ------------------------------------------------------------------ helpers
    def log(self, text: str) -> None:
        self.log_lines.append(text)

    def fail(self, label: str, message: str) -> None:
        self.failures.append(f"{label}: {message}")
        self.log(f"FAILED {label}: {message}")

    # ------------------------------------------------------------------ phases
    def copy_phase(self, cases: Sequence[Case], progress: Progress | None) -> dict[int, float]:
        """numpy copy bandwidth at every payload size (and 64 MB), before and after the other phases:
        the faster one is kept (only other work slows a copy), so one busy moment skews nothing."""
        sizes = sorted({payload_bytes(c.payload()) for c in cases if c.scenario != "granularity"} | {MEMORY_COPY_BYTES})
        if progress is not None:
            progress.start("copy bandwidth (numpy)")
        for n in sizes:
            r = copy_result(n, time_budget=0.05 if self.options.level == "quick" else 0.2)
            old = self.copies.get(n)
            passes = 1 if old is None else old.extra.get("passes", 1) + 1
            kept = r if old is None or r.throughput() > old.throughput() else old
            self.copies[n] = replace(kept, extra={**kept.extra, "passes": passes})
        # the raw pipe ping-pong: with the copies, the in-run references that let `ipcbench
        # compare` divide out the load of the moment when it compares two runs (docs/method.md rule 19)
        for n in PIPE_REFERENCE_SIZES:
            r = pipe_pingpong_result(n, time_budget=0.05 if self.options.level == "quick" else 0.2)
            old = self.references.get(n)
            if old is None or r.summary().median < old.summary().median:
                self.references[n] = r
        self.cross_cpu.append(cross_cpu_copy())
        if progress is not None:
            progress.finish("copy bandwidth (numpy)", f"{len(sizes)} sizes")
        return {n: r.throughput() for n, r in self.copies.items()}

    def shared_arrays_phase(self, progress: Progress) -> None:
        """The shared-array experiment (``shared.experiment.run_experiment``)."""
        rows = {"quick": 25_000, "default": 250_000, "full": 250_000}[self.options.level]
        label = f"shared arrays: a {rows * 602 * 4 / 1e6:.0f} MB array between two processes"
        repeats = {"quick": 3, "default": 3, "full": 7}[self.options.level]
        progress.start(label)
        try:
            got = run_experiment(nbytes_rows=rows, repeats=repeats)
        except Exception as exc:
            self.fail(label, error_text(exc))
            progress.finish(label, error_text(exc)[:160], ok=False)
            return
        self.run_record.extend(experiment_results(got))
        write_text(self.out / "shared-arrays.json", json.dumps(got, indent=1, default=str) + "\n")
        progress.finish(label, ", ".join(f"{k} {v:.3g} s" for k, v in got.get("median", {}).items()))

    # ------------------------------------------------------------------ all
    def run(self) -> int:
        opts = self.options
        if opts.wait is not None:
            set_default_wait(opts.wait)  # exported: the mpiexec job and local workers follow it
        world = MPIGroup.world() if in_mpi_job() else None
        rank0 = world is None or world.rank == 0
        cases = build_matrix(opts.level, opts.ranks if world is None else world.size, opts.backends, opts.modes,
                             opts.kinds, opts.scenarios, opts.sizes, opts.only)
        have_mpi = has_module("mpi4py")  # and below, the backends that do not load here (no mpi4py...)
        self.unloadable = {n: why for n in dict.fromkeys(c.backend for c in cases) if (why := load_problem(n))}
        mpi_cases = [c for c in cases if c.phase == "mpi" and have_mpi and not opts.no_mpi]
        local_cases = [c for c in cases if c not in mpi_cases and c.backend not in self.unloadable
                       and (c.phase == "local" or not needs_mpi(c.backend))]
        dropped = [c for c in cases if c not in mpi_cases and c not in local_cases]
        methods = None
        if extra_selected(opts, METHODS_BLOCK) and have_mpi and not opts.no_mpi:
            methods = {"configs": list(self.level.mpi_method_configs), "case_time": self.level.mpi_method_case_time}
        shared_arrays = extra_selected(opts, SHARED_ARRAYS_BLOCK)
        factors = injected()  # a bad $IPCBENCH_INJECT is a usage error before anything runs
        for name in factors:
            BACKENDS.check_name(name)
        if factors and rank0 and not opts.list:
            print(f"ipcbench run: {INJECT_ENV} slows {', '.join(f'{k} {v.describe()}' for k, v in factors.items())} "
                  f"on purpose: these results measure a gate, not the code", file=sys.stderr)
        if opts.list:
            if rank0:
                for c in mpi_cases + local_cases:
                    print(f"{'mpi' if c in mpi_cases else 'local':5} {c.label}")  # where it will run
                for c in dropped:
                    print(f"skip  {c.label} ({self.unloadable.get(c.backend) or 'needs MPI'})")
                for block, on in ((METHODS_BLOCK, methods), (SHARED_ARRAYS_BLOCK, shared_arrays)):
                    if on:
                        print(f"extra {block}")
                print(f"{len(mpi_cases) + len(local_cases)} cases" + (" + MPI transfer methods" if methods else "")
                      + (" + shared-array experiment" if shared_arrays else ""))
            return 0
        # deep mode runs after the timed run, from the launching command (it starts mpiexec under valgrind)
        self.deep_cases = [c for c in mpi_cases + local_cases if c.scenario in ("broadcast", "pingpong", "stream")
                           and any(fnmatch.fnmatchcase(c.label, p) or p in c.label for p in opts.deep)]
        if opts.deep and world is not None:
            if rank0:
                print("ipcbench run: --deep is ignored inside an mpiexec job (it starts mpiexec under valgrind "
                      "itself)", file=sys.stderr)
            self.deep_cases = []
        elif opts.deep and not self.deep_cases:
            raise UsageError(f"--deep {','.join(opts.deep)} matches no broadcast, ping-pong or stream case "
                             "(see --list)")
        ranks = opts.ranks if world is None else world.size
        if world is None:  # the launching command: sizes that cannot fit are refused before any rank starts
            for c in mpi_cases + local_cases:
                admit_sizes(c.size, c.ranks, f"{c.label}: size", in_shm=holds_payload_in_shm(c.backend))
        self.claim_folder(world)
        try:
            return self._run(world, rank0, ranks, mpi_cases, local_cases, dropped, methods, shared_arrays)
        finally:
            if self._lock is not None:
                self._lock.release()

    def claim_folder(self, world: MPIGroup | None) -> None:
        """Rank 0 claims the output folder (checked and locked, see core.outdir); every rank
        learns it, or the error."""
        got: tuple[str, str] = ("", "")
        if world is None or world.rank == 0:
            try:
                self.out, self._lock = claim(self.options.out, self.out.parent, self.out.name)
                got = (str(self.out), "")
            except OutputFolderError as exc:
                got = ("", str(exc))
        if world is not None:
            got = world.bcast(got)
        if got[1]:
            raise OutputFolderError(got[1])
        self.out = Path(got[0])

    def _run(self, world: MPIGroup | None, rank0: bool, ranks: int, mpi_cases: list[Case], local_cases: list[Case],
             dropped: list[Case], methods: dict[str, Any] | None, shared_arrays: bool) -> int:
        opts = self.options
        if rank0:  # node_sizes None: the MPI job's, later
            self.run_record = RunRecord.start(ranks, group_kind="mpi+local", extra={"level": opts.level},
                                              node_sizes=world.node_sizes if world is not None else None)
            print(f"ipcbench run ({opts.level}): {len(mpi_cases)} MPI cases on {ranks} ranks, "
                  f"{len(local_cases)} local cases" + (", MPI transfer methods" if methods else "")
                  + (", shared-array experiment" if shared_arrays else "") + f" -> {self.out}")
            for line in describe_env(self.run_record.env):
                print(f"  {line}")
        why = "--no-mpi" if opts.no_mpi else "mpi4py is not installed"
        skipped: dict[str, set[str]] = {}
        for c in dropped:  # named with --backends: they fail and say why; else skipped, said once per reason
            text = self.unloadable.get(c.backend) or f"needs MPI ({why})"
            if not opts.every_backend:
                self.fail(c.label, text)
            else:
                self.log(f"skipped {c.label}: {text}")
                skipped.setdefault(text if c.backend not in self.unloadable else "unload", set()).add(c.backend)
        for text, names in skipped.items() if rank0 else ():  # the backends that do not load: one line, one example
            print(f"  skipped: the cases of {', '.join(sorted(names))}: " + (text if text != "unload" else
                  f"they do not load here (run.log: each); {self.unloadable[min(names)]}"))
        total = 1 + len(mpi_cases) + len(local_cases) + (1 if methods else 0) + (1 if shared_arrays else 0)
        progress = Progress(total, opts.progress if rank0 else "none")
        t0 = time.monotonic()
        copies: dict[int, float] = {}
        try:
            if rank0:
                copies = self.copy_phase(mpi_cases + local_cases, progress)
            if world is not None:
                quiet_barrier(world)  # the others wait asleep while rank 0 copies
                self.mpi.inprocess(world, mpi_cases, progress, methods)
            else:
                self.mpi.run(mpi_cases, progress, methods)
            if rank0:
                local_phase(self, local_cases, progress)
                if shared_arrays:
                    self.shared_arrays_phase(progress)
                copies = self.copy_phase(mpi_cases + local_cases, None)  # again: the faster one counts
            if world is not None:
                quiet_barrier(world)
        except KeyboardInterrupt:
            self.fail("run", "interrupted")
        finally:
            progress.close()
        if not rank0:
            return 0
        return self.finish(copies, time.monotonic() - t0, len(mpi_cases) + len(local_cases))

    def finish(self, copies: dict[int, float], wall: float, n_cases: int) -> int:
        """Efficiency, environment, results.json, the report, the summary on the terminal."""
        env: dict[str, Any] = {}
        if self.mpi.mpi_env.get("mpi"):
            env["mpi"] = self.mpi.mpi_env["mpi"]
        per_node = self.mpi.mpi_env.get("ranks_per_node")
        if per_node:  # the MPI job's node layout (the launcher sees one host)
            env["nodes"], env["ranks_per_node"] = len(per_node), per_node
        if MEMORY_COPY_BYTES in copies:  # beyond the caches: the machine's memory copy bandwidth
            env["copy_bandwidth_MBps"] = copies[MEMORY_COPY_BYTES] / 1e6
            env["copy_bandwidth_size"] = MEMORY_COPY_BYTES
        env.update(cross_cpu_copy_s=self.cross_cpu, cross_cpu_copy_bytes=CROSS_CPU_BYTES)  # None: not measured
        env["harness_floor"] = {"mpi": self.mpi.mpi_env.get("harness_floor"),  # None: not measured
                                "local": getattr(self, "local_floor", None)}
        notes: dict[str, dict[str, Any]] = {}
        violations = below_physics(self.run_record.results)
        others = self.run_record.others_cpu_share() if violations else None
        for key, text, harness_error in judge(violations, others):
            # a figure below physics is a harness error, not a result (unless the machine was busy)
            notes[key] = {"harness_error" if harness_error else "below_physics_when_busy": text}
            if harness_error:
                self.failures.append(text)
            self.log(text)

        def copy_bandwidth(r: Result) -> float | None:
            return copies.get(r.nbytes) if r.scenario in ("broadcast", "pingpong", "stream") else None

        deep = deep_phase(self.deep_cases, self.run_record.results, self.fail, self.log) \
            if getattr(self, "deep_cases", None) else {}
        self.results = self.run_record.finish(
            references=[*(self.copies[n] for n in sorted(self.copies)),
                        *(self.references[n] for n in sorted(self.references))],
            copy_bandwidth=copy_bandwidth, notes=notes, counters=deep, **env, wall_s=round(wall, 1), cases=n_cases,
            failures=self.failures, settings=asdict(self.settings), case_timeout_s=self.case_timeout)
        path, lost = save_or_keep(self.results.save, self.out / "results.json")  # a full disk: kept elsewhere
        if lost:
            self.out = path.parent
            self.failures.append(lost)
            print(f"ipcbench run: {lost}", file=sys.stderr)
        summary = self.out / "run.log" if self.options.results_only else write_report(self.results, self.out)
        write_text(self.out / "run.log", "\n".join(self.log_lines) + "\n")
        print(f"\n{headline(self.results.results) or '(no results)'}\n")
        print(f"{len(self.results.results)} results in {wall:.0f} s; {len(self.failures)} failed")
        if changed := host_state_change(self.cross_cpu):
            print(f"  note: {changed}")
        for f in self.failures[:20]:
            print(f"  failed: {f}")
        if len(self.failures) > 20:
            print(f"  ... and {len(self.failures) - 20} more (run.log)")
        print(f"results: {path}\nreport:  {summary}")
        return 1 if self.failures else 0
