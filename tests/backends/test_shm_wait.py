"""shm's wait and steady path, driven by hand in one process: exact counts, no timing.

A reader polls the version word, then sleeps on a futex; the writer makes the wake system call
only when a reader sleeps (issue 40, docs/floor.md). A reader returns its last view of a plain
array while the layout word has not moved, and never an earlier layout's view.
"""

from __future__ import annotations

import threading
import time
from typing import Any

import numpy as np
import pytest

from pytest_ipcbench.backends import shm
from pytest_ipcbench.backends.base import BackendSpec, PayloadError

pytestmark = pytest.mark.skipif(shm._FUTEX is None, reason="no futex here (Linux with libatomic)")


class _Group:
    """Just enough of a group for a writer (rank 0) and a reader (rank 1) in this process."""

    is_mpi = False

    def __init__(self, rank: int, shared: dict[str, Any]) -> None:
        self.rank, self.size, self.shared = rank, 2, shared

    def bcast(self, obj: Any, root: int = 0) -> Any:
        if self.rank == root:
            self.shared["bcast"] = obj
        return self.shared["bcast"]

    def allgather(self, obj: Any) -> list[Any]:
        return [None, obj]

    def barrier(self) -> None:
        pass


def _pair(wait: str) -> tuple[Any, Any]:
    shared: dict[str, Any] = {}
    writer = BackendSpec("shm", "native", timeout=10, wait=wait).open(_Group(0, shared))  # type: ignore[arg-type]
    writer.setup()
    reader = BackendSpec("shm", "native", timeout=10, wait=wait).open(_Group(1, shared))  # type: ignore[arg-type]
    reader.setup()
    return writer, reader


@pytest.fixture
def wakes(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    calls: list[int] = []
    wake = shm._FUTEX.wake  # type: ignore[union-attr]

    def counted(word: int) -> None:
        calls.append(word)
        wake(word)

    monkeypatch.setattr(shm._FUTEX, "wake", counted)
    return calls


@pytest.mark.parametrize("wait", ["block", "backoff"])
def test_no_wake_call_while_no_reader_sleeps_and_one_for_a_sleeper(wait: str, wakes: list[int]) -> None:
    writer, reader = _pair(wait)
    try:
        for i in range(50):  # the value is there before read(): nobody sleeps, no wake call
            writer.write(np.full(8, i, dtype=np.int64))
            assert reader.read().tolist() == [i] * 8
        assert wakes == []
        got: list[Any] = []
        thread = threading.Thread(target=lambda: got.append(reader.read().copy()))
        thread.start()
        words = writer._words
        deadline = time.monotonic() + 10
        while words[shm._SLEEPERS] == 0:  # block: after its polls; backoff: at once
            assert time.monotonic() < deadline, "the reader never slept on the futex"
            time.sleep(1e-3)
        writer.write(np.full(8, 99, dtype=np.int64))
        thread.join(10)
        assert not thread.is_alive() and got[0].tolist() == [99] * 8
        assert len(wakes) == 1 and words[shm._SLEEPERS] == 0
    finally:
        reader.close()
        writer.close()


def test_reader_view_follows_the_layout_word() -> None:
    writer, reader = _pair("block")
    try:
        a, b = np.arange(100, dtype=np.int32), np.arange(100, dtype=np.int32)[::-1].copy()
        views = []
        for obj in (a, b, a):  # one layout: the same view, showing the newest value
            writer.write(obj)
            views.append(reader.read())
            assert np.array_equal(views[-1], obj)
        assert views[0] is views[1] is views[2]
        writer.write(a.reshape(10, 10))  # another shape: a new view
        assert reader.read().shape == (10, 10)
        with pytest.raises(PayloadError):
            writer.write(lambda: 0)  # an error moves the layout word too
        with pytest.raises(PayloadError):
            reader.read()
        writer.write(a.reshape(10, 10))
        got = reader.read()
        assert got.shape == (10, 10) and np.array_equal(got, a.reshape(10, 10))
        writer.write(np.zeros(3 << 20, dtype=np.uint8))  # a bigger segment: followed
        assert reader.read().nbytes == 3 << 20
    finally:
        reader.close()
        writer.close()
