"""The receiver's mapping cache: reuse, generations, recreated names, bounds, liveness, fork."""

from __future__ import annotations

import gc
import multiprocessing
import os
import pickle
import time

import numpy as np
import pytest
from support import Worker  # tests/ is on sys.path (rootdir conftest, no package)

from pytest_ipcbench.shared import SharedNumpyPool, _cache, segment
from pytest_ipcbench.shared.segment import cache_info, clear_cache, shm_path

N = 100_000  # 800 kB of float64: above the inline threshold


@pytest.fixture(autouse=True)
def _no_leaks(shm_leak_guard: None) -> None:
    """Every test here must leave /dev/shm clean of our segments."""


@pytest.fixture(autouse=True)
def _empty_cache(monkeypatch):
    # these tests are about the cache: on, here and in the workers they spawn, even when
    # IPCB_MAP_CACHE=0 switched it off for the run
    monkeypatch.setattr(segment._map_cache, "enabled", True)
    monkeypatch.setenv("IPCB_MAP_CACHE", "1")
    clear_cache()
    yield
    gc.collect()
    clear_cache()


@pytest.fixture
def worker():
    w = Worker("spawn")
    yield w
    w.close()


def _mappings(name: str) -> list[str]:
    """This process's mappings of segment ``name`` (``(deleted)`` once unlinked)."""
    with open("/proc/self/maps") as f:
        return [line.strip() for line in f if f"/{name}" in line]


def _fds(name: str) -> int:
    n = 0
    for fd in os.listdir("/proc/self/fd"):
        try:
            n += f"/{name}" in os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            pass
    return n


