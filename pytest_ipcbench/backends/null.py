"""``null``: a channel that moves nothing, so its figures are the harness's own cost.

Internal (``BackendSpec("null")``; never offered by fixtures or default matrices): the floor of
harness/floor.py. A reader gets the object this process wrote last (ping-pong), or in a
broadcast the expected object the harness gave :meth:`~.base.Backend.prepare` (iteration ``i``:
``objs[i % len(objs)]``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from .base import Backend, register

#: the last object written in this process, by any null backend (a ping-pong's two directions)
_LAST: list[Any] = [None]


@register
class NullBackend(Backend):
    """Moves nothing; see the module docstring."""

    name = "null"
    delivery = "channel"
    internal = True
    run_in = "mpi"
    node_local = False  # it connects nothing, so no node stands in its way

    def setup(self) -> None:
        self._expected: Sequence[Any] = ()
        self._reads = 0

    def prepare(self, objs: Sequence[Any]) -> None:
        self._expected = list(objs)

    def write(self, obj: Any) -> None:
        _LAST[0] = obj

    def read(self) -> Any:
        expected = self._expected
        if expected:
            i = self._reads
            self._reads = i + 1
            return expected[i % len(expected)]
        return _LAST[0]


__all__ = ["NullBackend"]
