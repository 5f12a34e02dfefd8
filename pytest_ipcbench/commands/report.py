"""``ipcbench report``: CSV, PNG plots and markdown tables from a results file."""

from __future__ import annotations

import argparse
from pathlib import Path

from ..core.outdir import FolderLock, check_folder
from ..report import headline, write_report
from ..results.results import ResultSet

HELP = "write CSV, PNG plots and markdown tables from a results JSON file"


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("results", help="a results JSON file (ipcbench run, pytest --ipc-report)")
    parser.add_argument("--out", help="folder for the report (default: beside the results file)")
    parser.add_argument("--no-plots", action="store_true", help="tables and CSV only (no matplotlib)")


def run(args: argparse.Namespace) -> int:
    return report(args.results, args.out, plots=not args.no_plots)


def report(results: str, out: str | None = None, plots: bool = True) -> int:
    rs = ResultSet.load(results)
    # checked first (a folder, the caller's, writable): a clear error, never a traceback or a
    # write through another user's symlink
    folder = check_folder(Path(out) if out else Path(results).resolve().parent)
    # locked as `ipcbench run` locks its --out: two writers of one folder would mix or lose files
    lock = FolderLock(folder)
    try:
        summary = write_report(rs, folder, plots=plots)
    finally:
        lock.release()
    print(headline(rs.results) or "(no broadcast or ping-pong results)")
    print(f"\nreport: {summary}")
    return 0
