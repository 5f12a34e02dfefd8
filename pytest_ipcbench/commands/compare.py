"""``ipcbench compare BASE.json HEAD.json``: case by case, exit 1 on a confident regression."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from ..core.checks import name, number, path, text
from ..core.options import Option, add_arguments
from ..core.outdir import check_output_file, write_output
from ..core.project import declared_rules
from ..comparison.calibration_store import CACHE_TEXT, find_calibration
from ..comparison.compare import compare_sets
from ..comparison.run_sets import load_side
from ..comparison.verdict import DEFAULT_THRESHOLD, EXIT_ERROR, Decision, GateError
from ..comparison.verdict_text import format_markdown, format_table
from ..results.stats import DEFAULT_CONFIDENCE

HELP = "compare two results files case by case on a confidence interval of the ratio; exit 1 on a regression"


#: the decision's options, shared by compare and gate (core/options.py says how a table is read)
DECISION: tuple[Option, ...] = (
    Option("threshold", number(0, 10, percent=True, high_open=True), "slowdown tolerated before a case counts as "
           "slower: 0.10 or 10%% (default 0.10)", flag="--threshold", default=DEFAULT_THRESHOLD),
    Option("confidence", number(0, 1, percent=True, low_open=True, high_open=True),
           "confidence of the bootstrap interval of the ratio (default 0.95)", flag="--confidence",
           default=DEFAULT_CONFIDENCE),
    Option("metric", name, "metric to compare (default: each case's primary metric, 'completion')", flag="--metric"),
    Option("per_case", None, "take --confidence per case (default: family-wise over all cases, Bonferroni)",
           flag="--per-case", action="store_true"),
    Option("markdown", path, "also write the table as markdown to FILE", flag="--markdown", metavar="FILE"),
    Option("calibration", text, f"the between-run noise per case measured by `ipcbench calibrate` (default: the one "
           f"it stored in {CACHE_TEXT} for this machine and matrix, when there is one; 'none': no calibration, a "
           f"conservative noise is assumed)",
           flag="--calibration", metavar="FILE"),
)


def add_decision_options(parser: argparse.ArgumentParser) -> None:
    add_arguments(parser, DECISION)


def decision(args: argparse.Namespace) -> Decision:
    return Decision(args.threshold, args.confidence, args.metric, not args.per_case, args.markdown,
                    args.calibration)


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("base", help="results of the base: a results JSON (ipcbench run --out DIR writes "
                                     "DIR/results.json), or several runs: a folder of run folders or a quoted glob")
    parser.add_argument("head", help="results of the head, as base; with 5 or more runs a side, made alternately "
                                     "(base, head, base, ...), their own spread bounds each case's noise")
    parser.add_argument(
        "--paired", action="store_true",
        help="do not divide by the in-run references; files of different runs still get the between-run "
             "noise (calibrated or assumed): two runs are no paired experiment, only a gate's files are",
    )
    add_decision_options(parser)


def run(args: argparse.Namespace) -> int:
    return compare_files(args.base, args.head, decision(args), paired=True if args.paired else None)


def check_calibration_file(path: str | None) -> None:
    """A calibration file given by name must be a regular file (MalformedResults otherwise): a FIFO
    blocked the read forever, a device never ended it."""
    if path is not None and path.strip().lower() not in ("", "none", "off"):
        import json

        from ..results.results import MalformedResults, read_regular_file

        try:
            data = read_regular_file(Path(path))
        except FileNotFoundError:
            raise MalformedResults(f"--calibration: no calibration file at {path}") from None
        try:
            json.loads(data)
        except RecursionError:  # the loader would end in a traceback
            raise MalformedResults(f"{path}: not a calibration file: JSON nested too deeply") from None
        except ValueError:
            pass  # the loader names what is wrong


def compare_files(base_path: str, head_path: str, how: Decision, paired: bool | None = None) -> int:
    try:
        if how.markdown:
            check_output_file(how.markdown, "--markdown")
        base = load_side(base_path, "base")
        head = load_side(head_path, "head")
        check_calibration_file(how.calibration)
        calibration = find_calibration(how.calibration, head, base)
        rules = declared_rules()  # [tool.ipcbench] thresholds and waivers of the project here
        comparison = compare_sets(base, head, how.threshold, how.confidence, how.metric, how.family_wise, paired,
                                  calibration, rules=rules)
    except (GateError, ValueError) as exc:
        print(f"ipcbench compare: {exc}", file=sys.stderr)
        return EXIT_ERROR
    print(format_table(comparison))
    if how.markdown:
        write_output(how.markdown, format_markdown(
            comparison, f"ipcbench compare: {Path(head_path).name} vs {Path(base_path).name}"), "--markdown")
    return comparison.exit_code
