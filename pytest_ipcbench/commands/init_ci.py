"""``ipcbench init-ci``: write another project's perf-gate workflow (and, --asv, its asv suite)."""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

from ..gate.adopt import DEFAULT_PYTHON, DEFAULT_WORKFLOW, installed_spec, write_files

HELP = "write this project's GitHub perf-gate workflow (and with --asv its asv suite) for [tool.ipcbench]"


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--workflow", default=DEFAULT_WORKFLOW, metavar="PATH",
                        help=f"where to write the workflow, from the top of the repository (default {DEFAULT_WORKFLOW})")
    parser.add_argument("--install", default=None, metavar="SPEC",
                        help="what the workflow pip-installs for pytest-ipcbench (it is not on PyPI): a git URL "
                             "requirement or a wheel's path or URL (default: where this pytest-ipcbench was "
                             "installed from, when that was a git URL or a URL, pinned to its commit)")
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
    install = args.install or installed_spec()
    if install is None:
        print("ipcbench init-ci: cannot tell where CI should install pytest-ipcbench from (it is not on PyPI, and "
              "this one was installed from a local folder or file): pass --install "
              "'pytest-ipcbench[mpi] @ git+https://HOST/ACCOUNT/pytest-ipcbench@TAG' (or a wheel's URL)",
              file=sys.stderr)
        return 2
    try:
        written = write_files(top, args.workflow, install, args.python, args.asv, args.force, project_dir)
    except (FileExistsError, ValueError) as exc:
        print(f"ipcbench init-ci: {exc}", file=sys.stderr)
        return 2
    for w in written:
        print(f"wrote {w.path} ({w.what})")
    print(f"the workflow installs: {install}")
    return 0
