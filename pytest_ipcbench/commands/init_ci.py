"""``ipcbench init-ci``: write another project's perf-gate workflow (and, --asv, its asv suite)."""

from __future__ import annotations

import argparse
import subprocess
from pathlib import Path

from ..history.adopt import DEFAULT_INSTALL, DEFAULT_PYTHON, DEFAULT_WORKFLOW, write_files

HELP = "write this project's GitHub perf-gate workflow (and with --asv its asv suite) for [tool.ipcbench]"


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--workflow", default=DEFAULT_WORKFLOW, metavar="PATH",
                        help=f"where to write the workflow, from the top of the repository (default {DEFAULT_WORKFLOW})")
    parser.add_argument("--install", default=DEFAULT_INSTALL, metavar="SPEC",
                        help="what the workflow pip-installs for pytest-ipcbench (it is not on PyPI): a git URL "
                             f"requirement or a wheel's path or URL (default {DEFAULT_INSTALL!r}; put the real "
                             "owner, and @TAG to pin it)")
    parser.add_argument("--python", default=DEFAULT_PYTHON, help=f"Python of the workflow (default {DEFAULT_PYTHON})")
    parser.add_argument("--asv", action="store_true",
                        help="also write asv.conf.json and benchmarks/bench_ipcbench.py (the declared matrix over commits)")
    parser.add_argument("--force", action="store_true", help="overwrite files that exist")


def _top(start: Path) -> Path:
    proc = subprocess.run(["git", "-C", str(start), "rev-parse", "--show-toplevel"], capture_output=True, text=True)
    return Path(proc.stdout.strip()) if proc.returncode == 0 else start


def run(args: argparse.Namespace) -> int:
    here = Path.cwd().resolve()
    top = _top(here).resolve()
    project_dir = here.relative_to(top).as_posix() if here != top else ""
    try:
        written = write_files(top, args.workflow, args.install, args.python, args.asv, args.force, project_dir)
    except FileExistsError as exc:
        print(f"ipcbench init-ci: {exc}")
        return 2
    for w in written:
        print(f"wrote {w.path} ({w.what})")
    if "OWNER" in args.install:
        print("note: the workflow installs pytest-ipcbench from a placeholder URL; pass --install with the real "
              "git URL (or a wheel) or edit IPCBENCH_INSTALL in the workflow")
    return 0