def _wait(cond, timeout: float = 5.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():
            return True
        time.sleep(0.05)
    return cond()


def test_second_handle_reuses_the_mapping(worker):
    name = worker.call("make", "a", N)
    x = worker.call("get", "a")  # a handle: we map it (a miss)
    addr = x.__array_interface__["data"][0]
    misses = cache_info()["misses"]
    del x  # last local array: uncounted and unlocked, the mapping parked
    assert segment._map_cache.names() == [name] and len(_mappings(name)) == 1 and _fds(name) == 1
    hits = cache_info()["hits"]
    y = worker.call("get", "a")
    assert cache_info()["hits"] == hits + 1 and cache_info()["misses"] == misses
    assert y.__array_interface__["data"][0] == addr  # the same mapping, not a new one
    worker.call("write", "a", 3, 7.0)
    assert y[3] == 7.0 and y._ipcb_seg.refs() == 2  # shared memory, and we count again
    del y
    worker.call("drop", "a")  # the creator's drop is the last counted one: it unlinks
    assert not shm_path(name).exists()
    # our idle mapping of the unlinked file would keep its pages allocated: the sweep unmaps it
    assert _wait(lambda: not _mappings(name) and not _fds(name)), _mappings(name)
    assert name not in segment._map_cache.names()


def test_a_cache_hit_costs_one_fcntl_and_no_open_stat_or_mmap(worker, monkeypatch):
    """The receive path of a segment mapped before: lock on the kept descriptor, nothing else."""
    from pytest_ipcbench.shared import _atomic, _libc

    if _atomic.DEFAULT_MODE != _atomic.LIBATOMIC:
        pytest.skip("the fcntl counter (no libatomic) takes a header lock for each count")
    worker.call("make", "a", N)
    del_x = worker.call("get", "a")
    del del_x  # parked
    calls: list[str] = []

    def counting(name, real):
        def call(*args, **kwargs):
            calls.append(name)
            return real(*args, **kwargs)
        return call

    for name in ("open", "fstat", "pread"):
        monkeypatch.setattr(segment.os, name, counting(name, getattr(os, name)))
    monkeypatch.setattr(_libc, "mmap", counting("mmap", _libc.mmap))
    monkeypatch.setattr(_libc.fcntl, "fcntl", counting("fcntl", _libc.fcntl.fcntl))
    hits = cache_info()["hits"]
    y = worker.call("get", "a")
    assert cache_info()["hits"] == hits + 1
    assert calls == ["fcntl"], calls  # the holder lock; the generation proves it is our file
    monkeypatch.undo()
    del y
    worker.call("drop", "a")


def test_idle_mapping_holds_nothing_and_generation_bump_refuses_old_handles(worker):
    with SharedNumpyPool() as pool:
        a = pool.from_numpy_array(np.full(N, 1.0))
        name, gen = a.segment_name, a._ipcb_seg.generation
        blob = pickle.dumps(a)  # one handle: its bytes can be replayed later
        worker.call("hold_blob", "k", blob)
        worker.call("drop", "k")  # parked in the worker's cache
        del a
        b = pool.from_numpy_array(np.full(N, 2.0))
        assert b.segment_name == name  # an idle mapping is no holder: the pool may reuse
        assert b._ipcb_seg.generation == gen + 1
        with pytest.raises(RuntimeError, match="stale handle"):
            worker.call("hold_blob", "k", blob)  # a handle of the old contents is refused
        assert b._ipcb_seg.refs() == 1 and b._ipcb_seg.in_transit() == 0  # nothing adopted
        hits = worker.call("cache_info")["hits"]
        worker.call("hold", "k", b)
        assert worker.call("cache_info")["hits"] == hits + 1  # same file: the mapping is reused
        assert worker.call("read", "k", 0) == 2.0  # and shows the new data
        del b
        gc.collect()
        c = pool.from_numpy_array(np.full(N, 3.0))
        assert c.segment_name != name  # the revived mapping holds its lock again: busy
        worker.call("drop", "k")
        del c


def test_sigkilled_revived_holder_frees_pool_segment(worker):
    with SharedNumpyPool() as pool:
        a = pool.from_numpy_array(np.ones(N))
        name = a.segment_name
        worker.call("hold", "k", a)
        worker.call("drop", "k")
        worker.call("hold", "k", a)  # a cache hit: lock taken again
        del a
        assert pool.from_numpy_array(np.ones(N)).segment_name != name
        worker.kill()
        again = pool.from_numpy_array(np.ones(N))
        assert again.segment_name == name and again._ipcb_seg.refs() == 1
        del again


def test_unlinked_and_recreated_name_is_not_confused(worker, monkeypatch):
    monkeypatch.setattr(segment._map_cache, "sweep", lambda now=None: 0)  # keep the stale entry
    name = worker.call("make", "a", N)
    worker.call("write", "a", 0, 1.0)
    x = worker.call("get", "a")
    assert x[0] == 1.0
    del x
    assert segment._map_cache.names() == [name]
    worker.call("drop", "a")  # unlinked: our parked mapping now maps a nameless file
    assert worker.call("make_named", "b", N, name, 5.0) == name  # a new file, same name
    misses = cache_info()["misses"]
    y = worker.call("get", "b")
    assert y[0] == 5.0 and cache_info()["misses"] == misses + 1
    assert len(_mappings(name)) == 1 and "(deleted)" not in _mappings(name)[0]
    worker.call("write", "b", 1, 6.0)
    assert y[1] == 6.0
    del y
    worker.call("drop", "b")
    assert not shm_path(name).exists()


def test_cache_is_bounded_and_idle_entries_expire(worker, monkeypatch):
    monkeypatch.setattr(_cache, "MAX_ENTRIES", 3)
    names = [worker.call("make", i, N) for i in range(5)]
    for i in range(5):
        x = worker.call("get", i)
        del x
    assert segment._map_cache.names() == names[2:]  # least recently used evicted
    assert [len(_mappings(n)) for n in names] == [0, 0, 1, 1, 1]
    assert [_fds(n) for n in names] == [0, 0, 1, 1, 1]
    monkeypatch.setattr(_cache, "IDLE_TIMEOUT", 0.1)
    assert _wait(lambda: len(segment._map_cache) == 0)
    assert not any(_mappings(n) or _fds(n) for n in names)
    for i in range(5):
        worker.call("drop", i)
    assert not any(shm_path(n).exists() for n in names)


def test_deferred_probe_reclaims_after_killed_holder():
    """Survivor of a SIGKILLed holder is a parked receiver: the cache's probe unlinks."""
    creator, victim = Worker("spawn"), Worker("spawn")
    try:
        name = creator.call("make", "a", N)
        x = creator.call("get", "a")
        victim.call("hold", "a", x)
        victim.kill()
        creator.call("drop", "a")  # we still hold it: no unlink
        assert shm_path(name).exists() and x._ipcb_seg.refs() == 2  # ours + the dead one's
        del x  # parked with a probe due; the count stays above zero
        assert _wait(lambda: not shm_path(name).exists()), "the sweep's probe did not reclaim"
    finally:
        creator.close()
        victim.close()


def _report_cache(q, name):
    q.put((cache_info()["entries"], len(_mappings(name)), _fds(name)))


def test_fork_child_drops_inherited_idle_mappings(worker):
    name = worker.call("make", "a", N)
    x = worker.call("get", "a")
    del x
    assert segment._map_cache.names() == [name]
    ctx = multiprocessing.get_context("fork")
    q = ctx.SimpleQueue()
    p = ctx.Process(target=_report_cache, args=(q, name))
    p.start()
    got = q.get()
    p.join(30)
    assert p.exitcode == 0 and got == (0, 0, 0)
    assert segment._map_cache.names() == [name]  # the parent's entry is untouched
    worker.call("drop", "a")
    assert not shm_path(name).exists()


def test_cache_can_be_switched_off(worker, monkeypatch):
    monkeypatch.setattr(segment._map_cache, "enabled", False)
    name = worker.call("make", "a", N)
    x = worker.call("get", "a")
    del x
    assert len(segment._map_cache) == 0 and not _mappings(name) and not _fds(name)
    worker.call("drop", "a")


def test_handle_sweep_visits_every_size_in_every_round():
    """Sizes share the same minutes: each round sends the handle of every size, each followed
    by ``None`` (measured size after size, later sizes read a slower ``None`` whatever their
    size).  A stand-in consumer records the order; the first round is discarded."""
    from pytest_ipcbench.shared.experiment import handle_sweep

    sent: list[object] = []

    class _Recorder:
        release_times: list[float] = []

        class q:  # stands in for the consumer's queue
            @staticmethod
            def put(item):
                sent.append(None if item is None else item.nbytes)

        def transfer(self, cmd, send):
            send()
            self.release_times.append(1e-6)
            return 2e-6 if sent[-1] is not None else 1e-6

    got = handle_sweep([10**6, 2 * 10**6], rounds=3, consumer=_Recorder())
    assert sent == [10**6, None, 2 * 10**6, None] * 4
    assert got["paired"] == {"1MB": 2.0, "2MB": 2.0} and got["release"] == {"1MB": 1e-6, "2MB": 1e-6}
    assert all(len(got["samples"][k]["handle"]) == 3 for k in ("1MB", "2MB"))


def test_handle_sweep_measures_handle_and_none_per_size():
    from pytest_ipcbench.shared.experiment import handle_sweep

    got = handle_sweep([10**6, 2 * 10**6], rounds=5)
    assert got["sizes"] == [10**6, 2 * 10**6] and list(got["median"]) == ["1MB", "2MB"]
    for label in ("1MB", "2MB"):
        assert len(got["samples"][label]["handle"]) == len(got["samples"][label]["ping"]) == 5
        assert got["ratio"][label] == got["median"][label]["handle"] / got["median"][label]["ping"] > 0
        assert got["paired"][label] > 0 and set(got["p10"][label]) == {"handle", "ping"}
        assert 0 < got["release"][label] < max(got["samples"][label]["handle"])  # measured apart
