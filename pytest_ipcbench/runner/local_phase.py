"""``ipcbench run``'s local phase: the cases that run over local workers (mp-queue, and every
backend without MPI under ``--no-mpi``), then the leak check the pytest session and the MPI
path have: what the phase's processes left is a failure naming it, then removed."""

from __future__ import annotations

import os
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ..backends.base import declared_resources
from ..core.local import LocalWorld
from ..core.names import find_ours, remove
from ..harness.measure import PAIR_SCENARIOS
from .matrix import Case
from .progress import Progress, summary_note
from .worker import case_unavailable, error_text, harness_floor, noop, run_case_local


def ours(pids: Sequence[int]) -> set[str]:
    """Our names (``ipcb-<pid>-*``) and the loaded backends' declared ``resources`` of ``pids``."""
    patterns = declared_resources()  # of the backends this run loaded: plugins name theirs
    return {str(item.path) for pid in pids for item in find_ours(pid, patterns)}


def local_phase(runner: Any, cases: list[Case], progress: Progress) -> None:
    """The local cases of ``runner`` (job.py's Runner: its options, settings, record and failures)."""
    if not cases:
        return
    before = ours([os.getpid()])
    world = LocalWorld(runner.options.ranks, timeout=runner.case_timeout)
    try:
        _run_cases(runner, world, cases, progress)
    finally:
        world.close()  # its after_ranks hooks run: before the leak check
        for path in sorted(ours(sorted({os.getpid(), *world.pids})) - before):
            remove(Path(path))
            runner.fail("local phase", f"resources left behind (removed now): {path}")


def _run_cases(runner: Any, world: LocalWorld, cases: list[Case], progress: Progress) -> None:
    world.run(noop)  # start the workers: their mailboxes exist from now on
    runner.local_floor = world.run(harness_floor, ranks=2)[0]  # beside the MPI job's (harness/floor.py)
    for case in cases:
        group = world.group(2 if case.scenario in PAIR_SCENARIOS else case.ranks)
        reason = case_unavailable(case, group)
        if reason:
            runner.log(f"skipped {case.label}: {reason}")
            progress.finish(case.label, f"skipped: {reason}")
            continue
        progress.start(case.label)
        t0 = time.perf_counter()
        try:
            r = run_case_local(world, case, runner.settings)
        except Exception as exc:
            runner.fail(case.label, error_text(exc))
            progress.finish(case.label, error_text(exc)[:160], ok=False)
            continue
        # the case's label is what `--only` selects it by (the gate reruns cases in doubt)
        runner.run_record.add(r, wall_s=round(time.perf_counter() - t0, 3), case=case.label)
        progress.finish(case.label, summary_note(r))
