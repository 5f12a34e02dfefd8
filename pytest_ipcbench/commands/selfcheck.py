"""``ipcbench selfcheck``: the harness against outside references, same session, interleaved."""

from __future__ import annotations

import argparse
import json

from ..core.envinfo import cores
from ..core.procs import load_average
from ..harness.selfcheck import DEFAULT_TOLERANCE, run_checks, table

HELP = "check the harness against mpi4py.bench pingpong and a plain numpy copy (within 15%%)"


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--rounds", type=int, default=3, help="interleaved rounds per figure (default 3)")
    parser.add_argument("--tolerance", type=float, default=DEFAULT_TOLERANCE,
                        help="largest accepted relative difference (default 0.15)")
    parser.add_argument("--mpiexec", help="the mpiexec to use (default: next to python, then PATH)")
    parser.add_argument("--json", dest="json_out", help="also write the figures to this JSON file")




def run(args: argparse.Namespace) -> int:
    load_before = load_average()
    figures, problems = run_checks(args.rounds, args.tolerance, args.mpiexec)
    if not figures and not problems:
        return 0  # a non-zero rank under MPI
    load_after = load_average()
    print("ipcbench selfcheck: the harness against outside references, same session, interleaved")
    print(table(figures, args.tolerance))
    if load_before is not None and load_after is not None:
        busy = max(load_before, load_after) > cores()
        print(f"machine load (1-min average): {load_before:.1f} before, {load_after:.1f} after, on {cores()} cores"
              + (" -- busy: other jobs share the cores, figures are less reliable" if busy else ""))
    for p in problems:
        print(f"problem: {p}")
    if args.json_out:
        with open(args.json_out, "w") as f:
            json.dump({"tolerance": args.tolerance, "figures": [x.as_dict() for x in figures],
                       "problems": problems, "load": [load_before, load_after], "cores": cores()}, f, indent=1)
    if problems:
        return 2
    return 0 if all(f.ok(args.tolerance) for f in figures) else 1
