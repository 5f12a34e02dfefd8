"""``ipcbench gate --base REF``: install base and head, run them interleaved here, compare."""

from __future__ import annotations

import argparse
import sys
from dataclasses import fields

from ..comparison.verdict import EXIT_ERROR, GateError
from ..core.checks import arguments, path, seconds, text, whole
from ..core.injection import parse_injection
from ..core.options import Option, add_arguments
from ..gate.gate import DEFAULT_BUDGET, DEFAULT_CONFIRM_ROUNDS, DEFAULT_ROUNDS, GateOptions, run_gate
from .compare import DECISION, check_calibration_file, decision

HELP = "install base and head, run them interleaved on this machine, compare; exit 1 on a regression"


#: ``ipcbench gate``'s options (core/options.py says how a table is read), then the decision's (compare's)
GATE: tuple[Option, ...] = (
    Option("base", text, "git ref of the base (e.g. origin/main, HEAD~1)", flag="--base", required=True),
    Option("head", text, "git ref of the head, or a folder holding a working tree (default: the current working tree)",
           flag="--head", default="."),
    Option("rounds", whole(1, 10_000), "interleaved rounds per side: every case in the first, and in the others "
           f"while the budget allows one more of them, else the cases in doubt (default {DEFAULT_ROUNDS})",
           flag="--rounds", default=DEFAULT_ROUNDS),
    Option("confirm_rounds", whole(0, 10_000), "at most this many more rounds of only the cases in doubt (any verdict "
           "but unchanged), one at a time until none is in doubt or the budget is spent; every verdict is taken on all "
           f"of a case's rounds (default {DEFAULT_CONFIRM_ROUNDS}; 0: none)", flag="--confirm-rounds",
           default=DEFAULT_CONFIRM_ROUNDS),
    Option("budget", seconds(unit=60), "no confirming round starts once the gate (installs included) has run this long "
           f"or would pass it with one more round (default {DEFAULT_BUDGET / 60:g}); cases still in doubt then stay "
           "inconclusive, and the report says so", flag="--budget", metavar="MINUTES", default=DEFAULT_BUDGET),
    Option("inject", text, "slow the head's cases of BACKEND down FACTOR times on purpose (@MINSIZE: only its payloads "
           "of at least MINSIZE, e.g. shm=2@1MiB; repeatable), to measure what the gate can see on this machine "
           "(docs/performance-history.md)", flag="--inject", action="append", default=[],
           metavar="BACKEND=FACTOR[@MINSIZE]"),
    Option("run_args", arguments, "arguments of each `ipcbench run` (default '--quick --ranks N', N the cores "
           "from 2 to 4, in pytest-ipcbench's repository; in another project, none: the matrix its [tool.ipcbench] "
           "declares); --out "
           "(and --config) are added by the gate", flag="--run-args"),
    Option("skip_unadopted_base", None, "another project: when the base has no [tool.ipcbench] table yet (it predates "
           "the adoption), exit 0 with a notice instead of 2", flag="--skip-unadopted-base", action="store_true"),
    Option("out", path, "report folder: base.json, head.json, compare.txt, compare.md, gate.log, rounds/ (default "
           "CACHE/report); an existing folder must be empty or a gate's report", flag="--out"),
    Option("cache_dir", path, "where the gate keeps its environments (default .ipcbench-gate at the top of the "
           "repository)", flag="--cache-dir"),
    Option("isolated", None, "bare environments (default: they share the gate's own packages, so both sides run on the "
           "same numpy, mpi4py and MPI)", flag="--isolated", action="store_true"),
    Option("timeout", seconds(), "seconds allowed to one install or one run of one side (default 1800)",
           flag="--timeout", default=1800.0),
    Option("count", None, "no counting pass (by default each side's first round counts what each message costs; an "
           "exact counter that grew fails the gate, exit 1, whatever the times say: docs/counters.md, 'Counter "
           "verdicts')", flag="--no-count", action="store_const", const=False, default=True),
    Option("count", None, "the default (kept for scripts that asked for it)", flag="--count", action="store_const",
           const=True, default=True),
    Option("dry_run", None, "check the refs and the declared matrices, say what would run, install and measure nothing",
           flag="--dry-run", action="store_true"),
)


def configure(parser: argparse.ArgumentParser) -> None:
    add_arguments(parser, GATE)
    add_arguments(parser, DECISION)


def run(args: argparse.Namespace) -> int:
    try:
        inject = parse_injection(",".join(args.inject), "--inject")
        check_calibration_file(args.calibration)  # before installing anything: a FIFO would block at the end
    except ValueError as exc:
        print(f"ipcbench gate: {exc}", file=sys.stderr)
        return EXIT_ERROR
    given = {f.name: getattr(args, f.name) for f in fields(GateOptions) if f.name not in ("inject", "decision")}
    opts = GateOptions(inject=inject, decision=decision(args), **given)
    try:
        return run_gate(opts)
    except GateError as exc:
        print(f"ipcbench gate: {exc}", file=sys.stderr)
        return EXIT_ERROR
