"""Lifetime of shared segments across processes: counting, drop orders, crashes, forwarding."""

from __future__ import annotations

import gc
import itertools
import multiprocessing
import os
import pickle
import signal

import numpy as np
import pytest
from support import Worker  # tests/ is on sys.path (rootdir conftest, no package)

from pytest_ipcbench.shared import Queue, SegmentGone, SharedNDArray, SharedNumpyPool, reclaim_orphans
from pytest_ipcbench.shared.segment import shm_path

N = 100_000  # 800 kB of float64: above the inline threshold


@pytest.fixture(autouse=True)
def _no_leaks(shm_leak_guard: None) -> None:
    """Every test here must leave /dev/shm clean of our segments."""


@pytest.fixture(scope="module")
def workers():
    """Three long-lived spawn children sharing one inbox Queue each (for forwarding)."""
    inboxes = [Queue() for _ in range(3)]
    ws = [Worker("spawn", inboxes, i) for i in range(3)]
    yield ws
    for w in ws:
        w.close()
    for q in inboxes:
        q.close()


def _make(value: float = 1.0) -> SharedNDArray:
    return SharedNDArray.from_numpy_array(np.full(N, value))


@pytest.mark.parametrize("holders", [2, 4])
def test_every_drop_order_unlinks_after_last(workers, holders):
    """Parent + (holders-1) children hold one segment; each drop order unlinks exactly at the end."""
    parties = ["parent"] + list(range(holders - 1))
    for order in itertools.permutations(parties):
        arr = _make()
        path = shm_path(arr.segment_name)
        for i in range(holders - 1):
            assert workers[i].call("hold", "a", arr) == arr.segment_name
        for step, who in enumerate(order):
            assert path.exists(), f"gone too early in order {order} before step {step}"
            if who == "parent":
                del arr  # refcounting frees it at once (no gc pass: the pytest heap is large)
            else:
                workers[who].call("drop", "a")
        assert not path.exists(), f"left behind after drop order {order}"


def test_children_see_parent_writes_and_vice_versa(workers):
    arr = _make(0.0)
    workers[0].call("hold", "w", arr)
    arr[5] = 42.0
    assert workers[0].call("read", "w", 5) == 42.0
    workers[0].call("write", "w", 7, -1.0)
    assert arr[7] == -1.0
    workers[0].call("drop", "w")


def test_forwarding_a_to_b_to_c(workers):
    """A received array can be sent on: parent -> w0 -> w1 -> w2, all on one segment."""
    arr = _make(3.0)
    name = arr.segment_name
    workers[0].call("hold", "f", arr)
    workers[0].call("forward", "f", 1)
    assert workers[1].call("take", "f", 10) == name
    workers[1].call("forward", "f", 2)
    assert workers[2].call("take", "f", 10) == name
    workers[2].call("write", "f", 0, 99.0)
    assert arr[0] == 99.0
    del arr
    for w in workers:
        w.call("drop", "f")
    assert not shm_path(name).exists()


def test_forwarded_view_keeps_offset_and_strides(workers):
    base = SharedNDArray.from_numpy_array(np.arange(N, dtype=np.int64).reshape(1000, 100))
    view = base[::-3, 10:90:7]
    workers[0].call("hold", "v", view)
    assert workers[0].call("equal", "v", np.asarray(view))
    workers[0].call("forward", "v", 1)
    workers[1].call("take", "v", 10)
    assert workers[1].call("equal", "v", np.asarray(view))
    workers[1].call("write", "v", (0, 0), -5)
    assert view[0, 0] == -5 and base[999, 10] == -5
    del base, view
    workers[0].call("drop", "v")
    workers[1].call("drop", "v")


def test_sigkilled_holder_then_survivor_drops():
    """A killed holder's count is ignored at the survivor's last drop (its lock died with it)."""
    w = Worker("spawn")
    try:
        arr = _make()
        path = shm_path(arr.segment_name)
        w.call("hold", "k", arr)
        w.kill()
        assert path.exists()
        assert arr._ipcb_seg.refs() == 2  # the dead holder's count is still there
        del arr
        gc.collect()
        assert not path.exists()
    finally:
        w.close()


