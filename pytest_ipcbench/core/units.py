"""Units: the one place that parses sizes and formats times, sizes, rates, shares and ratios.

MB = 10**6 bytes, KiB = 1024 bytes; times are seconds. Two size styles exist on purpose:
:func:`size_label` is exact and compact, for ids and file names (``1MB``, ``64KiB``);
:func:`format_bytes` is rounded, for people (``1.05 MB``).
"""

from __future__ import annotations

import contextlib
import math
import os
import re
from decimal import Decimal
from fractions import Fraction
from typing import Any

from .errors import UsageError

UNITS = {
    "B": 1,
    "KB": 10**3,
    "MB": 10**6,
    "GB": 10**9,
    "KIB": 2**10,
    "MIB": 2**20,
    "GIB": 2**30,
}
_SIZE_RE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([a-zA-Z]*)\s*$", re.ASCII)  # "١" or "１" is no digit here


class SizeTooLarge(UsageError):
    """A payload size beyond what this machine can hold."""


def machine_memory() -> int:
    """Bytes of memory this process can have: physical memory, or a smaller cgroup limit."""
    try:
        total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        total = 0
    for limit_file in ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"):
        try:
            with open(limit_file) as f:
                limit = int(f.read().strip())
        except (OSError, ValueError):  # absent, or "max"
            continue
        if 0 < limit < (total or limit + 1):
            total = limit
    return total


def check_size(nbytes: int, text: Any = None) -> int:
    """``nbytes`` if this machine's memory can hold a payload that big, else :class:`SizeTooLarge`."""
    memory = machine_memory()
    if memory and nbytes > memory:
        shown = (
            f"{text!r} ({Decimal(nbytes):.3g} bytes)" if text is not None and str(text) != str(nbytes) else f"{nbytes}"
        )
        raise SizeTooLarge(
            f"size {shown} is more than this machine's memory ({memory / 1e9:.3g} GB): a payload must fit in it"
        )
    return nbytes


def parse_size(text: str | int) -> int:
    """``"1MB"`` -> 1000000, ``"64KiB"`` -> 65536, ``"100"`` -> 100 bytes; ValueError on bad text,
    :class:`SizeTooLarge` for a size beyond this machine's memory."""
    if isinstance(text, int):
        if text < 0:
            raise UsageError(f"size must not be negative: {text}")
        return check_size(text)
    m = _SIZE_RE.match(str(text))
    unit = m.group(2).upper() if m else ""
    if not m or unit not in {"", *UNITS}:
        raise UsageError(
            f"bad size {text!r}: expected a number with an optional unit "
            f"(B, KB, MB, GB, KiB, MiB, GiB), e.g. 1MB"
        )
    # exact arithmetic: float() of a long digit string is inf (and int(inf) an OverflowError)
    number = Fraction(m.group(1)) * UNITS[unit or "B"]
    if number.denominator != 1:  # 1.5B used to be taken as 1 B
        raise ValueError(f"bad size {text!r}: {float(number):g} bytes is not a whole number of bytes")
    return check_size(int(number), text)


#: Copies of a payload each rank holds during a transfer (the object, and its serialized or
#: received bytes), and copies held once (the store's segment or map, a channel's buffer).
COPIES_PER_RANK = 2
SHARED_COPIES = 1


def available_memory() -> int:
    """Bytes that can be allocated now without swapping: ``MemAvailable``, or what a cgroup limit
    leaves, whichever is smaller (0 when unknown)."""
    avail = 0
    with contextlib.suppress(OSError, ValueError, IndexError), open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("MemAvailable:"):
                avail = int(line.split()[1]) * 1024
                break
    with contextlib.suppress(OSError, ValueError):  # absent, or "max"
        with open("/sys/fs/cgroup/memory.max") as f:
            limit = int(f.read().strip())
        with open("/sys/fs/cgroup/memory.current") as f:
            left = max(0, limit - int(f.read().strip()))
        avail = min(avail, left) if avail else left
    return avail


def shm_free() -> int:
    """Bytes free in /dev/shm now (0 when unknown)."""
    try:
        st = os.statvfs("/dev/shm")
    except OSError:
        return 0
    return st.f_bavail * st.f_frsize


