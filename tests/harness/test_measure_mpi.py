"""The harness under MPI: every rank runs these tests.

    mpiexec -n 4 python -m pytest --with-mpi -m mpi tests/harness/test_measure_mpi.py

Assertions are collective: every rank checks the same facts (the Result comes back to every rank).
"""

from __future__ import annotations

import pickle
import time
from collections import Counter

import numpy as np
import pytest

from pytest_ipcbench.backends.base import Backend, BackendSpec, get_backend, register, unavailable_reason
from pytest_ipcbench.core.group import GroupError, MPIGroup
from pytest_ipcbench.core.payloads import PayloadSpec
from pytest_ipcbench.harness import measure
from pytest_ipcbench.harness.measure import BenchSettings, BufferPayload
from pytest_ipcbench.harness.physics import below_physics
from pytest_ipcbench.harness.speed import assert_faster

pytestmark = pytest.mark.mpi

COUNTS: Counter[str] = Counter()
SLOW_S = 0.03
FAST = BenchSettings(time_budget=0.05, min_iterations=5, max_iterations=300, warmup=2)


@register
class MpiFakeChannel(Backend):
    """A channel over the group's bcast; counts its calls on each rank."""

    name = "fake-mpi-chan"
    delivery = "channel"
    node_local = False  # rides on the group's collectives, which reach every node

    def write(self, obj):
        COUNTS["write"] += 1
        self.group.bcast(obj, root=self.root)

    def read(self):
        COUNTS["read"] += 1
        return self.group.bcast(None, root=self.root)


@register
class MpiSlowLast(MpiFakeChannel):
    name = "fake-mpi-slow"

    def read(self):
        got = super().read()
        if self.group.rank == self.group.size - 1:
            time.sleep(SLOW_S)
        return got


@register
class MpiCorruptLast(MpiFakeChannel):
    name = "fake-mpi-corrupt"

    def read(self):
        got = super().read()
        if self.group.rank == self.group.size - 1:
            got = pickle.loads(pickle.dumps(got))
            got["k0000000"] = None
        return got


@pytest.fixture(scope="module")
def world():
    return MPIGroup.world()


def _everyone_agrees(world, value):
    values = world.allgather(value)
    assert all(v == values[0] for v in values), values
    return values


def test_same_iteration_count_on_every_rank(world):
    COUNTS.clear()
    result = measure.run_bench(world, BackendSpec("fake-mpi-chan", "native"), PayloadSpec("ndarray", 10_000),
                               "broadcast", FAST)
    plan = result.plan
    c = result.counters  # the counting pass: its repeats, counted, then a few under tracemalloc
    n = plan["warmup"] + plan["iterations"] + 1 + c.repeats * (c.iterations + 1)  # + 1: the traced iteration
    counts = world.allgather(dict(COUNTS))
    assert counts[0] == {"write": n} and all(c == {"read": n} for c in counts[1:])
    _everyone_agrees(world, (result.key, plan["iterations"]))
    assert all(len(v) == plan["iterations"] for v in result.samples.values())
    assert result.group == "mpi" and result.readers == world.size - 1


def test_completion_is_the_max_over_readers(world):
    if world.size < 3:
        pytest.skip("needs 2 readers")
    result = measure.run_bench(world, BackendSpec("fake-mpi-slow", "native"), PayloadSpec("dict", 1000),
                               "broadcast", BenchSettings(time_budget=0.05, min_iterations=5, warmup=1))
    s = {k: np.array(v) for k, v in result.samples.items()}
    assert np.all(s["read_max"] >= SLOW_S) and np.all(s["completion_synced"] >= s["read_max"])
    assert np.median(s["completion"]) >= SLOW_S and result.extra["clock"] == "shared"
    assert np.median(s["read_min"]) < 0.5 * np.median(s["read_max"])
    assert result.extra["read_median_by_rank"][str(world.size - 1)] >= SLOW_S


def test_verification_failure_fails_every_rank(world):
    with pytest.raises(GroupError) as info:
        measure.run_bench(world, BackendSpec("fake-mpi-corrupt", "native"), PayloadSpec("dict", 1000),
                          "broadcast", FAST)
    assert "VerificationError" in str(info.value) and f"rank {world.size - 1}" in str(info.value)


