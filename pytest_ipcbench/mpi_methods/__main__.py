"""``mpiexec -n 4 python -m pytest_ipcbench.mpi_methods``: the MPI method matrix.

Prints the environment record's header and one line per case (rank 0); ``--out`` writes a
results file that ``ipcbench report`` turns into the original C++ benchmark's tables and plot.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable, Sequence

from ..core.envinfo import collect, describe
from ..results.record import RunRecord
from ..results.results import ResultSet
from .configs import DEFAULT_CONFIGS, FULL_CONFIGS, MODE, parse_configs, parse_shapes
from .matrix import DEFAULT_CASE_TIME, DEFAULT_ROUNDS, _peak_rss_bytes, matrix_settings, run_matrix
from .methods import METHOD_NAMES, parse_methods

PROG = "python -m pytest_ipcbench.mpi_methods"


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog=PROG, description="The MPI method matrix (run under mpiexec, e.g. mpiexec -n 4).")
    p.add_argument("--configs", default=",".join(DEFAULT_CONFIGS), help="comma list or 'all'")
    p.add_argument("--full", action="store_true", help="every configuration, up to XXXLarge (440 MB)")
    p.add_argument("--methods", default="all", help=f"comma list of {', '.join(METHOD_NAMES)}")
    p.add_argument("--shapes", default="1d,2d")
    p.add_argument("--out", help="results JSON file (written by rank 0); `ipcbench report FILE` makes the tables")
    p.add_argument("--case-time", type=float, default=DEFAULT_CASE_TIME,
                   help="seconds of timed transfers per case, all rounds")
    p.add_argument("--rounds", type=int, default=DEFAULT_ROUNDS, help="interleaved rounds per case")
    p.add_argument("--quiet-waits", action="store_true",
                   help="the harness's barriers sleep instead of waiting in MPI (docs/method.md rule 18; "
                        "a passive-target Get then waits for the root to wake)")
    p.add_argument("--quiet", action="store_true")
    return p


def checked(args: argparse.Namespace) -> argparse.Namespace:
    """The command line with its lists parsed; ValueError naming a bad value."""
    if args.case_time <= 0:
        raise ValueError(f"--case-time must be positive, got {args.case_time}")
    if args.rounds < 1:
        raise ValueError(f"--rounds must be at least 1, got {args.rounds}")
    return argparse.Namespace(**{**vars(args), "configs": FULL_CONFIGS if args.full else parse_configs(args.configs),
                                 "methods": parse_methods(args.methods), "shapes": parse_shapes(args.shapes)})


def run(options: argparse.Namespace, comm: object, say: Callable[[str], None] | None) -> ResultSet | None:
    """Collective: run the matrix; rank 0 gets the ResultSet (with the environment record)."""
    from ..core.group import MPIGroup

    group = MPIGroup(comm)
    if say:
        say(f"# configs {','.join(options.configs)}; methods {','.join(options.methods)}; "
            f"{options.case_time:g} s per case in {options.rounds} rounds")
    record = RunRecord.start(group.size, group_kind="mpi", mode=MODE, extra={"command": " ".join(sys.argv)}) \
        if group.rank == 0 else None
    t0 = time.perf_counter()
    settings = matrix_settings(options.case_time, options.rounds, quiet_waits=options.quiet_waits)
    results = run_matrix(group, options.configs, options.methods, options.shapes,
                         progress=say, settings=settings, rounds=options.rounds)
    peaks = group.gather(_peak_rss_bytes())
    if record is None or peaks is None:  # not rank 0
        return None
    wall = round(time.perf_counter() - t0, 1)
    if say:
        say(f"# done in {wall} s; peak RSS per rank (MB): "
            + ", ".join(f"{p / 1e6:.0f}" for p in peaks) + f"; sum {sum(peaks) / 1e6:.0f} MB")
    record.extend(results)
    return record.finish(peak_rss_per_rank=peaks, wall_s=wall)


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        from mpi4py import MPI
    except ImportError:
        print(f"{PROG}: mpi4py is not installed (pip install 'pytest-ipcbench[mpi]')", file=sys.stderr)
        return 2
    comm = MPI.COMM_WORLD
    rank = comm.Get_rank()
    try:
        options = checked(args)
    except ValueError as exc:
        if rank == 0:
            print(f"{PROG}: {exc}", file=sys.stderr)
        return 2
    say = (lambda line: print(line, flush=True)) if rank == 0 and not options.quiet else None
    if say:
        for line in describe(collect(comm.Get_size(), group_kind="mpi", mode=MODE)):
            say(f"# {line}")
    rs = run(options, comm, say)
    if rs is not None and options.out:
        print(f"results: {rs.save(options.out)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