def test_sigkilled_last_holder_reclaimed_by_reclaim_orphans():
    w = Worker("spawn")
    try:
        arr = _make()
        name = arr.segment_name
        w.call("hold", "k", arr)
        del arr
        gc.collect()
        assert shm_path(name).exists()  # the child still holds it
        assert reclaim_orphans(names=[name]) == []  # alive: not an orphan
        os.kill(w.pid, signal.SIGKILL)
        w.process.join(10)
        assert shm_path(name).exists()
        assert reclaim_orphans(in_transit=False, names=[name]) == [name]
        assert not shm_path(name).exists()
    finally:
        w.close()


def test_sigkilled_holder_of_pooled_segment_pool_reuses_and_close_reclaims():
    w = Worker("spawn")
    try:
        with SharedNumpyPool() as pool:
            arr = pool.from_numpy_array(np.ones(N))
            name = arr.segment_name
            w.call("hold", "k", arr)
            del arr
            gc.collect()
            assert pool.from_numpy_array(np.ones(N)).segment_name != name  # busy: w holds it
            w.kill()
            again = pool.from_numpy_array(np.ones(N))
            assert again.segment_name == name  # the kernel says w is gone: reusable
            assert again._ipcb_seg.refs() == 1
            del again
    finally:
        w.close()
    assert not shm_path(name).exists()


def test_pickled_never_unpickled_handle():
    """A lost handle keeps the segment (it might still arrive) until reclaimed as in-transit."""
    arr = _make()
    name = arr.segment_name
    pickle.dumps(arr)  # an in-transit reference nobody will adopt
    assert arr._ipcb_seg.in_transit() == 1
    del arr
    gc.collect()
    assert shm_path(name).exists()
    assert reclaim_orphans(in_transit=False, names=[name]) == []
    assert reclaim_orphans(in_transit=True, names=[name]) == [name]


def test_lost_handle_of_dead_creator_reclaimed_by_default():
    """Default reclaim: in-transit-only segments go once their creator is dead, not before."""
    w = Worker("spawn")
    try:
        name = w.call("make", "x", N)
        w.call("leak_handle", "x")
        assert reclaim_orphans(names=[name]) == []  # creator alive: the handle may still arrive
    finally:
        w.close()  # exits normally, releasing its own reference
    assert shm_path(name).exists()  # kept by the lost in-transit reference
    assert reclaim_orphans(names=[name]) == [name]


def test_handle_received_after_sender_dropped():
    """The in-transit reference alone keeps the segment alive for the receiver."""
    arr = _make(7.0)
    data = pickle.dumps(arr)
    name = arr.segment_name
    del arr
    gc.collect()
    assert shm_path(name).exists()
    got = pickle.loads(data)
    assert got[0] == 7.0 and got._ipcb_seg.refs() == 1 and got._ipcb_seg.in_transit() == 0
    del got
    gc.collect()
    assert not shm_path(name).exists()


def test_handle_after_reclaim_gives_clear_error():
    arr = _make()
    data = pickle.dumps(arr)
    name = arr.segment_name
    del arr
    gc.collect()
    reclaim_orphans(in_transit=True, names=[name])  # nothing alive holds it, only in transit
    with pytest.raises(SegmentGone, match="no longer exists"):
        pickle.loads(data)


def _fork_child_checks(arr, q):
    arr[1] = 11.0  # inherited mapping
    q.put(float(arr.sum()))


def test_fork_child_inheriting_array_holds_its_own_reference():
    arr = _make(1.0)
    name = arr.segment_name
    q = Queue(ctx="fork")
    p = multiprocessing.get_context("fork").Process(target=_fork_child_checks, args=(arr, q))
    p.start()
    total = q.get(timeout=30)
    p.join(30)
    assert p.exitcode == 0
    assert total == N + 10.0 and arr[1] == 11.0
    assert arr._ipcb_seg.refs() == 1  # the child's reference went away with it
    del arr
    gc.collect()
    assert not shm_path(name).exists()
    q.close()
