"""``ipcbench calibrate``: how much identical code moves on this runner, per case group.

A/A runs of the code at hand (or ``--from`` their results files) give every case's between-run
noise: printed per group with what compare and the gate can detect, and stored where they find it
for this machine and matrix (:mod:`~pytest_ipcbench.comparison.calibration_store`).
"""

from __future__ import annotations

import argparse
import math
import shlex
import sys
from pathlib import Path

from ..comparison import calibration as cal, calibration_store as store, calibration_summary as tell
from ..comparison.run_sets import load_results
from ..comparison.verdict import DEFAULT_THRESHOLD, GateError
from ..core import names
from ..core.checks import arguments, path, seconds, text, whole
from ..core.options import Option, add_arguments
from ..core.outdir import check_output_file, write_text
from ..core.project import find_pyproject
from ..core.units import format_percent, format_ratio
from ..gate.gate import DEFAULT_CONFIRM_ROUNDS, DEFAULT_ROUNDS, default_run_args
from ..report.calibration import plot_calibration
from ..report.common import table
from ..results.stats import DEFAULT_CONFIDENCE
from .compare import DECISION

HELP = "run identical code repeatedly (A/A) and measure each case's noise; write the file compare and gate read"
DEFAULT_BUDGET = 240.0


#: ``ipcbench calibrate``'s options (core/options.py says how a table is read)
CALIBRATE: tuple[Option, ...] = (
    Option("budget", seconds(86400), f"seconds to spend on A/A runs (default {DEFAULT_BUDGET:g}; at least 3 runs are "
           "made)", flag="--budget", default=DEFAULT_BUDGET),
    Option("runs", whole(3, 10_000), "exactly this many A/A runs (>= 3), whatever the budget", flag="--runs"),
    Option("run_args", arguments, "arguments of each `ipcbench run` (default: the gate's: '--quick --ranks N' here, "
           "the declared [tool.ipcbench] matrix in another project)", flag="--run-args"),
    Option("from_files", text, "calibrate from these results files of runs of identical code (>= 3) instead of running",
           flag="--from", nargs="+", metavar="RESULTS"),
    Option("out", path, "also write the calibration to this file (it is always stored in the per-user cache, "
           f"{store.CACHE_TEXT}, where compare and the gate find it for this machine and matrix)", flag="--out"),
    Option("threshold", DECISION[0].check,
           "the threshold the false-alarm rates are given at (default 0.10, the gate's)",
           flag="--threshold", default=DEFAULT_THRESHOLD),
    Option("markdown", path, "also write the table as markdown to FILE", flag="--markdown", metavar="FILE"),
    Option("plot", text, "the plot of each case's noise and what compare and the gate can detect (default: beside "
           "--out, else beside the stored calibration, with .png; 'none': no plot)", flag="--plot", metavar="FILE"),
)


def configure(parser: argparse.ArgumentParser) -> None:
    add_arguments(parser, CALIBRATE)


def _gate_run_args() -> str:
    """The gate's default matrix: ours in pytest-ipcbench's repository, the declared one elsewhere."""
    pyproject = find_pyproject(Path.cwd())
    if pyproject is not None:
        text = pyproject.read_text(errors="replace")
        if "[tool.ipcbench]" in text and 'name = "pytest-ipcbench"' not in text:
            return ""
    return default_run_args()


def run(args: argparse.Namespace) -> int:
    try:
        # every output checked before the A/A runs (an hour's work lost to a FIFO or a full disk)
        out = check_output_file(args.out, "--out") if args.out else None
        markdown = check_output_file(args.markdown, "--markdown") if args.markdown else None
        plot = None if args.plot == "none" or not (args.plot or out) else \
            check_output_file(args.plot or out.with_suffix(".png"), "--plot")  # type: ignore[union-attr]
        if args.from_files:
            sets = [load_results(path, f"run {i + 1}") for i, path in enumerate(args.from_files)]
            loads = [x for rs in sets for x in (rs.env.get("load_start"), rs.env.get("load_end"))
                     if isinstance(x, (int, float))]
            run_text = "(from files)"
        else:
            run_text = args.run_args if args.run_args is not None else _gate_run_args()
            scratch = names.private_dir("calibrate")
            try:
                print(f"[calibrate] runs of identical code (A/A): `ipcbench run {run_text}` within {args.budget:g} s",
                      flush=True)
                run_args = shlex.split(run_text)
                if not {"--count", "--no-count"} & set(run_args):  # A/A runs measure time: no counting pass
                    run_args.append("--no-count")  # (as the gate's rounds after each side's first)
                sets, loads = tell.measure_runs(run_args, args.budget, scratch, args.runs)
            finally:
                names.remove(scratch)
        env = {"run_args": run_text, "load": [min(loads), max(loads)] if loads else None,
               "cores": sets[0].env.get("cores"), "host": sets[0].env.get("host") or sets[0].env.get("hostname")}
        calibration = cal.calibrate_sets(sets, args.threshold, env)
        calibration.held_out = tell.held_out_false(sets, args.threshold, _z(calibration))
        path = store.save(calibration, sets)
        if out is not None:
            cal.Calibration.load(path).save(out)
    except (GateError, ValueError) as exc:
        print(f"ipcbench calibrate: {exc}", file=sys.stderr)
        return 2
    if plot is None and args.plot != "none":
        plot = path.with_suffix(".png")  # beside the stored calibration, in the user's own folder
    text = format_calibration(calibration, args.threshold)
    print(text)
    print(f"[calibrate] stored: {path} (found by `ipcbench compare` and `ipcbench gate` on this machine "
          f"({calibration.env.get('machine')}) for this matrix ({calibration.env.get('matrix_cases')} cases))")
    if out is not None:
        print(f"[calibrate] copy written: {out}")
    if markdown:
        write_text(markdown, text + "\n", "--markdown")
    if plot:
        rounds = DEFAULT_ROUNDS + DEFAULT_CONFIRM_ROUNDS
        summaries = tell.summarise(calibration, args.threshold, rounds, _z(calibration),
                                   z_rounds=_z(calibration, tell.JUDGEMENTS))
        drawn = plot_calibration(calibration, summaries, rounds, plot)
        print(f"[calibrate] plot: {drawn}" if drawn else "[calibrate] no plot (matplotlib is not installed)")
    return 0


