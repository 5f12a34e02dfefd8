"""The counting pass (harness/count.py) and the exact cost of each local built-in backend.

Two local ranks, broadcast (1 writer, 1 reader), 1 KiB and 1 MiB. Only counters that are exact
(every repeat counted the same: measured, ``exact()``) are asserted exactly; the figures are
what this machine measured (docs/measurements/2026-11-counters.md), and a change in them is what a counter verdict
reports. System call counts need perf_event_open and tracefs: without them those tests skip with
the reason, and the counters are absent (never 0).
"""

from __future__ import annotations

import os
import pickle
import time
from typing import Any

import pytest

from pytest_ipcbench.backends.base import BACKENDS, BackendSpec, register_backend, unavailable_reason
from pytest_ipcbench.backends.shm import SharedMemoryBackend
from pytest_ipcbench.core.counters import COUNTERS, DEEP_COUNTERS, CounterAbsent, RankCounters
from pytest_ipcbench.core.group import in_mpi_job
from pytest_ipcbench.core.local import LocalWorld
from pytest_ipcbench.core.payloads import PayloadSpec
from pytest_ipcbench.core.probes import AllocProbe, CounterProbe, PickleCounter
from pytest_ipcbench.core.syscalls import syscall_unavailable
from pytest_ipcbench.harness.measure import BenchSettings, BufferPayload, run_bench

pytestmark = pytest.mark.skipif(in_mpi_job(), reason="local process groups: not inside an MPI job")

FAST = BenchSettings(time_budget=0.05, min_iterations=5, max_iterations=200, warmup=2)
KIB, MIB = 1024, 2**20
NO_SYSCALLS = syscall_unavailable()
needs_syscalls = pytest.mark.skipif(NO_SYSCALLS is not None, reason=f"system calls not countable: {NO_SYSCALLS}")


@pytest.fixture(scope="module")
def world():
    with LocalWorld(2, timeout=120) as w:
        yield w


def measure(world, name, mode, size, **settings):
    if unavailable_reason(name):
        pytest.skip(unavailable_reason(name))
    s = BenchSettings(**{**FAST.__dict__, **settings})
    return run_bench(world.group(2), BackendSpec(name, mode), PayloadSpec("ndarray", size), "broadcast", s)


def exactly(rank: RankCounters, name: str, value: int | float) -> None:
    assert rank.exact(name), f"{rank.role} {name} is not exact: spread {rank.spread(name)} ({rank.totals[name]})"
    assert rank.value(name) == value, f"{rank.role} {name}: {rank.value(name)} per message, expected {value}"


def no_system_calls(rank: RankCounters) -> None:
    """No system call per message, in the median repeat: a process's timer threads (the
    shared-array cache's sweeper reads /proc every few seconds) may add some to one repeat."""
    for name in ("syscalls.data", "syscalls.mapping", "syscalls.total"):
        assert rank.value(name) == 0, (name, rank.totals[name])


# ----------------------------------------------------------------------- the sources alone


def test_pickle_counter_sees_pickle_and_forking_pickler_and_restores_them():
    from multiprocessing.reduction import ForkingPickler

    before = (pickle.dumps, pickle.loads, ForkingPickler.__dict__["dumps"], ForkingPickler.__dict__["loads"])
    counter = PickleCounter()
    counter.patch()
    try:
        data = pickle.dumps(b"x" * 1000)
        pickle.loads(data)
        fp = ForkingPickler.dumps([1, 2])
        ForkingPickler.loads(fp)
    finally:
        counter.restore()
    assert counter.counts["pickle.dumps"] == 2 and counter.counts["pickle.loads"] == 2
    assert counter.counts["pickle.dumps_bytes"] == len(data) + len(fp)
    assert (pickle.dumps, pickle.loads, ForkingPickler.__dict__["dumps"], ForkingPickler.__dict__["loads"]) == before


def _unpickle_then_copy(payload: bytes, copies: int) -> None:
    """As shm's bytes mode with a copy on the reader: a transient of the payload's size (the bytes
    read), the value from it, the transient freed, then ``copies`` copies of the value."""
    value = pickle.loads(bytearray(payload))
    for _ in range(copies):
        value = bytearray(value)


def test_alloc_probe_counts_a_copy_that_the_peak_cannot_see():
    payload = pickle.dumps(b"x" * MIB)
    seen = {}
    with AllocProbe() as alloc:
        for copies in (0, 1, 0, 1):
            start = alloc.start()
            _unpickle_then_copy(payload, copies)
            seen[copies] = alloc.stop(start)
    (peak0, net0, bytes0), (peak1, net1, bytes1) = seen[0], seen[1]
    assert abs(peak1 - peak0) < 4096  # the copy is no higher than the transient: the peak misses it
    assert abs(bytes1 - bytes0 - MIB) <= 512  # one copy of 1 MiB (its header, less the probe's own objects)
    assert bytes0 >= 2 * MIB  # the bytes read and the value
    assert abs(net1 - net0) < 4096


