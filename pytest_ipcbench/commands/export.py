"""``ipcbench export``: a results file in the format another tool reads (Bencher, github-action-benchmark,
pytest-benchmark)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from ..report.exports import FORMATS, export, write_export
from ..results.results import ResultSet

HELP = ("write a results file as Bencher Metric Format (bmf), github-action-benchmark's customSmallerIsBetter "
        "or pytest-benchmark JSON")


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("results", help="a results JSON file (ipcbench run, pytest --ipc-report)")
    parser.add_argument("--format", required=True, choices=list(FORMATS), help="the format to write")
    parser.add_argument("--out", metavar="FILE", help="the file to write (default: standard output)")


def run(args: argparse.Namespace) -> int:
    rs = ResultSet.load(args.results)
    if args.out:
        path = write_export(rs, args.format, Path(args.out))
        print(f"wrote {path} ({args.format})")
    else:
        sys.stdout.write(export(rs, args.format))
    return 0
