"""``ipcbench init-ci``: write another project's CI workflows (the perf gate, its pull request comment;
with --asv the asv history and its suite)."""

from __future__ import annotations

import argparse
from pathlib import Path

from ..core.errors import UsageError
from ..gate.adopt import DEFAULT_PYTHON, DEFAULT_WORKFLOW, installed_spec, write_files
from ..gate.gate_sides import git

HELP = ("write this project's GitHub workflows (perf gate on pull requests, its comment; with --asv the asv "
        "history and suite) for [tool.ipcbench]")


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--workflow", default=DEFAULT_WORKFLOW, metavar="PATH",
                        help=f"the gate's workflow, from the top of the repository (default {DEFAULT_WORKFLOW}); "
                             "the others are written beside it")
    parser.add_argument(
        "--no-workflow",
        action="store_true",
        help="write no workflow (with --asv: the asv files only, e.g. installing from a local checkout)",
    )
    parser.add_argument("--install", default=None, metavar="SPEC",
                        help="how CI and asv install pytest-ipcbench (it is not on PyPI): a git URL "
                             "(git+https://HOST/ACCOUNT/pytest-ipcbench@TAG), a wheel's URL or path, or a local "
                             "checkout (default: where this pytest-ipcbench was installed from, pinned to its commit)")
    parser.add_argument("--python", default=DEFAULT_PYTHON, help=f"Python of the workflows (default {DEFAULT_PYTHON})")
    parser.add_argument("--asv", action="store_true",
                        help="also write asv.conf.json, benchmarks/bench_ipcbench.py and the workflow publishing "
                             "the asv history from the default branch")
    parser.add_argument("--force", action="store_true", help="overwrite files that exist")


def run(args: argparse.Namespace) -> int:
    here = Path.cwd().resolve()
    top = Path(git(here, "rev-parse", "--show-toplevel", check=False) or here).resolve()  # else: not in git
    project_dir = here.relative_to(top).as_posix() if here != top else ""
    if not (here / "pyproject.toml").is_file():
        raise UsageError(f"no pyproject.toml in {here}: run `ipcbench init-ci` in the folder of your project's "
                         "pyproject.toml (its [tool.ipcbench] table declares what CI measures)")
    install = args.install or installed_spec()
    if install is None:
        raise UsageError("cannot tell where CI should install pytest-ipcbench from (it is not on PyPI): pass "
                         "--install with a git URL (git+https://HOST/ACCOUNT/pytest-ipcbench@TAG), a wheel or a "
                         "local checkout")
    workflow = None if args.no_workflow else args.workflow
    if workflow is None and not args.asv:
        raise UsageError("--no-workflow without --asv: nothing to write")
    written = write_files(top, workflow, install, args.python, args.asv, args.force, project_dir)
    for w in written:
        print(f"wrote {w.path} ({w.what})")
    print(f"pytest-ipcbench is installed from: {install}")
    if args.asv:
        print("asv: pip install asv virtualenv; asv machine --yes; asv run; "
              "python -m pytest_ipcbench.runner.asv_suite plot (the history with intervals)")
    return 0
