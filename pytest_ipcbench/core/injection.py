"""Slowdowns injected on purpose (``$IPCBENCH_INJECT``, ``ipcbench gate --inject``): their spelling.

Core, since the gate passes them to the head's runs and the harness applies them
(harness/inject.py says how).
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass

from .envinfo import INJECT_ENV
from .errors import UsageError
from .units import format_bytes, parse_size

MAX_FACTOR = 100.0


@dataclass(frozen=True)
class Slowdown:
    """A backend's injected slowdown: ``factor`` times, on payloads of at least ``min_bytes``."""

    factor: float
    min_bytes: int = 0

    def __str__(self) -> str:
        return f"{self.factor:g}@{self.min_bytes}" if self.min_bytes else f"{self.factor:g}"

    def describe(self) -> str:
        return f"{self.factor:g}x" + (f" from {format_bytes(self.min_bytes)}" if self.min_bytes else "")


def parse_injection(text: str, what: str = INJECT_ENV) -> dict[str, Slowdown]:
    """``"shm=1.5,zmq=2@1MiB"`` -> ``{"shm": Slowdown(1.5), "zmq": Slowdown(2.0, 1048576)}``;
    ValueError naming the bad part."""
    factors: dict[str, Slowdown] = {}
    for part in (p.strip() for p in text.split(",")):
        if not part:
            continue
        name, sep, value = part.partition("=")
        name = name.strip()
        value, at, size = value.partition("@")
        try:
            factor = float(value) if sep else math.nan
            min_bytes = parse_size(size.strip()) if at else 0
        except ValueError:
            factor, min_bytes = math.nan, 0
        if not name or not math.isfinite(factor) or not 1.0 <= factor <= MAX_FACTOR:
            raise UsageError(f"bad slowdown {part!r} in {what}: expected BACKEND=FACTOR[@MINSIZE] with 1 <= FACTOR "
                             f"<= {MAX_FACTOR:g}, e.g. shm=1.5 or shm=2@1MiB")
        factors[name] = Slowdown(factor, min_bytes)
    return factors


def format_injection(factors: dict[str, Slowdown]) -> str:
    """The text :func:`parse_injection` reads back (``$IPCBENCH_INJECT``)."""
    return ",".join(f"{name}={slowdown}" for name, slowdown in factors.items())


def injected() -> dict[str, Slowdown]:
    """The slowdowns asked for in this process's environment ({} when none)."""
    text = os.environ.get(INJECT_ENV, "")
    return parse_injection(text) if text.strip() else {}


__all__ = ["MAX_FACTOR", "Slowdown", "format_injection", "injected", "parse_injection"]
