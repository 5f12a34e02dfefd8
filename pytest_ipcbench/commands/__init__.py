"""``ipcbench``: run | report | selfcheck | compare | gate | calibrate | comment | export | init-ci | clean | advise.

One module per command (as asv's ``commands/``), each with ``HELP``, ``configure(parser)`` and
``run(args) -> exit code``; ``run`` turns the parsed arguments into typed options and calls the
logic, which never sees argparse. This module only dispatches.
"""

from __future__ import annotations

import argparse
import importlib
import signal
import sys
from collections.abc import Sequence

from ..core import names
from ..core.errors import IpcbenchError
from ..core.nodes import check_node_env
from ..core.terminate import AsInterrupt, Terminated

#: command name -> module, in the order ``ipcbench --help`` lists them
COMMANDS = {name: name.replace("-", "_") for name in ("run", "report", "selfcheck", "compare", "gate", "calibrate",
                                                      "comment", "export", "init-ci", "clean", "advise")}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="ipcbench",
        description="IPC regression benchmarks: LMDB, shared memory, ZeroMQ, MPI, multiprocessing.",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name, module_name in COMMANDS.items():
        module = importlib.import_module(f"{__name__}.{module_name}")
        # help is %-formatted by argparse, the description is printed as written
        p = sub.add_parser(name, help=module.HELP.replace("%", "%%"), description=module.HELP)
        module.configure(p)
        p.set_defaults(_run=module.run)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = None
    # SIGTERM taken like a Ctrl-C: every command's interrupt path (its ``finally`` blocks, the MPI
    # job's process group, the gate's scratch folder) runs, instead of the default death that
    # leaves them behind; only where nobody chose otherwise, and given back at the end (main()
    # called in-process). No backstop: a command's interrupt path (an MPI job to stop) takes what it takes.
    term = AsInterrupt((signal.SIGTERM,), grace=None)
    try:
        # the commands' modules are imported here: a Ctrl-C in the first second lands in them
        args = build_parser().parse_args(argv)
        check_node_env()
        return int(args._run(args) or 0)
    except Terminated as exc:
        print("ipcbench: terminated", file=sys.stderr)
        return 128 + exc.signum
    except KeyboardInterrupt:
        print("ipcbench: interrupted", file=sys.stderr)
        return 130
    except IpcbenchError as exc:  # ours, on purpose: a message and exit 2; anything else is a bug
        print(f"ipcbench {getattr(args, 'command', '')}: {exc}", file=sys.stderr)
        return 2
    finally:
        term.restore()
        names.remove_dead_parents()  # started by a command of ours that was killed: its scratch folder


if __name__ == "__main__":
    sys.exit(main())
