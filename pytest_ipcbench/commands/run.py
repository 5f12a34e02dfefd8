"""``ipcbench run``: the standard matrix into a folder of results, CSV, plots and tables.

In a project whose pyproject.toml has a ``[tool.ipcbench]`` table (:mod:`..core.project`), the
table declares the matrix; every option given on the command line overrides its key.
"""

from __future__ import annotations

import argparse
from dataclasses import fields

from ..backends.base import WAITS
from ..core.units import parse_size
from ..harness.measure import SCENARIOS
from ..core.project import ProjectConfig, discover, read_config
from ..runner.job import RunOptions, Runner

HELP = "run the standard matrix and write results, CSV, plots and tables into a folder"


def _csv(value: str) -> list[str]:
    return [v.strip() for v in value.split(",") if v.strip()]


def _sizes(value: str) -> list[int]:
    return [parse_size(v) for v in _csv(value)]


def _seconds(value: str) -> float:
    """Seconds, finite and at most a week (``inf`` would overflow every wait); 0: the default."""
    try:
        seconds = float(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"bad number of seconds {value!r} (e.g. 90)") from None
    if not 0 <= seconds <= 7 * 86400:
        raise argparse.ArgumentTypeError(f"bad number of seconds {value!r} (0 for the default, at most a week: 604800)")
    return seconds


def configure(parser: argparse.ArgumentParser) -> None:
    lv = parser.add_mutually_exclusive_group()
    lv.add_argument("--quick", dest="level", action="store_const", const="quick",
                    help="a small matrix (within 2 minutes on 2 cores)")
    lv.add_argument("--full", dest="level", action="store_const", const="full",
                    help="the seeds' sizes: 602 MB arrays, 100000-entry dicts, 440 MB seed-004 data")
    parser.set_defaults(level=None)  # None here and below: not given, [tool.ipcbench] or the default applies
    parser.add_argument("--out", help="results folder (default ipcbench-results/<timestamp>/)")
    parser.add_argument("--ranks", type=int, default=None, help="ranks of the broadcast and stream cases (default 4)")
    parser.add_argument("--backends", type=_csv, default=None,
                        help="comma list (default: every installed backend, plugins' entry points too)")
    parser.add_argument("--modes", type=_csv, default=None, help="bytes,native (default both)")
    parser.add_argument("--kinds", type=_csv, default=None,
                        help="payload kinds: dict,ndarray,array1d,ragged2d, plugins' kinds (broadcast), "
                             "buffer (ping-pong, stream), tiny (granularity)")
    parser.add_argument("--scenarios", type=_csv, default=None, help=f"comma list of {','.join(SCENARIOS)}")
    parser.add_argument("--sizes", type=_sizes, default=None, help="override every size list, e.g. 1KB,1MB")
    parser.add_argument("--only", action="append", default=None, metavar="PATTERN",
                        help="run the cases whose label matches (glob or substring; repeatable); see --list. The "
                             "extras run only when named: --only seed004 (seed 004's MPI methods), --only seed002")
    parser.add_argument("--list", action="store_true", help="print the cases and exit")
    parser.add_argument("--results-only", action="store_const", const=True, default=None,
                        help="write results.json and run.log only: no CSV, plots or tables (what the gate's rounds need)")
    parser.add_argument("--time-budget", type=_seconds, default=None, help="seconds of timed iterations per case")
    parser.add_argument("--case-timeout", type=_seconds, default=None, help="seconds without progress before a job is killed")
    parser.add_argument("--count", dest="count", action="store_const", const=True, default=None,
                        help="count what each message costs after the timed rounds (off by default: it adds 60-130%% to the wall time)")
    parser.add_argument("--no-count", dest="count", action="store_const", const=False,
                        help="no counting pass (the default)")
    parser.add_argument("--no-mpi", action="store_true", help="do not launch mpiexec (local backends only)")
    parser.add_argument("--no-extras", action="store_const", const=True, default=None,
                        help="skip seed 004's MPI methods and seed 002 (the default under [tool.ipcbench])")
    parser.add_argument("--mpiexec", help="the mpiexec to launch (default: next to python, then PATH)")
    parser.add_argument("--progress", choices=("auto", "rich", "plain", "none"), default="auto")
    parser.add_argument("--wait", choices=WAITS, default=None,
                        help="how readers wait: auto (block when ranks <= cores, else backoff), block or backoff "
                             "(default: $IPCBENCH_WAIT, else auto)")
    cfg = parser.add_mutually_exclusive_group()
    cfg.add_argument("--config", metavar="PYPROJECT",
                     help="take the matrix from this file's [tool.ipcbench] table (default: the nearest "
                          "pyproject.toml, if it has one)")
    cfg.add_argument("--no-config", action="store_true", help="ignore any [tool.ipcbench] table")


def project_config(args: argparse.Namespace) -> ProjectConfig | None:
    """The [tool.ipcbench] table that applies (``--config``, else the nearest pyproject.toml)."""
    if getattr(args, "no_config", False):
        return None
    path = getattr(args, "config", None)
    if path:
        config = read_config(path)
        if config is None:
            raise ValueError(f"{path} has no [tool.ipcbench] table")
        return config
    return discover()


def options(args: argparse.Namespace, config: ProjectConfig | None = None) -> RunOptions:
    """The typed options of a parsed command line over the project's table (ValueError on a bad value)."""
    given = {f.name: getattr(args, f.name) for f in fields(RunOptions) if getattr(args, f.name, None) is not None}
    values = {**(config.options if config is not None else {}), **given}
    try:
        return RunOptions(**values)
    except ValueError as exc:
        if config is not None:
            raise ValueError(f"{exc} (the matrix declared in {config.path} [tool.ipcbench], "
                             f"overridden by the command line)") from None
        raise


def run(args: argparse.Namespace) -> int:
    config = project_config(args)
    opts = options(args, config)
    if config is not None and not opts.list:
        print(f"ipcbench run: matrix declared in {config.describe()}")
    return Runner(opts).run()
