"""Backends for the advise tests, importable by spawned workers (tests/ is on their sys.path)."""

from __future__ import annotations

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
