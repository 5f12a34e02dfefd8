"""``ipcbench selfcheck``: the harness against outside references, and every backend against its
mechanism's plainest use (harness/refcheck.py), same session, interleaved."""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

from ..backends.base import MODES, backend_names, default_wait, resolve_wait
from ..core.checks import MAX_RANKS, choice, number, one_of, seconds, sizes, text, whole
from ..core.envinfo import cores
from ..core.options import Option, add_arguments
from ..core.outdir import check_output_file, write_output
from ..core.procs import BUSY_SHARE, cpu_mark, load_average, others_busy
from ..core.wait import WAITS
from ..harness.floor import floor_line
from ..harness.physics import busy_note
from ..harness.refcheck import (
    DEFAULT_ROUNDS,
    SCENARIOS,
    RefRow,
    missing_reference,
    run_refchecks,
    skipped_cases,
    stream_notes,
)
from ..harness.selfcheck import DEFAULT_TOLERANCE, run_checks, table
from ..report.references import table as ref_table, write_report

HELP = ("check the harness against mpi4py.bench pingpong and a plain numpy copy (within 15%), and every "
        "backend against its reference (the plainest use of its mechanism)")


def _backends(value: Any, where: str) -> list[str]:
    """all (default), none, or names the registry knows (one that cannot run here is reported later)."""
    if isinstance(value, str) and value.strip() == "none":
        return []
    return list(one_of(backend_names, "backend")(value, where))


REF = "backends against their references"
# A bare selfcheck is a quick check (under a minute): the latency end, the middle and the bandwidth
# end at a short budget; --sizes and --time-budget give a fuller one (harness/refcheck.py's SIZES).
QUICK_SIZES = (1, 64 * 1024, 16 * 2**20)
QUICK_TIME_BUDGET = 0.15
#: ``ipcbench selfcheck``'s options (core/options.py says how a table is read)
SELFCHECK: tuple[Option, ...] = (
    Option("rounds", whole(1, 10_000), "interleaved rounds per harness figure (default 3)", flag="--rounds",
           default=3),
    Option("tolerance", number(0, 100), "largest accepted relative difference of the harness figures (default 0.15)",
           flag="--tolerance", default=DEFAULT_TOLERANCE),
    Option("mpiexec", text, "the mpiexec to use (default: next to python, then PATH)", flag="--mpiexec"),
    Option("json_out", text, "also write the figures to this JSON file", flag="--json"),
    Option("backends", _backends, "comma list of backends to check against their references (default: all); "
                                  "'none' skips these checks", flag="--backends", group=REF),
    Option("modes", one_of(MODES, "mode"), "bytes,native (default native)", flag="--modes", group=REF,
           default=["native"]),
    Option("sizes", sizes, "default 1B,64KiB,16MiB", flag="--sizes", group=REF, default=list(QUICK_SIZES)),
    Option("scenarios", one_of(SCENARIOS, "scenario"),
           "pingpong,stream,broadcast (default all; broadcast: 1 B - 1 KB, checked against physics)",
           flag="--scenarios", group=REF, default=list(SCENARIOS)),
    Option("time_budget", seconds(), f"seconds of timed iterations per case and side (default {QUICK_TIME_BUDGET})",
           flag="--time-budget", group=REF, default=QUICK_TIME_BUDGET),
    Option("ref_rounds", whole(1, 10_000), f"interleaved rounds per backend/reference case (default {DEFAULT_ROUNDS})",
           flag="--ref-rounds", group=REF, default=DEFAULT_ROUNDS),
    Option("ranks", whole(2, MAX_RANKS), "ranks of the stream cases: 1 writer, RANKS - 1 readers (default 2; "
                                          "ping-pong uses 2)", flag="--ranks", group=REF, default=2),
    Option("wait", choice(*WAITS), "how readers wait: auto (default: block when ranks <= cores), block or backoff",
           flag="--wait", group=REF),
    Option("strict", None, "exit 1 when a backend misses its target too", flag="--strict", action="store_true",
           group=REF),
    Option("out", text, "write summary.md, references.csv, references.png and .json to this folder "
                        "(default ipcbench-selfcheck/<timestamp>/)", flag="--out", group=REF),
)


