"""``ipcbench clean``: remove segments, LMDB folders and sockets left by dead processes."""

from __future__ import annotations

import argparse

from ..backends.base import declared_resources
from ..core.checks import WEEK, number
from ..core.cleanup import STALE_AFTER, clean
from ..core.options import Option, add_arguments
from ..shared import reclaim_orphans

HELP = "remove segments, LMDB folders and sockets left by dead processes"


#: ``ipcbench clean``'s options (core/options.py says how a table is read)
CLEAN: tuple[Option, ...] = (
    Option("all", None, "also remove resources of live owners", flag="--all", action="store_true"),
    Option("all_users", None, "also other users' leftovers (default: only files you own)", flag="--all-users",
           action="store_true"),
    Option("min_age", number(0, WEEK), "a leftover whose owner pid is not running here must be this old (default "
           f"{STALE_AFTER:g}: the owner may live in another PID namespace)", flag="--min-age", metavar="SECONDS",
           default=STALE_AFTER),
    Option("dry_run", None, "list what would be removed", flag="--dry-run", action="store_true"),
)


def configure(parser: argparse.ArgumentParser) -> None:
    add_arguments(parser, CLEAN)


def run(args: argparse.Namespace) -> int:
    # plugin backends' own names (Backend.resources) are ours too: every backend is loaded to read them
    result = clean(all_owners=args.all, dry_run=args.dry_run, all_users=args.all_users, min_age=args.min_age,
                   patterns=declared_resources(load_all=True), reclaim=reclaim_orphans)
    verb = "would remove" if args.dry_run else "removed"
    for r in result.removed:
        print(f"{verb} {r.path} ({r.why})")
    for name in result.reclaimed:
        print(f"{'would reclaim' if args.dry_run else 'reclaimed'} shared array {name} (held by no live process)")
    for r in result.skipped:
        print(f"skipped {r.path} ({r.why})")
    if not result.removed and not result.reclaimed and not result.skipped:
        print("nothing of ours is left")
    return 0
