"""Backends and objects for the advise tests, importable by spawned workers (tests/ is on their sys.path)."""

from __future__ import annotations

import time
from typing import Any

from pytest_ipcbench.backends.base import PayloadError
from pytest_ipcbench.backends.shm import SharedMemoryBackend


class RefusingStore(SharedMemoryBackend):
    """Shared memory that refuses every object: a backend that fails on the user's object."""

    name = "test-refusing"

    def write(self, obj: Any) -> None:
        raise PayloadError("test-refusing takes no object")


class ShmTwin(SharedMemoryBackend):
    """Shared memory under another name: slowed on purpose by IPCBENCH_INJECT, the same code otherwise."""

    name = "test-shm-twin"


class SlowToPickle:
    """An object whose every pickling takes :attr:`delay` seconds: a message that takes that long
    whatever its size. Equal to any other (a reader's copy verifies)."""

    delay = 0.4

    def __reduce__(self) -> tuple:
        time.sleep(self.delay)
        return (SlowToPickle, ())

    def __eq__(self, other: object) -> bool:
        return isinstance(other, SlowToPickle)

    def __hash__(self) -> int:
        return 0
