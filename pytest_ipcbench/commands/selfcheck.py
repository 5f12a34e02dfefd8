"""``ipcbench selfcheck``: the harness against outside references, and every backend against its
mechanism's plainest use (harness/refcheck.py), same session, interleaved."""

from __future__ import annotations

import argparse
import json
from datetime import datetime
from pathlib import Path

from ..backends.base import (MODES, BackendUnavailable, backend_names, default_wait, get_backend, parse_wait,
                             resolve_wait)
from ..core.envinfo import cores
from ..core.procs import load_average
from ..core.units import parse_size
from ..harness.refcheck import (DEFAULT_ROUNDS, DEFAULT_TIME_BUDGET, SCENARIOS, SIZES, missing_reference,
                                run_refchecks, stream_notes, write_report)
from ..harness.refcheck import table as ref_table
from ..harness.selfcheck import DEFAULT_TOLERANCE, run_checks, table

HELP = ("check the harness against mpi4py.bench pingpong and a plain numpy copy (within 15%), and every "
        "backend against its reference (the plainest use of its mechanism)")


def _csv(value: str) -> list[str]:
    return [v.strip() for v in value.split(",") if v.strip()]


def _backends(value: str) -> list[str]:
    if value.strip() == "none":
        return []
    names = list(backend_names()) if value.strip() in ("all", "") else _csv(value)
    for name in names:
        try:
            get_backend(name)
        except ValueError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None
        except BackendUnavailable:  # known, but cannot run here: run_refchecks reports it
            pass
    return names


def _modes(value: str) -> list[str]:
    modes = _csv(value)
    bad = [m for m in modes if m not in MODES]
    if bad:
        raise argparse.ArgumentTypeError(f"unknown mode {bad[0]!r}; choose from {', '.join(MODES)}")
    return modes


def _scenarios(value: str) -> list[str]:
    got = _csv(value)
    bad = [s for s in got if s not in SCENARIOS]
    if bad:
        raise argparse.ArgumentTypeError(f"unknown scenario {bad[0]!r}; choose from {', '.join(SCENARIOS)}")
    return got


def _sizes(value: str) -> list[int]:
    try:
        return [max(1, parse_size(v)) for v in _csv(value)]
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _wait(value: str) -> str:
    try:
        return parse_wait(value, "--wait")
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--rounds", type=int, default=3, help="interleaved rounds per harness figure (default 3)")
    parser.add_argument("--tolerance", type=float, default=DEFAULT_TOLERANCE,
                        help="largest accepted relative difference of the harness figures (default 0.15)")
    parser.add_argument("--mpiexec", help="the mpiexec to use (default: next to python, then PATH)")
    parser.add_argument("--json", dest="json_out", help="also write the figures to this JSON file")
    ref = parser.add_argument_group("backends against their references")
    ref.add_argument("--backends", type=_backends, default=None,
                     help="comma list of backends to check against their references (default: all); "
                          "'none' skips these checks")
    ref.add_argument("--modes", type=_modes, default=["native"], help="bytes,native (default native)")
    ref.add_argument("--sizes", type=_sizes, default=list(SIZES), help="default 1B,1KB,64KiB,1MB,16MiB")
    ref.add_argument("--scenarios", type=_scenarios, default=list(SCENARIOS), help="pingpong,stream (default both)")
    ref.add_argument("--time-budget", type=float, default=DEFAULT_TIME_BUDGET,
                     help=f"seconds of timed iterations per case and side (default {DEFAULT_TIME_BUDGET})")
    ref.add_argument("--ref-rounds", type=int, default=DEFAULT_ROUNDS,
                     help=f"interleaved rounds per backend/reference case (default {DEFAULT_ROUNDS})")
    ref.add_argument("--ranks", type=int, default=2,
                     help="ranks of the stream cases: 1 writer, RANKS - 1 readers (default 2; ping-pong uses 2)")
    ref.add_argument("--wait", type=_wait, default=None,
                     help="how readers wait: auto (default: block when ranks <= cores), block or backoff")
    ref.add_argument("--strict", action="store_true", help="exit 1 when a backend misses its target too")
    ref.add_argument("--out", help="write summary.md, references.csv, references.png and .json to this folder "
                                   "(default ipcbench-selfcheck/<timestamp>/)")


def run(args: argparse.Namespace) -> int:
    load_before = load_average()
    figures, problems = run_checks(args.rounds, args.tolerance, args.mpiexec)
    if not figures and not problems:
        return 0  # a non-zero rank under MPI
    print("ipcbench selfcheck: the harness against outside references, same session, interleaved")
    print(table(figures, args.tolerance))
    rows = []
    backends = list(backend_names()) if args.backends is None else args.backends
    if backends:
        wait = args.wait or default_wait()
        print(f"\nevery backend against its reference (wait strategy {wait}: "
              f"{resolve_wait(wait, 2)} at 2 ranks on {cores()} cores)", flush=True)
        rows, ref_problems = run_refchecks(backends, args.modes, args.sizes, args.scenarios, args.time_budget,
                                           args.ref_rounds, args.wait, args.mpiexec, ranks=args.ranks)
        problems += ref_problems
        print(ref_table(rows))
        for note in stream_notes(backends, args.modes, args.scenarios):
            print(f"note: {note}")
        for name in backends:
            missing = missing_reference(name)
            if missing:
                print(f"no reference: {missing}; its rows above are its own figures, timed alone")
    load_after = load_average()
    if load_before is not None and load_after is not None:
        busy = max(load_before, load_after) > cores()
        print(f"machine load (1-min average): {load_before:.1f} before, {load_after:.1f} after, on {cores()} cores"
              + (" -- busy: other jobs share the cores, figures are less reliable" if busy else ""))
    if rows:
        out = Path(args.out or Path("ipcbench-selfcheck") / datetime.now().strftime("%Y%m%d-%H%M%S"))
        env = {"cores": cores(), "load": f"{load_before:.1f} -> {load_after:.1f}" if load_before is not None else "?",
               "wait": args.wait or default_wait(), "stream ranks": args.ranks}
        files = write_report(rows, out, env)
        print(f"report: {', '.join(str(f) for f in files)}")
    for p in problems:
        print(f"problem: {p}")
    if args.json_out:
        with open(args.json_out, "w") as f:
            json.dump({"tolerance": args.tolerance, "figures": [x.as_dict() for x in figures],
                       "references": [r.as_dict() for r in rows],
                       "problems": problems, "load": [load_before, load_after], "cores": cores()}, f, indent=1)
    if problems:
        return 2
    ok = all(f.ok(args.tolerance) for f in figures) and (not args.strict or all(r.ok for r in rows))
    return 0 if ok else 1
