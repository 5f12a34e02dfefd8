"""Backends ``inj`` (local worker processes) and ``inj-mpi`` (MPI ranks): pytest-ipcbench's shm store
plus one cost per message chosen by :data:`.variant.VARIANT` (the commit decides):

* ``syscall``: the writer makes one extra ``write(2)`` of one byte to /dev/null per message;
* ``copy``: the reader makes one extra copy of the payload it read: ``ndarray.copy()`` for an array
  (``copy.deepcopy`` would add its memo dict: about 1.6 KB more per message), ``bytes()`` of a
  bytes-like one (a deep copy of ``bytes`` is the same object: no copy), else ``copy.deepcopy``;
* ``pickle``: the writer makes one extra pickle round trip of the payload (``pickle.dumps`` then
  ``pickle.loads``).

``clean`` adds nothing. A ping-pong's echo writes too, so there the writer's costs show on both
ranks.
"""

from __future__ import annotations

import copy
import os
import pickle
from typing import Any

import numpy as np

from pytest_ipcbench.backends.shm import SharedMemoryBackend

from .variant import VARIANT


class _Injected(SharedMemoryBackend):
    reference = None

    def setup(self) -> None:
        self._null = os.open(os.devnull, os.O_WRONLY) if VARIANT == "syscall" else -1
        super().setup()

    def write(self, obj: Any) -> None:
        if VARIANT == "syscall":
            os.write(self._null, b"x")
        elif VARIANT == "pickle":
            obj = pickle.loads(pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL))
        super().write(obj)

    def read(self) -> Any:
        obj = super().read()
        if VARIANT == "copy":
            obj = _copy(obj)
        return obj

    def close(self) -> None:
        if getattr(self, "_null", -1) >= 0:
            os.close(self._null)
            self._null = -1
        super().close()


def _copy(obj: Any) -> Any:
    """One copy of the payload, nothing else."""
    if isinstance(obj, np.ndarray):
        return obj.copy()
    if isinstance(obj, (bytes, bytearray, memoryview)):
        return bytes(memoryview(obj))
    return copy.deepcopy(obj)


class InjLocal(_Injected):
    name = "inj"
    run_in = "local"


class InjMpi(_Injected):
    name = "inj-mpi"
    run_in = "mpi"


__all__ = ["InjLocal", "InjMpi"]