def _z(calibration: cal.Calibration, tests: int = 1) -> float:
    """The normal quantile of each case's family-wise share of the default confidence (``tests``:
    the ways each case is judged; a gate's rounds two, :data:`~..comparison.calibration_summary.JUDGEMENTS`)."""
    return tell.decision_z(DEFAULT_CONFIDENCE, len(calibration.cases), tests=tests)


def format_calibration(calibration: cal.Calibration, threshold: float,
                       rounds: int = DEFAULT_ROUNDS + DEFAULT_CONFIRM_ROUNDS) -> str:
    """The calibration's table: per group of cases, its noise, false alarms and detectable change."""
    per_case = 1 - (1 - DEFAULT_CONFIDENCE) / max(1, len(calibration.cases))
    z = _z(calibration)
    rows = []
    for g in tell.summarise(calibration, threshold, rounds, z, z_rounds=_z(calibration, tell.JUDGEMENTS)):
        held = calibration.held_out.get(g.group)
        rows.append([
            g.group, g.cases,
            f"±{format_percent(math.exp(g.sigma_median) - 1)} (max ±{format_percent(math.exp(g.sigma_max) - 1)})",
            f"{format_percent(g.bare_predicted)} / {format_percent(g.bare_observed)} of {g.pairs}",
            format_ratio(g.tail),
            f"≤ {g.verdict_promised:.1e} / " + (f"{held[0] / held[1]:.1e} ({held[0]:.0f} of {held[1]:.0f})"
                                                 if held and held[1] else "not checked (< 5 runs)"),
            format_ratio(g.detect_runs), format_ratio(g.detect_gate),
            "-" if g.rounds_needed is None else str(g.rounds_needed),
        ])
    header = ["group", "cases", "noise, median case (1 sd)", f"bare ±{threshold:.0%}: predicted / observed",
              "largest A/A jump", "compare: false verdicts per case, promised / held-out", "detects, 2 runs",
              f"detects, gate {rounds} rounds", "rounds for 1.5x"]
    intro = (f"{calibration.describe()}; `ipcbench run {calibration.env.get('run_args', '')}`.\n"
             f"noise: head/base of two single runs of identical code (log-scale sd, normalised by the in-run "
             f"references); 'A/A': two runs of identical code, so any change they show is noise; "
             f"'bare': the share of A/A pairs a bare ±{threshold:.0%} threshold on one ratio would call "
             f"changed; 'largest A/A jump': the most any case of the group moved between two consecutive runs; "
             f"compare calls a case of two runs slower or faster only past ±{threshold:.0%} beyond it (and beyond "
             f"its own noise at {_pct(per_case)} per case, {len(calibration.cases)} cases, 95% family-wise); "
             f"'compare: false verdicts': what that promises per case whatever the noise's distribution (a new A/A "
             f"pair passes the largest of n with a chance of at most 1 / (n + 1)), and what was observed on A/A "
             f"pairs of runs the calibration was made without ('held-out'); 'detects': the smallest slowdown "
             f"decided as slower (median case; a gate's rounds judged by their medians and their fast tails "
             f"(10% quantiles, which other jobs reach least), each at half the error rate)")
    note = calibration.held_out_note()
    return (intro + "\n\n" + table(header, rows, "l" + "r" * (len(header) - 1))
            + (f"\n\nwarning: {note}" if note else ""))


def _pct(x: float) -> str:
    return f"{float(f'{x * 100:.4g}'):g}%"
