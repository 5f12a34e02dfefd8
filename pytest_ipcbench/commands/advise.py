"""``ipcbench advise``: which backend and mode move *your* object fastest here, measured on it.

``--sample FILE`` (a pickle, ``.npy`` or ``.npz`` of one message as it is sent) runs the race
(pytest_ipcbench/advice, docs/advise.md); ``--describe TEXT`` asks the prior alone (no measurement,
well under a second). Under ``mpiexec`` every rank runs this command: rank 0 decides and
broadcasts, every rank prints the same pick, rank 0 prints the report and writes ``--json``.
"""

from __future__ import annotations

import argparse
import os
import pickle
import sys
from pathlib import Path
from typing import Any

import numpy as np

from ..advice import advise, advise_described
from ..advice.describe import HELP as DESCRIBE_HELP
from ..advice.driver import SCENARIOS
from ..advice.prior import SHORTLIST
from ..core.errors import FileMissing, UsageError

HELP = "measure candidate backends and modes on your own object and say which to use"


def configure(parser: argparse.ArgumentParser) -> None:
    what = parser.add_mutually_exclusive_group(required=True)
    what.add_argument("--sample", metavar="FILE", help="one message as you send it: a pickle (.pkl), .npy or .npz")
    what.add_argument("--describe", metavar="TEXT", help=f"no sample: the prior's pick for {DESCRIBE_HELP}")
    parser.add_argument("--readers", type=int, default=1, help="reader processes (default 1; under mpiexec: ranks - 1)")
    parser.add_argument("--scenario", choices=SCENARIOS, default="broadcast", help="default broadcast")
    parser.add_argument("--backends", help="comma-separated backend names to consider (default: every one known, "
                        "users' entry points included)")
    parser.add_argument("--budget", type=float, default=60.0, metavar="SECONDS",
                        help="seconds for the call: start, probes, race, confirmation, counting (default 60; the last "
                        "stage may overrun it)")
    parser.add_argument("--shortlist", type=int, default=SHORTLIST, metavar="K",
                        help=f"pairs the prior lets into the race (default {SHORTLIST}; unknown backends come on top)")
    parser.add_argument("--json", metavar="FILE", help="write the decision as JSON (docs/advise.md)")


def load_sample(path: str) -> Any:
    """The object in ``path``: FileMissing or UsageError (exit 2) when it is not there or unreadable."""
    p = Path(path)
    if not p.exists():
        raise FileMissing(f"--sample {path}: no such file")
    if not p.is_file():
        raise UsageError(f"--sample {path}: not a file")
    suffix = p.suffix.lower()
    try:
        if suffix == ".npy":
            return np.load(p, allow_pickle=True)
        if suffix == ".npz":
            with np.load(p, allow_pickle=True) as z:
                return {k: z[k] for k in z.files}
        with open(p, "rb") as f:
            return pickle.load(f)
    except (OSError, ValueError, EOFError, pickle.UnpicklingError, AttributeError, ImportError, IndexError,
            TypeError) as exc:
        kind = {".npy": "an .npy file", ".npz": "an .npz file"}.get(suffix, "a pickle")
        raise UsageError(f"--sample {path}: cannot read it as {kind} ({type(exc).__name__}: {exc})") from None


def _json_target(path: str | None) -> Path | None:
    if path is None:
        return None
    target = Path(path)
    parent = target.resolve().parent
    if not parent.is_dir() or not os.access(parent, os.W_OK):
        raise UsageError(f"--json {path}: {parent} is not a writable folder")
    if target.is_dir():
        raise UsageError(f"--json {path}: is a folder")
    return target


def run(args: argparse.Namespace) -> int:
    target = _json_target(args.json)
    backends = [b.strip() for b in args.backends.split(",") if b.strip()] if args.backends else None
    if args.shortlist < 1:
        raise UsageError(f"--shortlist must be at least 1, got {args.shortlist}")
    rank, size = 0, 1
    if args.describe is not None:
        result = advise_described(args.describe, args.readers, args.scenario, backends)
    else:
        obj = load_sample(args.sample)
        label = Path(args.sample).stem or "object"
        result = advise(obj, readers=args.readers, scenario=args.scenario, backends=backends, budget=args.budget,
                        shortlist_size=args.shortlist, label=label)
        if result.environment.get("group") == "mpi":
            from mpi4py import MPI

            rank, size = MPI.COMM_WORLD.Get_rank(), MPI.COMM_WORLD.Get_size()
    if rank == 0:
        lines = result.lines()
        if target is not None:
            result.write_json(target)
            lines.append(f"decision written to {target}")
        _say("\n".join(lines))
    if size > 1:
        # one write per rank: mpiexec forwards each rank's output as it comes, so a line written
        # in pieces (text, then newline) can be split by another rank's report
        _say(f"rank {rank} of {size}: pick {result.pick}")
    return 0


def _say(text: str) -> None:
    sys.stdout.write(text + "\n")
    sys.stdout.flush()