def test_pingpong_uses_two_ranks_and_the_others_wait(world):
    result = measure.run_bench(world, BackendSpec("fake-mpi-chan", "native"), BufferPayload(1), "pingpong", FAST)
    assert result.ranks == 2 and result.primary == "latency"
    assert np.allclose(result.samples["latency"], np.array(result.samples["roundtrip"]) / 2)
    _everyone_agrees(world, (result.key, len(result.samples["latency"])))


def test_granularity_under_mpi(world):
    s = BenchSettings(time_budget=0.05, min_iterations=5, warmup=1, work=1e-3)
    result = measure.run_bench(world, BackendSpec("fake-mpi-chan", "native"), PayloadSpec("tiny", 64),
                               "granularity", s)
    assert np.all(np.array(result.samples["work"]) >= 1e-3) and result.variant == "work=1ms"


def test_stream_under_mpi(world):
    result = measure.run_bench(world, BackendSpec("fake-mpi-chan", "native"), BufferPayload(4096), "stream",
                               BenchSettings(time_budget=0.05, min_iterations=5, warmup=1, window=16))
    assert result.extra["window"] == 16 and result.verified.failed == 0
    assert np.all(np.array(result.samples["delivered"]) >= np.array(result.samples["send"]))


@pytest.mark.parametrize("name", ["mpi-bcast", "mpi-pkl5", "mpi-buffer", "mpi-p2p", "shm", "zmq", "lmdb"])
def test_real_backends_through_the_harness(world, name):
    reason = unavailable_reason(name, world)
    if reason:
        pytest.skip(reason)
    result = measure.run_bench(world, BackendSpec(name, "native"), PayloadSpec("ragged2d", 100_000), "broadcast", FAST)
    assert result.verified.failed == 0 and result.verified.checked > 0


def test_buffer_bcast_beats_pickled_bcast_for_large_arrays(world):
    for name in ("mpi-buffer", "mpi-bcast"):
        reason = unavailable_reason(name, world)
        if reason:
            pytest.skip(reason)
    specs = [BackendSpec("mpi-buffer", "native"), BackendSpec("mpi-bcast", "bytes")]
    settings = BenchSettings(time_budget=0.3, min_iterations=8, max_iterations=16, warmup=1)
    results = measure.run_interleaved(world, specs, PayloadSpec("ndarray", 16 * 10**6), "broadcast", settings,
                                      rounds=4)
    buffer, pickled = results
    # Bcast moves the array's bytes once; the pickled path also pickles (a copy) and unpickles (a copy)
    c = assert_faster((buffer, "completion_touched"), (pickled, "completion_touched"), at_least=1.2)
    _everyone_agrees(world, round(c.ratio, 12))


def test_ipc_bench_fixture_under_mpi(ipc_bench, ipc_group):
    name = "mpi-buffer" if not unavailable_reason("mpi-buffer", ipc_group) else "fake-mpi-chan"
    r = ipc_bench(BackendSpec(name, "native"), PayloadSpec("ndarray", 100_000), group=ipc_group,
                  time_budget=0.05, min_iterations=5, max_iterations=50)
    values = ipc_group.allgather((r.key, len(r.samples["completion"])))
    assert all(v == values[0] for v in values)
    assert r.ranks == ipc_group.size and r.verified.failed == 0


@pytest.mark.parametrize("backend", ["mpi-p2p", "mpi-bcast", "zmq"])
def test_broadcast_completion_is_not_below_the_one_way_latency(world, backend):
    # the physics check on real channels: 1 KB to every reader cannot complete before one message
    # has crossed the channel once (harness/physics.py); both measured here, one after the other
    if world.size < 3:
        pytest.skip("needs 2 readers")
    why = unavailable_reason(backend) or get_backend(backend).unavailable(world)  # e.g. zmq across nodes
    if why:
        pytest.skip(why)
    settings = BenchSettings(time_budget=0.3, min_iterations=50, max_iterations=2000)
    pong = measure.run_bench(world, BackendSpec(backend, "bytes"), BufferPayload(1000), "pingpong", settings)
    bcast = measure.run_bench(world, BackendSpec(backend, "bytes"), PayloadSpec("dict", 1000), "broadcast", settings)
    assert bcast.extra["clock"] == "shared"
    assert below_physics([pong, bcast]) == [], [str(v) for v in below_physics([pong, bcast])]
