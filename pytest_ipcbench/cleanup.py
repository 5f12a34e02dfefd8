"""``ipcbench clean``: remove our OS resources left by dead processes."""

from __future__ import annotations

import argparse

from . import names


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--all", action="store_true", help="also remove resources of live owners")
    parser.add_argument("--dry-run", action="store_true", help="list what would be removed")


def run(args: argparse.Namespace) -> int:
    reclaimed: list[str] = []
    if not args.dry_run:
        try:
            from .shared import reclaim_orphans
        except ImportError:  # shared arrays are optional here
            reclaim_orphans = None
        if reclaim_orphans is not None:
            reclaimed = list(reclaim_orphans())
    # shared-array segments ("-nd") are counted by their holders: only reclaim_orphans() may
    # judge them (a dead creator does not mean nobody maps it any more)
    found = [
        item
        for item in names.find_ours()
        if (args.all or not item.alive) and not item.path.name.endswith("-nd")
    ]
    for item in found:
        state = "alive" if item.alive else "dead"
        print(f"{'would remove' if args.dry_run else 'removed'} {item.path} (owner {item.pid}, {state})")
        if not args.dry_run:
            names.remove(item.path)
    for name in reclaimed:
        print(f"reclaimed shared array {name}")
    if not found and not reclaimed:
        print("nothing of ours is left")
    return 0


COMMANDS = {"clean": ("remove segments, LMDB folders and sockets left by dead processes", configure, run)}