@needs_syscalls
def test_probe_counts_each_write_system_call_exactly(tmp_path):
    fd = open(tmp_path / "f", "wb", buffering=0)
    with CounterProbe() as probe:
        probe.snapshot()  # the first snapshot pays for first calls
        totals = []
        for n in (0, 7, 0, 7):
            a = probe.snapshot()
            for _ in range(n):
                fd.write(b"abc")
            b = probe.snapshot()
            totals.append({k: b[k] - a[k] for k in b})
    fd.close()
    empty, seven = totals[2], totals[3]
    for key, per_write in (("syscalls.data", 1), ("syscalls.total", 1), ("io.syscw", 1), ("io.wchar", 3)):
        assert seven[key] - empty[key] == 7 * per_write, key
    assert seven["syscalls.mapping"] == empty["syscalls.mapping"]


def test_without_perf_the_counters_are_absent_with_the_reason():
    with CounterProbe(syscalls=False) as probe:
        snap = probe.snapshot()
    assert "syscalls.data" not in snap
    assert probe.absent["syscalls.data"] == "system call counting turned off"


# ---------------------------------------------------------------------- the counting pass


def test_counting_pass_covers_every_rank_and_repeat_and_keeps_timed_samples_apart(world):
    r = measure(world, "shm", "native", KIB, count_repeats=4)
    c = r.counters
    assert c is not None and c.repeats == 4 and [x.role for x in c.ranks] == ["writer", "reader"]
    assert c.messages == c.iterations >= 2
    assert set(c.writer.totals) | set(c.writer.absent) == set(COUNTERS) - set(DEEP_COUNTERS)  # deep mode is apart (harness/deep.py)
    assert all(len(v) == 4 for v in c.writer.totals.values())
    # the timed samples are the plan's, untouched by the counting pass
    assert len(r.samples["completion"]) == r.plan["iterations"]


def test_counting_off_leaves_no_counters_and_says_why(world):
    r = measure(world, "shm", "native", KIB, count=False)
    assert r.counters is None and "turned off" in r.extra["counting"]
    with pytest.raises(CounterAbsent, match="turned off"):
        r.cost("reader", "syscalls.data")


def test_counting_above_the_size_cap_is_skipped(world):
    r = measure(world, "shm", "native", KIB, count_max_bytes=100)
    assert r.counters is None and "count_max_bytes" in r.extra["counting"]


def test_stream_counts_per_message_not_per_window(world):
    r = run_bench(world.group(2), BackendSpec("mp-queue", "native"), BufferPayload(KIB), "stream", FAST)
    c = r.counters
    assert c.messages_per_iteration == r.extra["window"] > 1
    exactly(c.writer, "pickle.dumps", 1)  # the feeder thread's, one per message (not per window)
    exactly(c.reader, "pickle.loads", 1)


class WaitWrites(SharedMemoryBackend):
    """shm whose reader writes a byte to /dev/null after a read that waited: a data call that
    follows timing, as a reader that polls or takes what has arrived so far makes one."""

    name = "test-wait-writes"
    internal = True  # never offered to the other tests of this session

    def read(self) -> Any:
        t0 = time.perf_counter()
        got = super().read()
        if time.perf_counter() - t0 > 100e-6:
            fd = os.open(os.devnull, os.O_WRONLY)
            os.write(fd, b"x")
            os.close(fd)
        return got


@needs_syscalls
def test_a_count_that_follows_timing_is_statistical_not_exact(world):
    """The counting pass's repeats take turns (harness/count.py TURNS): the writes late, so the
    reader waits, then the reads late. Without them a quiet run's repeats all read without waiting
    and call the extra write exact; another run under load calls it +1 per message: a false verdict."""
    register_backend(WaitWrites)
    try:  # a ping-pong: each side reads in turn, where a store's broadcast reads after a barrier
        c = run_bench(world.group(2), BackendSpec("test-wait-writes", "native"), BufferPayload(KIB), "pingpong",
                      FAST).counters
    finally:
        BACKENDS.unregister("test-wait-writes")
    for rank in (c.writer, c.reader):  # each side reads in turn: each waits in the turn of late writes
        assert not rank.exact("syscalls.data"), (rank.role, rank.totals["syscalls.data"])
        assert rank.totals["syscalls.data"][1] >= c.messages  # the turn of late writes: every read waited


# ------------------------------------------------------------------ built-in backends' costs


