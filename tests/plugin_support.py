"""A small backend and payload kind that tests register at run time (nothing here registers itself).

``FileStore`` is a complete store: the writer replaces one file atomically, readers poll for a
newer number, with a timeout and an error record. It works between local worker processes and
MPI ranks of one machine. ``CONFTEST`` is the same code as a consumer's conftest.py, with broken
variants that the conformance suite must flag.
"""

from __future__ import annotations

import os
import pickle
import shutil
from pathlib import Path
from typing import Any

import numpy as np

from pytest_ipcbench import Backend, Kind, PayloadError
from pytest_ipcbench.backends.base import Backoff, dumps, loads
from pytest_ipcbench.core import names


class FileStore(Backend):
    """A store in a file: the writer replaces it atomically; readers poll for a newer number."""

    name = "test-filestore"
    delivery = "store"

    def setup(self) -> None:
        self.path: Path | None = None
        self._seq = 0
        self._owner = False
        self.open_collectively(self._create, self._attach, "make its folder")

    def _create(self) -> str:
        self._owner = True
        return str(names.private_dir("filestore"))

    def _attach(self, path: str) -> None:
        self.path = Path(path)

    def write(self, obj: Any) -> None:
        self._seq += 1
        try:
            body = ("ok", dumps(obj))
        except PayloadError as exc:
            self._publish(("error", str(exc)))
            raise
        self._publish(body)

    def _publish(self, body: tuple[str, Any]) -> None:
        assert self.path is not None
        tmp = self.path / f"tmp-{self._seq}"
        tmp.write_bytes(pickle.dumps((self._seq, body)))
        os.replace(tmp, self.path / "value")

    def read(self) -> Any:
        assert self.path is not None
        backoff = Backoff(self.timeout)
        while True:
            try:
                seq, (tag, data) = pickle.loads((self.path / "value").read_bytes())
            except FileNotFoundError:
                # the folder itself gone: its owner closed the store, after a write that failed and
                # said so (the harness closes a failed case at once), before this reader looked
                if not self.path.is_dir():
                    raise self.writer_failed(f"the store {self.path} was closed") from None
                seq = 0
            if seq > self._seq:
                self._seq = seq
                if tag == "error":
                    raise self.writer_failed(data)
                return loads(data)
            if not backoff.wait():
                raise self.timeout_error(f"a value newer than number {self._seq} in {self.path}")

    def close(self) -> None:
        if self._owner and self.path is not None:
            shutil.rmtree(self.path, ignore_errors=True)
        self.path = None


def _records_build(size: int, seed: int) -> np.ndarray:
    n = max(1, size // 16)
    out = np.zeros(n, dtype=[("id", np.int64), ("x", np.float32), ("tag", "S4")])
    out["id"] = np.arange(n) + seed
    out["x"] = np.arange(n, dtype=np.float32) * 0.5 + seed
    out["tag"] = b"rec"
    return out


def _records_equal(a: Any, b: Any) -> bool:
    return isinstance(a, np.ndarray) and isinstance(b, np.ndarray) and a.dtype == b.dtype and bool(np.array_equal(a, b))


def _records_nbytes(a: np.ndarray) -> int:
    return int(a.nbytes)


def records_kind() -> Kind:
    """A payload kind of structured records, 16 bytes each."""
    return Kind(_records_build, _records_equal, _records_nbytes)


RECORDS = Kind(_records_build, _records_equal, _records_nbytes)


def worker_pid(group: Any) -> int:
    return os.getpid()


def not_a_kind() -> int:
    return 42
