"""SharedNumpyPool: reuse only when free, never while in flight, bounded with LRU eviction."""

from __future__ import annotations

import gc
import multiprocessing
import pickle

import numpy as np
import pytest
from support import Worker  # tests/ is on sys.path (rootdir conftest, no package)

from pytest_ipcbench.shared import Queue, SharedNumpyPool
from pytest_ipcbench.shared.segment import shm_path

N = 100_000  # 800 kB of float64


@pytest.fixture(autouse=True)
def _no_leaks(shm_leak_guard: None) -> None:
    """Every test here must leave /dev/shm clean of our segments."""


@pytest.fixture(scope="module")
def consumer():
    inbox = Queue(maxsize=4)
    w = Worker("spawn", [inbox], 0)
    yield w, inbox
    w.close()
    inbox.close()


def test_reuse_after_local_drop(shared_pool):
    a = shared_pool.from_numpy_array(np.ones(N))
    name = a.segment_name
    b = shared_pool.from_numpy_array(np.ones(N))
    assert b.segment_name != name  # a is still alive here
    del a
    gc.collect()
    c = shared_pool.from_numpy_array(np.full(N, 2.0))
    assert c.segment_name == name and c[0] == 2.0
    assert shared_pool.hits == 1 and shared_pool.misses == 2


def test_local_view_blocks_reuse(shared_pool):
    a = shared_pool.empty((N,), np.float64)
    name = a.segment_name
    v = a[::10]
    del a
    gc.collect()
    assert shared_pool.empty((N,), np.float64).segment_name != name
    del v
    gc.collect()
    assert shared_pool.empty((N,), np.float64).segment_name == name


def test_in_transit_handle_blocks_reuse(shared_pool):
    a = shared_pool.from_numpy_array(np.ones(N))
    name = a.segment_name
    data = pickle.dumps(a)  # in flight, nobody received it yet
    del a
    gc.collect()
    b = shared_pool.from_numpy_array(np.zeros(N))
    assert b.segment_name != name
    got = pickle.loads(data)
    assert got[0] == 1.0  # the in-flight data was not overwritten
    del got, b
    gc.collect()
    assert shared_pool.from_numpy_array(np.zeros(N)).segment_name in {name, shared_pool.segment_names[-1]}


def test_other_process_holding_blocks_reuse(shared_pool, consumer):
    w, _ = consumer
    a = shared_pool.from_numpy_array(np.ones(N))
    name = a.segment_name
    w.call("hold", "p", a)
    del a
    gc.collect()
    assert shared_pool.from_numpy_array(np.ones(N)).segment_name != name
    w.call("drop", "p")
    gc.collect()
    names_now = set()
    for _ in range(2):  # both kept segments are free again
        names_now.add(shared_pool.from_numpy_array(np.ones(N)).segment_name)
    assert name in names_now or shared_pool.hits >= 1


def _wait_for(q):
    q.get(timeout=30)


def test_fork_child_without_arrays_does_not_pin_free_pool_segments(shared_pool):
    a = shared_pool.from_numpy_array(np.ones(N))
    name = a.segment_name
    del a  # free, kept by the pool
    gate = Queue(ctx="fork")
    p = multiprocessing.get_context("fork").Process(target=_wait_for, args=(gate,))
    p.start()
    try:
        b = shared_pool.from_numpy_array(np.ones(N))
        assert b.segment_name == name  # the child inherited no array: it holds nothing
        held = shared_pool.from_numpy_array(np.ones(N))
    finally:
        gate.put(None)
        p.join(30)
    assert p.exitcode == 0
    del b, held
    gate.close()


def test_size_matching_and_inline(shared_pool):
    a = shared_pool.empty((4 * N,), np.float64)
    name = a.segment_name
    del a
    gc.collect()
    smaller = shared_pool.empty((N,), np.float64)
    assert smaller.is_shared and smaller.segment_name != name  # 4x too big: not wasted on it
    small = shared_pool.empty((10,), np.float64)
    assert small.segment_name is None  # below the inline threshold


def test_bounded_with_lru_eviction():
    with SharedNumpyPool(max_bytes=3 * 8 * N + 3 * 4096) as pool:
        arrs = [pool.from_numpy_array(np.ones(N)) for _ in range(3)]
        first = [a.segment_name for a in arrs]
        assert pool.nbytes <= pool.max_bytes and len(pool.segment_names) == 3
        extra = pool.from_numpy_array(np.ones(N))  # all busy: a one-off segment
        assert extra.segment_name not in first and len(pool.segment_names) == 3
        extra_name = extra.segment_name
        del extra
        gc.collect()
        assert not shm_path(extra_name).exists()  # unpooled: gone with its array
        del arrs
        gc.collect()
        big = pool.from_numpy_array(np.ones(2 * N))  # needs eviction of free, LRU first
        assert big.segment_name not in first
        assert pool.nbytes <= pool.max_bytes
        assert not shm_path(first[0]).exists() and not shm_path(first[1]).exists()
        assert shm_path(first[2]).exists()
        del big
    assert not any(shm_path(n).exists() for n in first)


def test_close_releases_and_reclaims(consumer):
    w, _ = consumer
    pool = SharedNumpyPool()
    a = pool.from_numpy_array(np.ones(N))
    lost = pool.from_numpy_array(np.ones(N))
    names = [a.segment_name, lost.segment_name]
    pickle.dumps(lost)  # a handle that will never be received
    del lost
    w.call("hold", "c", a)
    pool.close()
    assert shm_path(names[0]).exists()  # the child and our array still hold it
    assert not shm_path(names[1]).exists()  # reclaimed: only a dead in-transit reference
    with pytest.raises(RuntimeError, match="closed"):
        pool.empty(N)
    del a
    gc.collect()
    assert shm_path(names[0]).exists()
    w.call("drop", "c")
    assert not shm_path(names[0]).exists()


def test_hammer_no_in_flight_overwrite(consumer):
    """The pool's in-flight race (the design this replaced overwrote a buffer in flight): pooled
    arrays put in a row, each filled with its sequence number.

    The consumer checks every value on receipt and again after holding it briefly; with a
    counter taken in the feeder thread the pool would hand the in-flight buffer out again.
    """
    w, inbox = consumer
    count = 300
    with SharedNumpyPool(max_bytes=64 << 20) as pool:
        w._conn.send(("consume", (count, 30.0, 0.0005)))
        for seq in range(count):
            arr = pool.empty((N // 2,), np.int64)  # 400 kB: above the inline threshold
            arr[:] = seq
            inbox.put((seq, arr))
            del arr
        assert w._conn.poll(60)
        status, errors = w._conn.recv()
        assert status == "ok", errors
        assert errors == []
        assert pool.hits > count // 2  # reuse did happen while other items were in flight
        assert len(pool.segment_names) < count