@pytest.mark.alone  # zero system calls in total: a reader or writer the scheduler delays waits (futex)
@pytest.mark.parametrize("size", [KIB, MIB])
def test_shm_handle_path_costs_no_system_call_and_no_copy(world, size):
    c = measure(world, "shm", "native", size).counters
    for rank in (c.writer, c.reader):
        for name in ("pickle.dumps", "pickle.loads", "io.wchar"):
            exactly(rank, name, 0)
        # the shared-array cache's sweeper thread reads /proc now and then (every few seconds,
        # not per message): zero in the median repeat
        for name in ("io.rchar", "faults.minor"):
            assert rank.value(name) == 0, (name, rank.totals[name])
        if NO_SYSCALLS is None:
            no_system_calls(rank)
        else:
            assert "syscalls.total" in rank.absent
    # the reader's view is no copy: its allocation peak is far below the payload
    assert c.reader.value("alloc.peak_bytes") < size / 2 or size == KIB
    assert c.reader.value("alloc.bytes") < size / 2 or size == KIB


@pytest.mark.parametrize("size", [KIB, MIB])
def test_shm_bytes_mode_pickles_once_each_side_and_the_reader_copies(world, size):
    r = measure(world, "shm", "bytes", size)
    c = r.counters
    exactly(c.writer, "pickle.dumps", 1)
    exactly(c.writer, "pickle.loads", 0)
    exactly(c.reader, "pickle.loads", 1)
    exactly(c.reader, "pickle.dumps", 0)
    assert c.writer.value("pickle.dumps_bytes") == c.reader.value("pickle.loads_bytes") >= r.nbytes
    if NO_SYSCALLS is None:
        exactly(c.writer, "syscalls.data", 0)
        exactly(c.reader, "syscalls.data", 0)
    if size == MIB:  # the unpickled array is a copy of the payload: visible in the peak
        assert c.reader.value("alloc.peak_bytes") >= r.nbytes
        # and it is the only one: unpickled straight from the shared memory, one payload allocated
        assert r.nbytes <= c.reader.value("alloc.bytes") < 1.2 * r.nbytes


@pytest.mark.parametrize("size", [KIB, MIB])
def test_mp_queue_native_one_pickle_each_side_and_bytes_through_the_pipe(world, size):
    r = measure(world, "mp-queue", "native", size)
    c = r.counters
    exactly(c.writer, "pickle.dumps", 1)  # the feeder thread's ForkingPickler.dumps
    exactly(c.reader, "pickle.loads", 1)
    # what the writer puts into the pipe is what the reader takes out, byte for byte, in every
    # repeat (not always exact over repeats: the pickled sequence number grows a byte at 256)
    assert c.writer.totals["io.wchar"] == c.reader.totals["io.rchar"]
    assert c.reader.value("io.rchar") >= r.nbytes
    if NO_SYSCALLS is None:
        exactly(c.writer, "syscalls.data", 1 if size == KIB else 2)  # header and body above 16 KiB
        exactly(c.reader, "syscalls.data", 2 if size == KIB else 17)  # the pipe's 64 KiB per read
    if size == MIB:
        assert c.reader.value("alloc.peak_bytes") >= r.nbytes  # the bytes read, then the array


@pytest.mark.alone  # zero system calls in total: a reader or writer the scheduler delays waits (futex)
@pytest.mark.parametrize("size", [KIB, MIB])
def test_lmdb_native_reads_the_map_without_system_calls(world, size):
    c = measure(world, "lmdb", "native", size).counters
    for rank in (c.writer, c.reader):
        exactly(rank, "pickle.loads", 0)
        exactly(rank, "io.rchar", 0)
        if NO_SYSCALLS is None:
            no_system_calls(rank)


@pytest.mark.parametrize("mode, dumps, loads", [("bytes", 1, 1), ("native", 0, 0)])
def test_zmq_pickles_only_in_bytes_mode(world, mode, dumps, loads):
    r = measure(world, "zmq", mode, MIB)
    c = r.counters
    exactly(c.writer, "pickle.dumps", dumps)
    exactly(c.reader, "pickle.loads", loads)
    assert "syscalls.data" in c.timing  # recorded as timing-driven: never compared across runs
    if NO_SYSCALLS is None:
        # the socket's bytes go through the kernel on both sides (counted, exact or not: zmq's
        # I/O thread batches as timing allows), at least once per payload
        assert c.reader.value("syscalls.data") >= 1
        assert c.writer.value("syscalls.data") >= 1


def test_pingpong_counts_one_round_trip_per_message(world):
    r = run_bench(world.group(2), BackendSpec("shm", "bytes"), BufferPayload(KIB), "pingpong", FAST)
    c = r.counters
    # rank 0 sends and reads the echo; rank 1 (the "reader") reads and sends back
    for rank in (c.writer, c.reader):
        exactly(rank, "pickle.dumps", 1)
        exactly(rank, "pickle.loads", 1)
