"""``--describe``: an object from a sentence, for the prior alone (no sample to measure).

Phrases (case does not matter; SIZE as ``ipcbench`` reads sizes: ``4 KiB``, ``1MB``, ``100``):

* ``[DTYPE] array of SIZE`` (``float64 array of 64 MiB``; dtype float64 by default);
* ``dict|list|tuple of N [DTYPE] arrays of SIZE`` (each array SIZE);
* ``bytes of SIZE``;
* ``list|tuple of N strings of SIZE`` (each string SIZE);
* ``dict|list of N ints|floats``.

The object is built with zeros (cheap even when large), so that its features are those of the
real thing: :func:`described` returns it; a sentence none of these read raises UsageError.
"""

from __future__ import annotations

import re
from typing import Any

import numpy as np

from ..core.errors import UsageError
from ..core.units import parse_size

_SIZE = r"(?P<size>\d+(?:\.\d+)?\s*[a-z]*)"
_PHRASES = (
    ("arrays", re.compile(rf"^(?P<box>dict|list|tuple) of (?P<n>\d+) (?:(?P<dtype>\w+) )?(?:nd)?arrays? of {_SIZE}$")),
    ("array", re.compile(rf"^(?:(?P<dtype>\w+) )?(?:nd)?array of {_SIZE}$")),
    ("bytes", re.compile(rf"^bytes of {_SIZE}$")),
    ("strings", re.compile(rf"^(?P<box>list|tuple) of (?P<n>\d+) strings? of {_SIZE}$")),
    ("scalars", re.compile(r"^(?P<box>dict|list) of (?P<n>\d+) (?P<what>ints?|floats?)$")),
)
#: a described object is built in memory: larger ones are refused (their features scale anyway)
MAX_DESCRIBED = 2**30
MAX_COUNT = 10**7

HELP = ("'[DTYPE] array of SIZE', 'dict|list|tuple of N [DTYPE] arrays of SIZE', 'bytes of SIZE', "
        "'list|tuple of N strings of SIZE', 'dict|list of N ints|floats'")


def _dtype(name: str | None, text: str) -> np.dtype:
    try:
        return np.dtype(name or "float64")
    except TypeError:
        raise UsageError(f"--describe {text!r}: {name!r} is not a numpy dtype") from None


def _size(raw: str, text: str) -> int:
    try:
        return parse_size(raw.replace(" ", ""))
    except ValueError as exc:
        raise UsageError(f"--describe {text!r}: {exc}") from None


def described(text: str) -> Any:
    """The object ``text`` describes (zeros); UsageError naming the phrases when none fits."""
    said = " ".join(text.strip().lower().split())
    for name, pattern in _PHRASES:
        m = pattern.match(said)
        if not m:
            continue
        g = m.groupdict()
        n = int(g.get("n") or 1)
        size = _size(g["size"], text) if g.get("size") else 0
        if n < 1 or n > MAX_COUNT or n * max(size, 1) > MAX_DESCRIBED:
            raise UsageError(f"--describe {text!r}: at most {MAX_COUNT} items and {MAX_DESCRIBED} bytes in all")
        if name in ("array", "arrays"):
            dt = _dtype(g.get("dtype"), text)
            length = max(1, size // dt.itemsize)
            if name == "array":
                return np.zeros(length, dtype=dt)
            items = [np.zeros(length, dtype=dt) for _ in range(n)]
            return {f"a{i}": a for i, a in enumerate(items)} if g["box"] == "dict" else \
                (tuple(items) if g["box"] == "tuple" else items)
        if name == "bytes":
            return bytes(size)
        if name == "strings":
            texts = ["x" * size for _ in range(n)]
            return tuple(texts) if g["box"] == "tuple" else texts
        value: Any = 0 if g["what"].startswith("int") else 0.0
        return {f"k{i}": value for i in range(n)} if g["box"] == "dict" else [value] * n
    raise UsageError(f"--describe {text!r}: not a description this reads; say one of {HELP}")
