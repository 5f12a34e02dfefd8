"""Running cases: in a local world, or on every rank of the MPI job that ``ipcbench run`` launches.

The MPI job is ``mpiexec -n RANKS python -m pytest_ipcbench.runner.worker CASES.json``: rank 0
reports each event (env, start, result, skip, error, note, end, done) as one line on stdout,
prefixed with :data:`MARK`, which :class:`~.job.Runner` reads as it comes.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from ..backends.base import BackendSpec, get_backend, unavailable_reason
from ..core import launcher
from ..core.envinfo import mpi_info
from ..core.group import Group, MPIGroup
from ..core.local import LocalWorld
from ..harness.measure import PAIR_SCENARIOS, BenchSettings, bench, quiet_barrier
from ..results.results import Result
from .matrix import Case

MARK = "@@ipcbench "
METHODS_LABEL = "MPI transfer methods (1D and ragged 2D int32)"


def _bench_case(group: Group, case: Case, settings: BenchSettings) -> Result | None:
    s = replace(settings, work=case.work) if case.scenario == "granularity" else settings
    return bench(group, BackendSpec(case.backend, case.mode), case.payload(), case.scenario, s)


def noop(group: Group) -> None:
    """Nothing: run once to start a local world's workers."""


def run_case_local(world: LocalWorld, case: Case, settings: BenchSettings) -> Result:
    ranks = 2 if case.scenario in PAIR_SCENARIOS else case.ranks
    return world.run(_bench_case, case, settings, ranks=ranks)[0]


def case_unavailable(case: Case, group: Any) -> str | None:
    try:
        cls = get_backend(case.backend)
    except Exception as exc:  # BackendUnavailable or unknown
        return str(exc)
    largest = cls.max_message_bytes
    if largest is not None:
        from ..harness.payload import payload_bytes

        nbytes = max(case.size, payload_bytes(case.payload()))
        if nbytes > largest:
            return (f"{case.backend} takes messages of at most {largest} B (its max_message_bytes); "
                    f"this case moves {nbytes} B")
    return unavailable_reason(case.backend, group)


def _emit(event: str, **fields: Any) -> None:
    launcher.emit(MARK, {"event": event, **fields})


def worker_main(cases_file: str) -> int:
    """Under mpiexec (launched by ``ipcbench run``): run the cases of a file on every rank; rank 0
    reports each event as a line on stdout."""
    from ..core import reaper

    world = MPIGroup.world()
    # outlives this rank if it (or its launcher) is killed: says so and reclaims what it left
    watcher = reaper.start(world.rank)
    spec = world.bcast(json.loads(Path(cases_file).read_text()) if world.rank == 0 else None)
    run_mpi_cases(world, spec, _emit if world.rank == 0 else None)
    reaper.release(watcher)
    return 0


def harness_floor(group: Any) -> dict[str, Any] | None:
    """The harness's own floor on these ranks (harness/floor.py); None (on rank 0 too) if it failed."""
    from ..harness.floor import measure_floor

    try:
        return measure_floor(group)
    except Exception:
        return None


def run_mpi_cases(world: Any, spec: dict[str, Any], emit: Callable[..., None] | None,
                  watchdog: Any = None, case_timeout: float = 0.0) -> None:
    """Collective over ``world``: the cases of ``spec`` from ``spec["start"]``, then the MPI methods'
    methods if asked; ``emit(event, **fields)`` on rank 0 reports (None elsewhere)."""
    settings = BenchSettings(**spec["settings"])
    cases = [Case(**c) for c in spec["cases"]]
    say = emit or (lambda *a, **k: None)
    say("env", mpi=mpi_info(), ranks=world.size, ranks_per_node=world.node_sizes,
        harness_floor=harness_floor(world) if spec.get("start", 0) == 0 else None)
    for index, case in enumerate(cases[spec.get("start", 0):], spec.get("start", 0)):
        reason = case_unavailable(case, world)
        if reason:
            say("skip", index=index, label=case.label, reason=reason)
            continue
        say("start", index=index, label=case.label)
        if watchdog is not None:
            watchdog.arm(case.label, case_timeout, "case")
        t0 = time.perf_counter()
        try:
            group = world if case.ranks >= world.size else world.split(case.ranks)
            result = group.run(_bench_case, case, settings)[0] if group is not None else None
            quiet_barrier(world)
        except Exception as exc:
            quiet_barrier(world)
            say("error", index=index, label=case.label, message=error_text(exc))
            continue
        finally:
            if watchdog is not None:
                watchdog.disarm()
        if result is not None:  # the Runner adds the wall time to the result's record (results/record.py)
            say("result", index=index, label=case.label, result=result.to_dict(),
                wall_s=round(time.perf_counter() - t0, 3))
    if spec.get("mpi_methods"):
        if watchdog is not None:
            watchdog.arm(METHODS_LABEL, case_timeout * 10, "case")
        _run_mpi_methods(world, spec["mpi_methods"], say)
        if watchdog is not None:
            watchdog.disarm()
    say("done")


def _run_mpi_methods(world: Any, opts: dict[str, Any], say: Callable[..., None]) -> None:
    """The hook for the MPI method matrix: :func:`pytest_ipcbench.mpi_methods.run_matrix`
    (collective; Result records on rank 0)."""
    from .. import mpi_methods

    say("start", index=-1, label=METHODS_LABEL)
    try:
        settings = mpi_methods.matrix_settings(case_time=float(opts.get("case_time", mpi_methods.DEFAULT_CASE_TIME)))
        configs = [c for c in opts.get("configs", ()) if c in mpi_methods.CONFIGS]

        def progress(line: str) -> None:
            say("note", label="MPI transfer methods", message=line.strip())

        results = mpi_methods.run_matrix(world, configs=configs, settings=settings,
                                     progress=progress if world.rank == 0 else None)
        quiet_barrier(world)
    except Exception as exc:
        say("error", index=-1, label=METHODS_LABEL, message=error_text(exc))
        return
    for r in results:
        say("extra", label="MPI transfer methods", result=r.to_dict())
    say("end", index=-1, label=METHODS_LABEL)


def error_text(exc: BaseException) -> str:
    text = f"{type(exc).__name__}: {exc}"
    return text if len(text) < 2000 else text[:2000] + " ..."


def main(argv: Sequence[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else list(argv)
    if len(args) != 1:
        print("usage: python -m pytest_ipcbench.runner.worker CASES.json (launched by ipcbench run)", file=sys.stderr)
        return 2
    return worker_main(args[0])


if __name__ == "__main__":
    sys.exit(main())
