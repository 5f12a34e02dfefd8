"""``ipcbench run``: the standard matrix into a folder of results, CSV, plots and tables.

In a project whose pyproject.toml has a ``[tool.ipcbench]`` table (:mod:`..core.project`), the
table declares the matrix; every option given on the command line overrides its key.
"""

from __future__ import annotations

import argparse
from dataclasses import fields

from ..core.errors import UsageError
from ..core.options import RUN, add_arguments
from ..core.project import ProjectConfig, discover, read_config
from ..runner.job import Runner, RunOptions

HELP = "run the standard matrix and write results, CSV, plots and tables into a folder"


def configure(parser: argparse.ArgumentParser) -> None:
    lv = parser.add_mutually_exclusive_group()
    lv.add_argument("--quick", dest="level", action="store_const", const="quick",
                    help="a small matrix (within 2 minutes on 2 cores)")
    lv.add_argument("--full", dest="level", action="store_const", const="full",
                    help="the largest sizes: 602 MB arrays, 100000-entry dicts, 440 MB of MPI method data")
    parser.set_defaults(level=None)
    # None: not given, so the [tool.ipcbench] key or the default applies (core/options.py: RUN)
    add_arguments(parser, RUN)
    cfg = parser.add_mutually_exclusive_group()
    cfg.add_argument("--config", metavar="PYPROJECT",
                     help="take the matrix from this file's [tool.ipcbench] table (default: the nearest "
                          "pyproject.toml, if it has one)")
    cfg.add_argument("--no-config", action="store_true", help="ignore any [tool.ipcbench] table")


def project_config(args: argparse.Namespace) -> ProjectConfig | None:
    """The [tool.ipcbench] table that applies (``--config``, else the nearest pyproject.toml)."""
    if args.no_config:
        return None
    if args.config:
        config = read_config(args.config)
        if config is None:
            raise UsageError(f"{args.config} has no [tool.ipcbench] table")
        return config
    return discover()


def options(args: argparse.Namespace, config: ProjectConfig | None = None) -> RunOptions:
    """The typed options of a parsed command line over the project's table (ValueError on a bad value)."""
    given = {f.name: getattr(args, f.name) for f in fields(RunOptions) if getattr(args, f.name, None) is not None}
    values = {**(config.options if config is not None else {}), **given}
    try:
        return RunOptions(**values)
    except ValueError as exc:  # RunOptions only checks the values it is given: a usage error
        where = "" if config is None else (f" (the matrix declared in {config.path} [tool.ipcbench], "
                                           f"overridden by the command line)")
        raise UsageError(f"{exc}{where}") from None


def run(args: argparse.Namespace) -> int:
    config = project_config(args)
    opts = options(args, config)
    if config is not None and not opts.list:
        print(f"ipcbench run: matrix declared in {config.describe()}")
    return Runner(opts).run()