def floor_lines(rows: Sequence[Any]) -> list[str]:
    """The harness's floor rows (the null channel), one line per process model: the smallest change
    a case can show (harness/floor.py)."""
    seconds: dict[str, dict[str, float]] = {}
    for r in rows:
        if r.is_floor:
            seconds.setdefault(r.extra.get("group", "?"), {})[r.scenario] = r.ours
    return [floor_line({"seconds": s, "group": group}) for group, s in seconds.items()]


def configure(parser: argparse.ArgumentParser) -> None:
    add_arguments(parser, SELFCHECK)


def run(args: argparse.Namespace) -> int:
    if args.json_out:  # checked before the checks run: a FIFO blocked the write at the end
        check_output_file(args.json_out, "--json")
    load_before, mark = load_average(), cpu_mark()
    figures, problems = run_checks(args.rounds, args.mpiexec)
    if not figures and not problems:
        return 0  # a non-zero rank under MPI
    print("ipcbench selfcheck: the harness against outside references, same session, interleaved")
    print(table(figures, args.tolerance))
    rows: list[RefRow] = []
    backends = list(backend_names()) if args.backends is None else args.backends
    if backends:
        wait = args.wait or default_wait()
        print(f"\nevery backend against its reference (wait strategy {wait}: "
              f"{resolve_wait(wait, 2)} at 2 ranks on {cores()} cores)", flush=True)
        rows, ref_problems = run_refchecks(backends, args.modes, args.sizes, args.scenarios, args.time_budget,
                                           args.ref_rounds, args.wait, args.mpiexec, ranks=args.ranks)
        problems += ref_problems
        print(ref_table(rows))
        for line in floor_lines(rows):
            print(line)
        for stream_note in stream_notes(backends, args.modes, args.scenarios):
            print(f"note: {stream_note}")
        for line in skipped_cases(backends, args.sizes):
            print(line)
        for name in backends:
            missing = missing_reference(name)
            if missing:
                print(f"no reference: {missing}; its rows above are its own figures, timed alone")
    load_after, others = load_average(), others_busy(mark)
    if load_before is not None and load_after is not None:
        # busy: the load average says so, or other processes took more than a tenth of the CPUs
        # while the checks ran (the load average lags a minute and counts our own ranks)
        busy = max(load_before, load_after) > cores() or (others is not None and others > BUSY_SHARE)
        print(f"machine load (1-min average): {load_before:.1f} before, {load_after:.1f} after, on {cores()} cores"
              + (f"; other processes used {others:.0%} of the CPUs meanwhile" if others is not None else "")
              + (" -- busy: other jobs share the cores, figures are less reliable" if busy else ""))
    if rows:
        out = Path(args.out or Path("ipcbench-selfcheck") / datetime.now().strftime("%Y%m%d-%H%M%S"))
        env = {"cores": cores(), "load": f"{load_before:.1f} -> {load_after:.1f}" if load_before is not None else "?",
               "wait": args.wait or default_wait(), "stream ranks": args.ranks,
               "harness floor": "; ".join(floor_lines(rows)) or "not measured"}
        files = write_report(rows, out, env)
        print(f"report: {', '.join(str(f) for f in files)}")
    for p in problems:
        print(f"problem: {p}")
    if args.json_out:
        write_output(args.json_out, json.dumps({
            "tolerance": args.tolerance, "figures": [x.as_dict() for x in figures],
            "references": [r.as_dict() for r in rows],
            "problems": problems, "load": [load_before, load_after], "cores": cores()}, indent=1), "--json")
    below = [r.below_physics for r in rows if r.below_physics]
    note = busy_note(others)  # as ipcbench run: on a busy machine it is said, not failed
    for line in below:
        print(f"{line} -- {note}" if note else line)
    if problems:
        return 2
    ok = all(f.ok(args.tolerance) for f in figures) and (bool(note) or not below) \
        and (not args.strict or all(r.ok for r in rows))
    return 0 if ok else 1
