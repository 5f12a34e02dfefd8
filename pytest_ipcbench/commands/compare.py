"""``ipcbench compare BASE.json HEAD.json``: case by case; the last line and the exit code say
REGRESSION (1), INCONCLUSIVE (3, or 0 with ``--inconclusive pass``) or OK (0); errors exit 2."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from ..comparison.calibration_store import CACHE_TEXT, find_calibration
from ..comparison.compare import compare_sets
from ..comparison.run_sets import load_side
from ..comparison.verdict import DEFAULT_THRESHOLD, EXIT_ERROR, Decision, GateError, rule_callables
from ..comparison.verdict_json import write_json
from ..comparison.verdict_text import format_markdown, format_table
from ..core.checks import choice, name, number, path, text
from ..core.options import Option, add_arguments
from ..core.outdir import check_output_file, write_output
from ..core.project import declared_rules
from ..results.results import MalformedResults, read_regular_file
from ..results.stats import DEFAULT_CONFIDENCE

HELP = ("compare two results files case by case on a confidence interval of the ratio; exit 1 REGRESSION, "
        "3 INCONCLUSIVE, 0 OK")


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
    Option("json_out", path, "also write the verdicts as JSON to FILE (docs/verdicts-json.md)", flag="--json",
           metavar="FILE"),
    Option("inconclusive", choice("fail", "pass"), "the exit code when some cases could not be decided (the last "
           "line says INCONCLUSIVE): fail: 3 (default); pass: 0, the last line still says INCONCLUSIVE",
           flag="--inconclusive", default="fail"),
)


def decision(args: argparse.Namespace) -> Decision:
    return Decision(args.threshold, args.confidence, args.metric, not args.per_case, args.markdown,
                    args.calibration, str(args.json_out) if args.json_out else None, args.inconclusive == "pass")


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
    add_arguments(parser, DECISION)


def run(args: argparse.Namespace) -> int:
    return compare_files(args.base, args.head, decision(args), paired=True if args.paired else None)


def check_calibration_file(path: str | None) -> None:
    """A calibration file given by name must be a regular file (MalformedResults otherwise): a FIFO
    blocked the read forever, a device never ended it."""
    if path is not None and path.strip().lower() not in ("", "none", "off"):
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
        for given, flag in ((how.markdown, "--markdown"), (how.json, "--json")):
            if given:
                check_output_file(given, flag)
        base = load_side(base_path, "base")
        head = load_side(head_path, "head")
        check_calibration_file(how.calibration)
        calibration = find_calibration(how.calibration, head, base)
        rules = declared_rules()  # [tool.ipcbench] thresholds and waivers of the project here
        comparison = compare_sets(base, head, how.threshold, how.confidence, how.metric, how.family_wise, paired,
                                  calibration, **rule_callables(rules, how.threshold))
    except (GateError, ValueError) as exc:
        print(f"ipcbench compare: {exc}", file=sys.stderr)
        return EXIT_ERROR
    print(format_table(comparison))
    if how.markdown:
        write_output(how.markdown, format_markdown(
            comparison, f"ipcbench compare: {Path(head_path).name} vs {Path(base_path).name}"), "--markdown")
    if how.json:
        write_json(how.json, comparison, "compare", how.inconclusive_pass)
    return how.exit_code(comparison)
