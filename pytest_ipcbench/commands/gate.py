"""``ipcbench gate --base REF``: install base and head, run them interleaved here, compare."""

from __future__ import annotations

import argparse
import math
import sys

from ..core.injection import parse_injection
from ..comparison.verdict import EXIT_ERROR, GateError
from ..gate.gate import DEFAULT_BUDGET, DEFAULT_CONFIRM_ROUNDS, DEFAULT_ROUNDS, GateOptions, run_gate
from .compare import add_decision_options, decision, parse_rounds

HELP = "install base and head, run them interleaved on this machine, compare; exit 1 on a regression"


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--base", required=True, help="git ref of the base (e.g. origin/main, HEAD~1)")
    parser.add_argument(
        "--head", default=".",
        help="git ref of the head, or a folder holding a working tree (default: the current working tree)",
    )
    parser.add_argument("--rounds", type=parse_rounds, default=DEFAULT_ROUNDS,
                        help=f"interleaved rounds of every case per side (default {DEFAULT_ROUNDS})")
    parser.add_argument("--confirm-rounds", type=int, default=DEFAULT_CONFIRM_ROUNDS,
                        help="at most this many more rounds of only the cases in doubt (any verdict but "
                             "unchanged), one at a time until none is in doubt or "
                             "the budget is spent; every verdict is taken on all of a case's rounds "
                             f"(default {DEFAULT_CONFIRM_ROUNDS}; 0: none)")
    parser.add_argument("--budget", type=parse_minutes, default=DEFAULT_BUDGET / 60, metavar="MINUTES",
                        help="no confirming round starts once the gate (installs included) has run this long or "
                             f"would pass it with one more round (default {DEFAULT_BUDGET / 60:g}); cases still in "
                             "doubt then stay inconclusive, and the report says so")
    parser.add_argument("--inject", action="append", default=[], metavar="BACKEND=FACTOR[@MINSIZE]",
                        help="slow the head's cases of BACKEND down FACTOR times on purpose (@MINSIZE: only its "
                             "payloads of at least MINSIZE, e.g. shm=2@1MiB; repeatable), to measure what the gate "
                             "can see on this machine (docs/performance-history.md)")
    parser.add_argument(
        "--run-args", default=None,
        help="arguments of each `ipcbench run` (default '--quick --ranks N', N the cores from 2 to 4, in "
             "pytest-ipcbench's repository; in another "
             "project, none: the matrix its [tool.ipcbench] declares); --out (and --config) are added by the gate",
    )
    parser.add_argument(
        "--skip-unadopted-base", action="store_true",
        help="another project: when the base has no [tool.ipcbench] table yet (it predates the adoption), "
             "exit 0 with a notice instead of 2",
    )
    parser.add_argument("--out", default=None,
                        help="report folder: base.json, head.json, compare.txt, compare.md, gate.log, rounds/ "
                             "(default CACHE/report)")
    parser.add_argument("--cache-dir", default=None,
                        help="where the gate keeps its environments (default .ipcbench-gate at the top of the repository)")
    parser.add_argument("--isolated", action="store_true",
                        help="bare environments (default: they share the gate's own packages, so both sides "
                             "run on the same numpy, mpi4py and MPI)")
    parser.add_argument("--timeout", type=float, default=1800.0,
                        help="seconds allowed to one install or one run of one side (default 1800)")
    parser.add_argument("--no-count", dest="count", action="store_false", default=True,
                        help="no counting pass (by default each side's first round counts what each message costs; "
                             "an exact counter that grew fails the gate, exit 1, whatever the times say: "
                             "docs/counters.md, 'Counter verdicts')")
    parser.add_argument("--count", dest="count", action="store_true",
                        help="the default (kept for scripts that asked for it)")
    parser.add_argument("--dry-run", action="store_true",
                        help="check the refs and the declared matrices, say what would run, install and measure nothing")
    add_decision_options(parser)


def parse_minutes(text: str) -> float:
    """A positive, finite number of minutes (argparse type)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected minutes, e.g. 7 or 2.5, got {text!r}") from None
    if not math.isfinite(value) or value <= 0:
        raise argparse.ArgumentTypeError(f"expected a positive, finite number of minutes, got {text!r}")
    return value


def run(args: argparse.Namespace) -> int:
    try:
        inject = parse_injection(",".join(args.inject), "--inject")
        from .compare import check_calibration_file

        check_calibration_file(args.calibration)  # before installing anything: a FIFO would block at the end
    except ValueError as exc:
        print(f"ipcbench gate: {exc}", file=sys.stderr)
        return EXIT_ERROR
    opts = GateOptions(inject=inject, base=args.base, head=args.head, rounds=args.rounds, confirm_rounds=args.confirm_rounds,
                       budget=args.budget * 60,
                       run_args=args.run_args, out=args.out, cache_dir=args.cache_dir, isolated=args.isolated,
                       timeout=args.timeout, decision=decision(args), skip_unadopted_base=args.skip_unadopted_base,
                       dry_run=args.dry_run, count=args.count)
    try:
        return run_gate(opts)
    except GateError as exc:
        print(f"ipcbench gate: {exc}", file=sys.stderr)
        return EXIT_ERROR
