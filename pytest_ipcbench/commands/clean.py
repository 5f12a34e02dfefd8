"""``ipcbench clean``: remove segments, LMDB folders and sockets left by dead processes."""

from __future__ import annotations

import argparse

from ..core.cleanup import clean

HELP = "remove segments, LMDB folders and sockets left by dead processes"


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--all", action="store_true", help="also remove resources of live owners")
    parser.add_argument("--dry-run", action="store_true", help="list what would be removed")


def run(args: argparse.Namespace) -> int:
    removed, reclaimed = clean(all_owners=args.all, dry_run=args.dry_run)
    verb = "would remove" if args.dry_run else "removed"
    for r in removed:
        print(f"{verb} {r.path} ({r.why})")
    for name in reclaimed:
        print(f"reclaimed shared array {name}")
    if not removed and not reclaimed:
        print("nothing of ours is left")
    return 0
