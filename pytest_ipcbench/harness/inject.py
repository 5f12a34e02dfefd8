"""Injected slowdowns: make named backends slower on purpose, to measure what a gate can see.

``IPCBENCH_INJECT="shm=1.5,zmq=2"`` (``ipcbench gate --inject`` sets it for the head's runs;
``shm=1.5@1MiB``: only cases of at least 1 MiB) slows every case of those backends by that
factor in the measured path: where a rank ends a timed operation it spins (a real regression
takes the CPU too) for ``factor - 1`` times what the operation took. Granularity cases whose
echo side works are not slowed: the mechanism's share of their round trip is unknown.

A channel broadcast completes when the last reader holds the message, on the writer's clock, so
readers stretching their own times would miss the factor. On one host a
:class:`DeliveryStretch` (shared memory, made only when a case is slowed) holds the write's start
and each arrival; the last reader to arrive spins until ``start + factor x (arrival - start)``.
Across hosts each reader stretches its own time (less than the factor). A store's completion is
write + slowest read: the writer stretches its write and each reader its read.

A run's environment record names its injected slowdowns (``injected``): such results are never
a measurement of the code.
"""

from __future__ import annotations

import contextlib
import mmap
import os
import struct
import time
from collections.abc import Callable

from ..core.group import Group
from ..core.injection import Slowdown, injected
from ..core.names import SHM_DIR, resource_name

_START = struct.Struct("d")  # the writer's start of the current write
_ARRIVAL = struct.Struct("qd")  # per reader: the message's number, the arrival (perf_counter)


def spin(seconds: float) -> None:
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


def slowdown_for(name: str, nbytes: int = 0, factors: dict[str, Slowdown] | None = None) -> Slowdown | None:
    """The slowdown of a case of backend ``name`` and size ``nbytes`` (the size its key names);
    None when it is not slowed (the default: the environment's slowdowns)."""
    factors = injected() if factors is None else factors
    slowdown = factors.get(name)
    if slowdown is None or slowdown.factor == 1.0 or nbytes < slowdown.min_bytes:
        return None
    return slowdown


def stretcher(name: str, nbytes: int = 0,
              factors: dict[str, Slowdown] | None = None) -> Callable[[float], None] | None:
    """For a backend registered as ``name``, in a case of ``nbytes``: a function that, given the
    seconds an operation took so far, spins ``factor - 1`` times that; None when that case is not
    slowed."""
    slowdown = slowdown_for(name, nbytes, factors)
    if slowdown is None:
        return None
    extra = slowdown.factor - 1.0
    return lambda elapsed: spin(extra * elapsed) if elapsed > 0 else None


class DeliveryStretch:
    """Collective: the shared slots of a slowed channel broadcast on one host (see the module's
    text), unlinked once every rank mapped them. :meth:`open` gives None where they cannot be made
    (no /dev/shm): the readers then stretch their own time, as across hosts.
    """

    def __init__(self, mapped: mmap.mmap, factor: float, slot: int, readers: int) -> None:
        self._map, self._factor, self._readers = mapped, factor, readers
        self._mine = _START.size + slot * _ARRIVAL.size  # a reader's slot (-1: the writer)
        self._count = 0  # messages so far: the same on every rank, warm-up included

    @classmethod
    def open(cls, group: Group, root: int, readers: list[int], factor: float) -> DeliveryStretch | None:
        size = _START.size + len(readers) * _ARRIVAL.size
        path, mapped, ok = "", None, True
        if group.rank == root:
            try:
                path = str(SHM_DIR / resource_name("inject"))
                fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_RDWR, 0o600)
                try:
                    os.ftruncate(fd, size)  # zeros: no reader has arrived at message 1 yet
                    mapped = mmap.mmap(fd, size)
                finally:
                    os.close(fd)
            except OSError:
                ok = False
        path = group.bcast(path if ok else "", root=root)
        if path and group.rank != root:
            try:
                fd = os.open(path, os.O_RDWR)
                try:
                    mapped = mmap.mmap(fd, size)
                finally:
                    os.close(fd)
            except OSError:
                ok = False
        every = all(group.allgather(bool(path) and ok))  # every rank mapped it, or none uses it
        if group.rank == root and path:
            with contextlib.suppress(OSError):
                os.unlink(path)
        if not every:
            if mapped is not None:
                mapped.close()
            return None
        assert mapped is not None  # every rank mapped it
        slot = readers.index(group.rank) if group.rank in readers else -1
        return cls(mapped, factor, slot, len(readers))

    def started(self, t0: float) -> None:
        """The writer, before each write (message ``n`` is out only after this)."""
        self._count += 1
        _START.pack_into(self._map, 0, t0)

    def arrived(self) -> None:
        """A reader holding the message: record the arrival; the last to arrive spins until the
        writer's start plus ``factor`` times the delivery."""
        arrival = time.perf_counter()
        self._count += 1
        n, m = self._count, self._map
        _ARRIVAL.pack_into(m, self._mine, n, arrival)
        last = arrival
        for k in range(self._readers):
            seen, at = _ARRIVAL.unpack_from(m, _START.size + k * _ARRIVAL.size)
            if seen != n:
                return  # someone is still to come: the last one spins
            last = max(last, at)
        start = _START.unpack_from(m, 0)[0]  # written before the message went out
        spin(start + self._factor * (last - start) - time.perf_counter())

    def close(self) -> None:
        self._map.close()
