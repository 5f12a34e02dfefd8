"""One table per command of its options: the flags, the ``[tool.ipcbench]`` keys, the help and the check.

An :class:`Option` says once what a setting is: the typed field it fills, the one check of a
value from any source (core/checks.py; an OptionError names the value and where it was written),
its help, and where it may be given (flag, ``[tool.ipcbench]`` key, environment variable, pytest
ini key). :func:`add_arguments` and :func:`table_values` are derived from the table. :data:`RUN`
is ``ipcbench run``'s; to add an option, add one :class:`Option` and the field it fills.
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .affinity import PIN_MODES
from .checks import MAX_RANKS, Check, OptionError, boolean, choice, names, naming, seconds, sizes, text, whole
from .wait import WAITS

TABLE = "[tool.ipcbench]"


# -------------------------------------------------------------------------------------- table


@dataclass(frozen=True)
class Option:
    """One setting, said once: the field it fills, its one check, its help and where it is given."""

    field: str  # the typed options' field (RunOptions.case_timeout)
    check: Check | None  # the one check for every source; None: a flag without a value
    help: str
    flag: str | None = None  # on the command line (None: not there)
    key: str | None = None  # in [tool.ipcbench] (None: not there)
    env: str | None = None  # an environment variable (the pytest plugin's layers)
    ini: str | None = None  # a pytest ini key
    metavar: str | None = None
    action: str | None = None  # argparse action of a flag without a value (store_true, ...)
    const: Any = None
    to_field: Callable[[Any], Any] | None = None  # the key's value -> the field's (extras -> no_extras)
    group: str | None = None  # the --help section
    default: Any = None  # on the command line when not given (None: not given, a table key may apply)
    marker: bool = False  # a keyword of @pytest.mark.ipcbench too
    required: bool = False  # a flag that must be given
    nargs: str | None = None  # "+": a flag followed by one value or more

    def checked(self, raw: Any, where: str) -> Any:
        """``raw`` from ``where`` checked (OptionError naming both)."""
        assert self.check is not None, self.field
        return naming(self.check, raw, where)


def toml_text(value: Any) -> str:
    """A value as it reads in TOML (for messages): inf, nan, true, "text", [1, 2]."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return "nan" if value != value else ("inf" if value > 0 else "-inf") if math.isinf(value) else repr(value)
    if isinstance(value, str):
        return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'
    if isinstance(value, list):
        return "[" + ", ".join(toml_text(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k} = {toml_text(v)}" for k, v in value.items()) + "}"
    return repr(value)


def _argparse_type(opt: Option) -> Callable[[str], Any]:
    check = opt.check
    assert check is not None

    def convert(raw: str) -> Any:
        try:
            return check(raw, f"{opt.flag} {raw}")
        except OptionError as exc:  # argparse names the flag: exit 2 with "argument --x: ..."
            got = "" if repr(raw) in exc.problem else f", got {raw!r}"
            raise argparse.ArgumentTypeError(exc.problem + got) from None

    convert.__name__ = opt.field  # argparse's message for an error it finds itself
    return convert


def add_arguments(parser: argparse.ArgumentParser, options: Sequence[Option]) -> None:
    """Every option with a flag as an argument (dest = its field, default its ``default``); each
    value is checked as it is parsed, a bad one exits 2 naming the flag."""
    groups: dict[str, Any] = {}
    for opt in options:
        if opt.flag is None:
            continue
        where: Any = parser
        if opt.group:
            where = groups.setdefault(opt.group, parser.add_argument_group(opt.group))
        kwargs: dict[str, Any] = {"dest": opt.field, "help": opt.help, **({"required": True} if opt.required else {})}
        if opt.action is not None and opt.check is None:  # a flag without a value
            kwargs["action"] = opt.action
            if opt.action == "store_const":
                kwargs["const"] = opt.const
                kwargs["default"] = opt.default
        else:
            if opt.action is not None:  # "extend": a repeated flag adds the checked values up
                kwargs["action"] = opt.action
            kwargs["type"] = _argparse_type(opt)
            if opt.nargs:
                kwargs["nargs"] = opt.nargs
            kwargs["default"] = opt.default
            if opt.metavar:
                kwargs["metavar"] = opt.metavar
        where.add_argument(opt.flag, **kwargs)


def table_values(table: dict[str, Any], path: str | Path, options: Sequence[Option]) -> dict[str, Any]:
    """The ``[tool.ipcbench]`` keys as fields, each value checked by its option (OptionError naming
    the file and key). Unknown keys are an error listing the known ones."""
    by_key = {opt.key: opt for opt in options if opt.key}
    unknown = sorted(set(table) - set(by_key))
    if unknown:
        raise OptionError(f"{TABLE} in {path}", f"unknown key(s) {', '.join(unknown)}; known: {', '.join(by_key)}")
    out: dict[str, Any] = {}
    for key, raw in table.items():
        opt = by_key[key]
        assert opt.check is not None, key
        value = opt.check(raw, f"{TABLE} {key} = {toml_text(raw)} in {path}")
        out[opt.field] = opt.to_field(value) if opt.to_field else value
    return out


