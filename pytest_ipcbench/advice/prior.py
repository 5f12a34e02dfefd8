"""The prior: which (backend, mode) pairs are worth racing for an object with these features.

A small table that orders the candidates, never the decision: the race measures the first
:data:`SHORTLIST` (advice/race.py). Rows are keyed by size class (:func:`size_class`) and make-up
(:func:`makeup`); each ranks the built-in pairs. Source, printed with every advice: ``prior.json``
beside this module when it exists (``tools/advise_eval.py --fit``, docs/advise.md), else
:data:`DEFAULT_ORDER`. A pair the table does not name (a user's backend) is always shortlisted.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

from .features import Features

#: pairs raced at most from the table (the unknown ones come on top)
SHORTLIST = 4
#: where the fitted table lives (tools/advise_eval.py --fit writes it)
TABLE_FILE = Path(__file__).with_name("prior.json")

SIZE_CLASSES = ((4 * 1024, "tiny"), (256 * 1024, "small"), (16 * 2**20, "medium"), (float("inf"), "large"))


def size_class(f: Features) -> str:
    return next(name for limit, name in SIZE_CLASSES if f.total_bytes < limit)


def makeup(f: Features) -> str:
    """``buffers`` (out-of-band buffers carry most bytes, few Python objects), ``objects`` (the
    pickle walks many objects or carries most bytes in band), else ``mixed``."""
    share = f.oob_bytes / f.total_bytes if f.total_bytes else 0.0
    if share >= 0.8 and f.python_objects <= 64:
        return "buffers"
    if share < 0.2 or f.python_objects > 1024:
        return "objects"
    return "mixed"


def bucket(f: Features) -> str:
    return f"{size_class(f)}/{makeup(f)}"


#: Before a fit (or for a row the fit had no case of): the order the mechanisms suggest. Out-of-band
#: buffers favour the native modes (no pickle copy of the bytes); many small objects favour the
#: bytes modes (one pickle either way, and the plainer path); tiny messages favour the fewest
#: system calls per message.
DEFAULT_ORDER: dict[str, list[str]] = {
    "buffers": ["shm/native", "lmdb/native", "zmq/native", "shm/bytes", "mp-queue/native", "zmq/bytes",
                "lmdb/bytes", "mp-queue/bytes"],
    "mixed": ["shm/native", "zmq/native", "shm/bytes", "lmdb/native", "zmq/bytes", "mp-queue/native",
              "lmdb/bytes", "mp-queue/bytes"],
    "objects": ["shm/bytes", "shm/native", "zmq/bytes", "lmdb/bytes", "mp-queue/native", "zmq/native",
                "lmdb/native", "mp-queue/bytes"],
}
TINY_ORDER = ["shm/bytes", "shm/native", "zmq/bytes", "mp-queue/native", "zmq/native", "lmdb/bytes",
              "mp-queue/bytes", "lmdb/native"]


def load_table(path: Path = TABLE_FILE) -> dict[str, list[str]]:
    """The fitted rows ({} when there is no fit)."""
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        return {}
    return {str(k): [str(x) for x in v] for k, v in data.get("rows", {}).items()}


def source(path: Path = TABLE_FILE) -> str:
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        return "no fit: the mechanisms' order (advice/prior.py DEFAULT_ORDER)"
    return str(data.get("source", path.name))


def _row(f: Features, table: dict[str, list[str]] | None) -> list[str]:
    """The pairs in the prior's order for ``f``: the fitted row, else the default order."""
    table = load_table() if table is None else table
    return table.get(bucket(f)) or (TINY_ORDER if size_class(f) == "tiny" else DEFAULT_ORDER[makeup(f)])


def ranked(f: Features, candidates: Sequence[str], table: dict[str, list[str]] | None = None) -> list[str]:
    """``candidates`` ("backend/mode") in the prior's order for ``f``: the fitted row, else the
    default order; pairs neither names keep their given order after the named ones."""
    position = {name: i for i, name in enumerate(_row(f, table))}
    known = sorted((c for c in candidates if c in position), key=lambda c: position[c])
    return known + [c for c in candidates if c not in position]


def shortlist(f: Features, candidates: Sequence[str], size: int = SHORTLIST,
              table: dict[str, list[str]] | None = None) -> tuple[list[str], list[str]]:
    """(raced, left out): the first ``size`` of the ranked pairs the table names, plus every pair it
    does not name (a user's backend is always measured)."""
    table = load_table() if table is None else table
    order = ranked(f, candidates, table)
    row = set(_row(f, table))
    named = [c for c in order if c in row]
    unknown = [c for c in order if c not in row]
    raced = named[:size] + unknown
    return raced, [c for c in order if c not in raced]
