"""pytest fixtures for shared numpy arrays (plain fixture functions; the plugin imports them).

* ``shared_array`` -- factory: ``shared_array(shape, dtype)`` or ``shared_array(ndarray)``;
  everything it made is released at teardown.
* ``shared_pool`` -- a :class:`~pytest_ipcbench.shared.SharedNumpyPool`, closed at teardown.
* ``shm_leak_guard`` -- fails the test if it leaves segments of ours in /dev/shm.
* :func:`snapshot` / :func:`leaked_segments` -- the same check for a whole session.

"Ours" means named by :mod:`pytest_ipcbench.names` *and* left by this process tree: owned by
this pid, by a live descendant, or (shared array segments record it) created in our process
group -- so other pytest sessions running on the machine at the same time do not trip the check.
"""

from __future__ import annotations

import gc
import os
import time
import weakref
from typing import Any, Callable, Iterable, Iterator

import numpy as np
import pytest

from . import names
from .shared import SharedNDArray, SharedNumpyPool
from .shared import segment as _segment

_CLEANUPS = pytest.StashKey[list]()


def snapshot() -> set[str]:
    """Names of every segment of ours currently in /dev/shm (any owner)."""
    return {x.path.name for x in names.find_ours() if x.path.parent == names.SHM_DIR}


def _descendants() -> set[int]:
    """Pids of live processes below us (from /proc)."""
    parent_of: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as f:
                stat = f.read()
            parent_of[int(entry)] = int(stat[stat.rindex(b")") + 2:].split()[1])
        except (OSError, ValueError, IndexError):
            continue
    found: set[int] = set()
    frontier = {os.getpid()}
    while frontier:
        frontier = {pid for pid, ppid in parent_of.items() if ppid in frontier} - found
        found |= frontier
    return found


def leaked_segments(before: Iterable[str | os.PathLike[str]], wait: float = 0.0) -> list[str]:
    """Our /dev/shm names not in ``before`` that this process tree left behind.

    ``wait`` seconds are granted for children still releasing theirs (polling).
    """
    before_names = {os.path.basename(os.fspath(b)) for b in before}
    me, pgid = os.getpid(), os.getpgid(0)
    deadline = time.monotonic() + wait
    collected = False
    while True:
        new = sorted(snapshot() - before_names)
        kids = _descendants() if new else set()
        leaked = [n for n in new
                  if names.owner_pid(n) in kids | {me} or _segment.creator_pgid(n) == pgid]
        if not leaked:
            return leaked
        if not collected:  # arrays kept only by reference cycles: collect once, look again
            gc.collect()
            collected = True
            continue
        if time.monotonic() >= deadline:
            return leaked
        time.sleep(0.05)


def _is_shape(x: Any) -> bool:
    if isinstance(x, (int, np.integer)):
        return True
    return isinstance(x, tuple) and all(isinstance(n, (int, np.integer)) for n in x)


def _run_cleanups(node: Any) -> None:
    for fn in node.stash.get(_CLEANUPS, []):
        fn()


def _register_cleanup(request: pytest.FixtureRequest, fn: Callable[[], None]) -> None:
    request.node.stash.setdefault(_CLEANUPS, []).append(fn)


@pytest.fixture
def shm_leak_guard(request: pytest.FixtureRequest) -> Iterator[None]:
    """Fail the test if it leaves shared segments of ours behind (they are removed, too).

    Runs the ``shared_array``/``shared_pool`` teardowns of the same test first, whatever the
    fixture order.
    """
    before = snapshot()
    yield
    _run_cleanups(request.node)
    leaked = leaked_segments(before, wait=1.0)
    if leaked:
        for name in leaked:
            names.remove(names.SHM_DIR / name)
        pytest.fail(f"test left {len(leaked)} shared segment(s) in /dev/shm: {', '.join(leaked)}",
                    pytrace=False)


@pytest.fixture
def shared_array(request: pytest.FixtureRequest) -> Iterator[Callable[..., SharedNDArray]]:
    """Factory ``shared_array(shape, dtype=float)`` / ``shared_array(ndarray)`` -> SharedNDArray.

    Keyword ``inline_below`` is passed on (0 forces a segment even for tiny arrays).  At
    teardown this process's references to everything it made are dropped.
    """
    made: list[weakref.ref[_segment.Segment]] = []

    def factory(shape_or_array: Any, dtype: Any = None, *, inline_below: int | None = None) -> SharedNDArray:
        if _is_shape(shape_or_array):
            arr = SharedNDArray.empty(shape_or_array, float if dtype is None else dtype,
                                      inline_below=inline_below)
        else:
            src = np.asarray(shape_or_array, dtype=dtype)
            arr = SharedNDArray.from_numpy_array(src, inline_below=inline_below)
        if arr._ipcb_seg is not None:
            made.append(weakref.ref(arr._ipcb_seg))
        return arr

    def cleanup() -> None:
        for ref in made:
            seg = ref()
            if seg is not None:
                seg.release()
        made.clear()

    _register_cleanup(request, cleanup)
    yield factory
    cleanup()


@pytest.fixture
def shared_pool(request: pytest.FixtureRequest) -> Iterator[SharedNumpyPool]:
    """A SharedNumpyPool, closed at teardown."""
    pool = SharedNumpyPool()

    def cleanup() -> None:
        pool.close()

    _register_cleanup(request, cleanup)
    yield pool
    cleanup()