# ------------------------------------------------------------------------------ ipcbench run

LEVELS = ("quick", "default", "full")
SCENARIO_NAMES = "broadcast, pingpong, stream, granularity"
PROGRESS = ("auto", "rich", "plain", "none")

#: ``ipcbench run``: its flags and the ``[tool.ipcbench]`` keys (the fields are RunOptions').
RUN: tuple[Option, ...] = (
    Option("level", choice(*LEVELS), "quick | default | full: settings and default sizes", key="level"),
    Option("out", text, "results folder (default ipcbench-results/<timestamp>/)", flag="--out"),
    Option("ranks", whole(2, MAX_RANKS), "ranks of the broadcast and stream cases (default 4)",
           flag="--ranks", key="ranks"),
    Option("backends", names, "comma list (default: every installed backend, plugins' entry points too)",
           flag="--backends", key="backends"),
    Option("modes", names, "bytes,native (default both)", flag="--modes", key="modes"),
    Option("kinds", names, "payload kinds: dict,ndarray,array1d,ragged2d, plugins' kinds (broadcast), "
                           "buffer (ping-pong, stream), tiny (granularity)", flag="--kinds", key="kinds"),
    Option("kinds", names, "broadcast payload kinds (ping-pong, stream and granularity keep their own)",
           key="payloads"),
    Option("scenarios", names, f"comma list of {SCENARIO_NAMES.replace(' ', '')}", flag="--scenarios",
           key="scenarios"),
    Option("sizes", sizes, "override every size list, e.g. 1KB,1MB", flag="--sizes", key="sizes"),
    Option("only", names, "run the cases whose label matches (glob or substring; repeatable, or a comma "
                          "list); see --list. The extras run only when named: --only mpi-methods (MPI transfer "
                          "methods: 1D and ragged 2D int32), --only shared-arrays (shared-array experiment)",
           flag="--only", key="only", metavar="PATTERN", action="extend"),
    Option("list", None, "print the cases and exit", flag="--list", action="store_true"),
    Option("results_only", None, "write results.json and run.log only: no CSV, plots or tables (what the gate's "
                                 "rounds need)", flag="--results-only", action="store_const", const=True),
    Option("time_budget", seconds(), "seconds of timed iterations per case", flag="--time-budget",
           key="time-budget"),
    Option("case_timeout", seconds(), "seconds without progress before a job is killed", flag="--case-timeout",
           key="case-timeout"),
    Option("count", None, "count what each message costs after the timed rounds (the default; docs/counters.md)",
           flag="--count", action="store_const", const=True),
    Option("count", None, "no counting pass: no counters in the results, no counter verdicts",
           flag="--no-count", action="store_const", const=False),
    Option("count", boolean, "the counting pass after the timed rounds (default: on)", key="count"),
    Option("deep", names, "deep mode for the cases whose label matches (glob or substring, as --only; repeatable): "
                          "after the run, bytes copied (valgrind DHAT) and instructions (callgrind) per message, "
                          "every rank under valgrind (slow: minutes per case; docs/counters.md)", flag="--deep",
           key="deep", metavar="PATTERN", action="extend"),
    Option("no_mpi", None, "do not launch mpiexec (local backends only)", flag="--no-mpi", action="store_true"),
    Option("no_extras", None,
           "skip the MPI transfer methods and the shared-array experiment (the default under [tool.ipcbench])",
           flag="--no-extras", action="store_const", const=True),
    Option("no_extras", boolean,
           "the MPI transfer methods and the shared-array experiment (default: off under [tool.ipcbench])",
           key="extras", to_field=lambda extras: not extras),
    Option("mpiexec", text, "the mpiexec to launch (default: next to python, then PATH)", flag="--mpiexec"),
    Option("progress", choice(*PROGRESS), "auto | rich | plain | none (default auto)", flag="--progress"),
    Option("wait", choice(*WAITS), "how readers wait: auto (block when ranks <= cores, else backoff), block or "
                                   "backoff (default: $IPCBENCH_WAIT, else auto)", flag="--wait"),
    Option("pin", choice(*PIN_MODES), "core: each rank pinned to one CPU while a case runs, node rank i on the "
                                      "i-th allowed CPU round-robin (as mpiexec -bind-to core); none: the kernel "
                                      "places them; auto (default): core when a node's ranks outnumber its CPUs",
           flag="--pin", key="pin"),
)


__all__ = ["LEVELS", "Option", "RUN", "TABLE", "add_arguments", "table_values", "toml_text"]
