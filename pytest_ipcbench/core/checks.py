"""One check per kind of value (sizes, counts, durations, ratios, names, paths, choices), for every
source: a command-line flag, an environment variable, a pytest ini key, a ``[tool.ipcbench]`` key, a
marker's keyword. A :data:`Check` takes the value and where it came from and returns the typed value,
or raises :class:`OptionError` naming both. The option tables (core/options.py) say which check each
option uses.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from .errors import UsageError
from .units import parse_size

WEEK = 7 * 86400.0  # the longest wait we accept: longer is a typo, and inf overflows the OS's waits
MAX_RANKS = 256  # ranks on one machine: more is a typo (and runs out of file descriptors)

class OptionError(UsageError):
    """A bad option value: ``source`` (where it was written, with the value) and ``problem``."""

    def __init__(self, source: str, problem: str) -> None:
        self.source = source
        self.problem = problem
        super().__init__(f"{source}: {problem}")


#: value (a string from a command line or the environment, or a TOML value), where -> typed value
Check = Callable[[Any, str], Any]


# ------------------------------------------------------------------------------------- checks
# One check per kind of value, for every source (flag, environment, ini, [tool.ipcbench], marker).


def naming(check: Check, value: Any, where: str) -> Any:
    """``check(value, where)``; its error names the value as given when it does not already."""
    try:
        return check(value, where)
    except OptionError as exc:
        if repr(value) in exc.problem or (isinstance(value, str) and repr(value.strip()) in exc.problem):
            raise
        raise OptionError(exc.source, f"{exc.problem} (got {value!r})") from None


def _word(value: Any, where: str, problem: str) -> str:
    """A value as stripped text; only ASCII (Python reads "１０" and "٣" as numbers: a lookalike
    pasted from elsewhere is refused, not taken for what it resembles)."""
    word = str(value).strip()
    if not word.isascii():
        raise OptionError(where, f"{problem}; got {word!r}, which holds characters other than ASCII")
    return word


def _number(value: Any, where: str, problem: str) -> float:
    if isinstance(value, bool):
        raise OptionError(where, problem)
    word = value if isinstance(value, (int, float)) else _word(value, where, problem)
    try:
        return float(word)  # a TOML integer of 400 digits: OverflowError; it is out of every range anyway
    except (ValueError, OverflowError):
        raise OptionError(where, problem) from None


def seconds(most: float = WEEK, unit: float = 1.0) -> Check:
    """A finite number of seconds above 0 (a trailing ``s`` allowed), at most ``most``; with ``unit``
    60, minutes given, seconds returned."""
    what = "seconds" if unit == 1 else "minutes"
    problem = f"must be a finite number of {what} > 0, at most {most / unit:g}{' (a week)' if most == WEEK else ''}"

    def check(value: Any, where: str) -> float:
        x = _number(value.strip().removesuffix("s") if isinstance(value, str) and unit == 1 else value, where, problem)
        if not (math.isfinite(x) and 0 < x * unit <= most):
            raise OptionError(where, problem)
        return x * unit

    return check


def number(low: float, high: float, percent: bool = False, low_open: bool = False, high_open: bool = False) -> Check:
    """A finite number from ``low`` to ``high`` (either end excluded when ``*_open``); with
    ``percent``, ``10%`` is 0.10."""
    problem = (f"must be a number {'above' if low_open else 'from'} {low:g} {'and below' if high_open else 'to'} "
               f"{high:g}" + (", e.g. 0.10 or 10%" if percent else ""))

    def check(value: Any, where: str) -> float:
        scale = 1.0
        if percent and isinstance(value, str) and value.strip().endswith("%"):
            value, scale = value.strip()[:-1], 0.01
        x = _number(value, where, problem) * scale
        if not (math.isfinite(x) and low <= x <= high) or (high_open and x == high) or (low_open and x == low):
            raise OptionError(where, problem)
        return x

    return check


def whole(low: int, high: int) -> Check:
    """A whole number from ``low`` to ``high``."""
    problem = f"must be a whole number from {low} to {high}"

    def check(value: Any, where: str) -> int:
        if isinstance(value, (bool, float)):
            raise OptionError(where, problem)
        word = value if isinstance(value, int) else _word(value, where, problem)
        try:
            n = int(word)
        except ValueError:
            raise OptionError(where, problem) from None
        if not low <= n <= high:
            raise OptionError(where, problem)
        return n

    return check


def size(value: Any, where: str) -> int:
    """A size in bytes above 0: ``"1KB"``, ``"64KiB"`` (MB = 10**6, MiB = 2**20) or a number of bytes."""
    bad = f"bad size {value!r} (e.g. \"1KB\", \"1MB\" or a number of bytes)"
    if isinstance(value, (bool, float)):
        raise OptionError(where, bad)
    try:
        got = parse_size(value if isinstance(value, int) else _word(value, where, f"bad size {value!r}"))
    except OptionError:
        raise
    except ValueError as exc:  # parse_size's own words: what is wrong with it
        raise OptionError(where, str(exc) or bad) from None
    if got <= 0:
        raise OptionError(where, f"bad size {value!r} (must be more than 0 bytes)")
    return int(got)


#: the most values one list option takes: a matrix is a product of lists (a 100,000-entry sizes
#: list made `ipcbench run --list` run for minutes)
MAX_ITEMS = 64


def listed(each: Check, what: str) -> Check:
    """A list of ``what``, each checked by ``each``: a TOML list, a comma list or one value; a
    repeated value counts once (it would run the same cases twice), the order kept."""

    def check(value: Any, where: str) -> tuple[Any, ...]:
        items = value.split(",") if isinstance(value, str) else value if isinstance(value, (list, tuple)) else [value]
        items = [v for v in items if not (isinstance(v, str) and not v.strip())]
        if not items:
            raise OptionError(where, f"no {what} given (the list is empty)")
        if len(items) > MAX_ITEMS:
            raise OptionError(where, f"{len(items)} {what}s: at most {MAX_ITEMS} (each multiplies the matrix)")
        return tuple(dict.fromkeys(naming(each, v, where) for v in items))

    return check


def name(value: Any, where: str) -> str:
    """A non-empty name (a metric, a pattern)."""
    word = value.strip() if isinstance(value, str) else ""
    if not word:
        raise OptionError(where, "must be a non-empty name")
    return word


def names(value: Any, where: str) -> list[str]:
    """A list of names: a TOML list of strings, or a comma list (``shm,zmq``)."""
    if not isinstance(value, str) and not (isinstance(value, (list, tuple)) and all(isinstance(v, str) for v in value)):
        raise OptionError(where, 'must be a list of names (e.g. ["shm", "fifo"] or shm,fifo)')
    return list(listed(name, "name")(value, where))


def one_of(known: Callable[[], Sequence[str]] | Sequence[str], what: str, alls: Sequence[str] = ("all",),
           hint: str = "") -> Check:
    """A list of ``what`` from ``known`` (a callable: read when checked, as plugins register at
    start), or one of ``alls`` for every one of them."""

    def check(value: Any, where: str) -> tuple[str, ...]:
        allowed = tuple(known() if callable(known) else known)
        got = listed(name, what)(value, where)
        if len(got) == 1 and got[0].lower() in alls:
            return allowed
        for item in got:
            if item not in allowed:
                raise OptionError(where, f"unknown {what} {item!r} (choose from {', '.join(allowed)}, or "
                                         f"{' or '.join(alls)}{hint})")
        return got

    return check


def sizes(value: Any, where: str) -> list[int]:
    """Sizes in bytes above 0: a list of ``"1KB"``-like strings or numbers, or a comma list."""
    return list(listed(size, "size")(value, where))


def choice(*allowed: str) -> Check:
    """One of ``allowed``."""

    def check(value: Any, where: str) -> str:
        word = value.strip().lower() if isinstance(value, str) else None
        if word is None or word not in allowed:
            raise OptionError(where, f"must be one of {', '.join(allowed)}")
        return word

    return check


def boolean(value: Any, where: str) -> bool:
    """true or false (a TOML boolean; as text also yes/no, on/off, 1/0)."""
    if isinstance(value, bool):
        return value
    word = value.strip().lower() if isinstance(value, str) else ""
    if word in ("true", "false", "yes", "no", "on", "off", "1", "0"):
        return word in ("true", "yes", "on", "1")
    raise OptionError(where, "must be true or false")


def text(value: Any, where: str) -> str:
    """A non-empty string (a program, a list of arguments)."""
    if not isinstance(value, str) or not value.strip():
        raise OptionError(where, "must be a non-empty string")
    return value


def arguments(value: Any, where: str) -> str:
    """Command-line arguments as one string (may be empty: none)."""
    if not isinstance(value, str) or "\0" in value:
        raise OptionError(where, "must be a string of arguments")
    return value


def path(value: Any, where: str) -> Path:
    """A path: a non-empty string without NUL bytes (``~`` expanded); where it is written is checked
    when it is written (core/outdir.py)."""
    if not isinstance(value, (str, Path)) or not str(value).strip() or "\0" in str(value):
        raise OptionError(where, "must be a path")
    return Path(str(value)).expanduser()