def admit_sizes(sizes: Any, ranks: Any, source: str = "size", in_shm: bool = False) -> None:
    """The one admission of payload sizes, for every entry: :class:`SizeTooLarge` unless the largest
    size fits in the memory available now with the most ranks' copies (and, ``in_shm``, in /dev/shm's
    free space); refused before the start rather than ended by the OOM killer or SIGBUS."""
    sizes = [sizes] if isinstance(sizes, int) else list(sizes)
    ranks = [ranks] if isinstance(ranks, int) else list(ranks)
    if not sizes or not ranks:
        return
    size, n = max(sizes), max(ranks)
    avail = available_memory()
    copies = COPIES_PER_RANK * n + SHARED_COPIES
    if avail and size * copies > avail:
        raise SizeTooLarge(
            f"{source} {size_label(size)} ({format_bytes(size)}) with {n} ranks needs about "
            f"{format_bytes(size * copies)} ({copies} copies: {COPIES_PER_RANK} a rank and {SHARED_COPIES} shared), "
            f"but {format_bytes(avail)} of memory is available now: refused before starting (use a smaller size "
            f"or fewer ranks; at most {format_bytes(avail // copies)} with {n} ranks)"
        )
    free = shm_free() if in_shm else 0
    if free and size * SHARED_COPIES > free:
        raise SizeTooLarge(
            f"{source} {size_label(size)} ({format_bytes(size)}) needs {format_bytes(size * SHARED_COPIES)} in "
            "/dev/shm "
            f"(the backend keeps the payload there), but /dev/shm has {format_bytes(free)} free: refused before "
            f"starting (use a smaller size, or free /dev/shm)"
        )


def size_label(nbytes: int) -> str:
    """Shortest exact label: 1000000 -> ``1MB``, 65536 -> ``64KiB``, 1500 -> ``1500B``."""
    for unit in ("GB", "MB", "KB", "GiB", "MiB", "KiB"):
        if nbytes and nbytes % UNITS[unit.upper()] == 0:
            return f"{nbytes // UNITS[unit.upper()]}{unit}"
    return f"{nbytes}B"


def format_bytes(nbytes: float) -> str:
    """Rounded decimal size for people: 1000 -> ``1 KB``, 1048576 -> ``1.05 MB``."""
    for unit, div in (("GB", 1e9), ("MB", 1e6), ("KB", 1e3)):
        if nbytes >= div:
            return f"{nbytes / div:.3g} {unit}"
    return f"{nbytes:g} B"


def format_time(seconds: float | None, digits: int = 3) -> str:
    """``0.00123`` -> ``1.23 ms``; seconds, ms, µs or ns with ``digits`` significant digits."""
    if seconds is None or not math.isfinite(seconds):
        return "-"
    for unit, scale in (("s", 1.0), ("ms", 1e-3), ("µs", 1e-6)):
        if abs(seconds) >= scale:
            return f"{seconds / scale:.{digits}g} {unit}"
    return f"{seconds / 1e-9:.{digits}g} ns"


def duration_label(seconds: float) -> str:
    """Compact exact label for ids: 0.001 -> ``1ms``, 1e-4 -> ``100us``, 0 -> ``0``."""
    if seconds == 0:
        return "0"
    if seconds >= 1:
        return f"{seconds:g}s"
    if seconds >= 1e-3:
        return f"{seconds * 1e3:g}ms"
    return f"{seconds * 1e6:g}us"


def format_rate(bytes_per_s: float | None) -> str:
    """Bytes per second as MB/s (10**6 B/s)."""
    if bytes_per_s is None or not math.isfinite(bytes_per_s):
        return "-"
    mbps = bytes_per_s / 1e6
    return f"{mbps:,.0f} MB/s" if mbps >= 100 else f"{mbps:.3g} MB/s"


def format_percent(fraction: float | None) -> str:
    """0.42 -> ``42%``, 0.0123 -> ``1.2%``."""
    if fraction is None or not math.isfinite(fraction):
        return "-"
    return f"{fraction:.0%}" if fraction >= 0.1 else f"{fraction * 100:.2g}%"


def format_ratio(x: float | None) -> str:
    """1.234 -> ``1.23x``, 12.3 -> ``12.3x``, 123 -> ``123x``."""
    if x is None or not math.isfinite(x):
        return "-"
    return f"{x:.2f}x" if x < 10 else f"{x:.1f}x" if x < 100 else f"{x:.0f}x"


def format_count(x: float | None, signed: bool = False) -> str:
    """A count per message: ``1048576`` -> ``1,048,576``, ``2.5`` -> ``2.5``, ``0.0625`` -> ``0.0625``;
    ``signed`` adds ``+`` to a positive one (a change)."""
    if x is None or not math.isfinite(x):
        return "-"
    sign = "+" if signed and x > 0 else ""
    if float(x).is_integer():
        return f"{sign}{int(x):,}"
    return f"{sign}{x:,.4g}" if abs(x) < 1000 else f"{sign}{x:,.0f}"
