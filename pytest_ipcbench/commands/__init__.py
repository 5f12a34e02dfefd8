"""``ipcbench``: run | report | selfcheck | compare | gate | clean.

Each command lives in the module of its concern, which exposes ``COMMANDS``: a dict of
``name -> (help, configure(parser), run(args) -> exit code)``. This module only dispatches.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from typing import Any, Callable, Sequence

Command = tuple[str, Callable[[argparse.ArgumentParser], None], Callable[[argparse.Namespace], int]]

# modules that define commands, in the order their commands are listed
COMMAND_MODULES = (
    "pytest_ipcbench.runner.job",
    "pytest_ipcbench.report.tables",
    "pytest_ipcbench.harness.selfcheck",
    "pytest_ipcbench.history.gate",
    "pytest_ipcbench.core.cleanup",
)


def _commands() -> dict[str, Command]:
    found: dict[str, Command] = {}
    for name in COMMAND_MODULES:
        module: Any = importlib.import_module(name)
        found.update(module.COMMANDS)
    return found


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="ipcbench",
        description="IPC regression benchmarks: LMDB, shared memory, ZeroMQ, MPI, multiprocessing.",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name, (help_text, configure, run) in _commands().items():
        p = sub.add_parser(name, help=help_text, description=help_text)
        configure(p)
        p.set_defaults(_run=run)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return int(args._run(args) or 0)
    except KeyboardInterrupt:
        print("ipcbench: interrupted", file=sys.stderr)
        return 130
    except (ValueError, FileNotFoundError) as exc:
        print(f"ipcbench {args.command}: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
