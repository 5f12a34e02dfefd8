"""The harness's rules (measure.py), on local process groups with small fake backends.

The fake backends live in this module: the functions given to ``LocalWorld.run`` are defined here
too, so every worker imports this module (and registers the fakes) before it runs them.
"""

from __future__ import annotations

import os
import pickle
import shutil
import time
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

from pytest_ipcbench.backends.base import Backend, BackendSpec, register, unavailable_reason
from pytest_ipcbench.core import names
from pytest_ipcbench.core.group import GroupError, in_mpi_job
from pytest_ipcbench.core.local import LocalWorld
from pytest_ipcbench.core.payloads import PAYLOADS, Kind, PayloadSpec, register_payload
from pytest_ipcbench.harness import measure
from pytest_ipcbench.harness.clock import rank_clocks
from pytest_ipcbench.harness.measure import BenchSettings, BufferPayload
from pytest_ipcbench.harness.payload import touch
from pytest_ipcbench.harness.plan import Plan, static_plan, timed_plan
from pytest_ipcbench.harness.scenarios import delivery_times

pytestmark = pytest.mark.skipif(in_mpi_job(), reason="local process groups: not inside an MPI job")

COUNTS: Counter[str] = Counter()
SLOW_S = 0.05
FAST = BenchSettings(time_budget=0.05, min_iterations=5, max_iterations=200, warmup=2)


# ------------------------------------------------------------------------------ fake backends


@register
class FakeChannel(Backend):
    """A channel over the group's own bcast (collective: writer and readers call it once)."""

    name = "fake-chan"
    delivery = "channel"

    def write(self, obj):
        COUNTS["write"] += 1
        self.group.bcast(pickle.dumps(obj) if self.mode == "bytes" else obj, root=self.root)

    def read(self):
        COUNTS["read"] += 1
        got = self.group.bcast(None, root=self.root)
        return pickle.loads(got) if self.mode == "bytes" else got


@register
class SlowReader(FakeChannel):
    """The last rank reads SLOW_S later than the others."""

    name = "fake-slow"

    def read(self):
        got = super().read()
        if self.group.rank == self.group.size - 1:
            time.sleep(SLOW_S)
        return got


@register
class Corrupting(FakeChannel):
    """The last rank receives a damaged copy."""

    name = "fake-corrupt"

    def read(self):
        got = super().read()
        if self.group.rank == self.group.size - 1:
            got = np.array(got, copy=True)
            got.reshape(-1)[0] += 1
        return got


@register
class FileStore(Backend):
    """A store in files: the writer publishes version N, readers wait for a newer version."""

    name = "fake-store"
    delivery = "store"
    stale = False

    def setup(self):
        path = str(names.private_dir("fakestore")) if self.group.rank == self.root else None
        self.path = Path(self.group.bcast(path, root=self.root))
        self.version = 0
        self.seen = 0

    def write(self, obj):
        COUNTS["write"] += 1
        self.version += 1
        tmp = self.path / f".v{self.version}"
        tmp.write_bytes(pickle.dumps(obj))
        os.replace(tmp, self.path / f"v{self.version}")

    def read(self):
        COUNTS["read"] += 1
        deadline = time.monotonic() + 30
        while not (self.path / f"v{self.seen + 1}").exists():
            if time.monotonic() > deadline:
                raise TimeoutError("no new version")
            time.sleep(1e-4)
        self.seen += 1
        version = 1 if self.stale else self.seen
        return pickle.loads((self.path / f"v{version}").read_bytes())

    def close(self):
        self.group.barrier()
        if self.group.rank == self.root:
            shutil.rmtree(self.path, ignore_errors=True)


@register
class StaleStore(FileStore):
    """Readers always get the first value written."""

    name = "fake-stale"
    stale = True


# ------------------------------------------------------------------------------ run on ranks


def _bench_counting(group, spec, payload, scenario, settings):
    COUNTS.clear()
    result = measure.bench(group, spec, payload, scenario, settings)
    return result, dict(COUNTS)


def _bench(group, spec, payload, scenario, settings):
    return measure.bench(group, spec, payload, scenario, settings)


def _clocks(group, force_offsets):
    return rank_clocks(group, 0, force_offsets)


def _interleaved(group, specs, payload, scenario, settings, rounds):
    return measure.bench_interleaved(group, specs, payload, scenario, settings, rounds)


@register
class Paced(FakeChannel):
    """Every read takes PACE_S: an iteration of known length."""

    name = "fake-paced"

    def read(self):
        got = super().read()
        time.sleep(PACE_S)
        return got


PACE_S = 0.004
FIRST_CHECK_S = 0.2
_checked_before: list[bool] = []


def _cold_build(size, seed):
    return bytes([seed % 256]) * size


def _cold_equal(a, b):
    """The first check in a process is slow (a first touch, a preempted check), the rest are free."""
    if not _checked_before:
        _checked_before.append(True)
        time.sleep(FIRST_CHECK_S)
    return a == b




@pytest.fixture(scope="module")
def world():
    with LocalWorld(4, timeout=60) as w:
        yield w


# ----------------------------------------------------------------------------------- plans


def test_static_plan_scales_iterations_down_with_size():
    s = BenchSettings()
    assert static_plan(1, s) == Plan(warmup=100, iterations=10_000, limited_by="count")
    assert static_plan(16 * 1024, s).iterations == 10_000
    assert (static_plan(16 * 1024 + 1, s).iterations, static_plan(16 * 1024 + 1, s).warmup) == (1000, 10)
    assert (static_plan(2**20 + 1, s).iterations, static_plan(2**20 + 1, s).warmup) == (100, 2)
    assert (static_plan(64 * 10**6 + 1, s).iterations, static_plan(64 * 10**6 + 1, s).warmup) == (20, 1)


def test_static_plan_caps_by_count_and_volume_but_keeps_a_floor():
    assert static_plan(1, BenchSettings(max_iterations=300)).iterations == 300
    p = static_plan(10**8, BenchSettings(volume_cap=10**9))
    assert (p.iterations, p.limited_by) == (10, "volume")
    p = static_plan(10**9, BenchSettings(volume_cap=10**9, min_iterations=5))
    assert (p.iterations, p.limited_by) == (5, "min")
    # a stream window moves window * size per iteration
    assert static_plan(10**6, BenchSettings(volume_cap=10**9), per_iteration_bytes=64 * 10**6).iterations == 15
    assert static_plan(1, BenchSettings(warmup=0)).warmup == 1  # at least one warm-up, always


def test_timed_plan_caps_by_time_and_chooses_verification():
    s = BenchSettings(time_budget=1.0)
    static = static_plan(1000, s)
    p = timed_plan(static, per_iteration=0.01, verify_cost=0.0005, settings=s)
    assert (p.iterations, p.limited_by, p.verify) == (100, "time", "every")
    # verification costs more than half an iteration: first and last only, and it no longer counts
    p = timed_plan(static, per_iteration=0.01, verify_cost=0.008, settings=s)
    assert p.verify == "ends" and p.iterations == 500
    assert timed_plan(static, 10.0, 0.0, s).iterations == s.min_iterations
    assert timed_plan(static, 0.01, 0.009, BenchSettings(verify="every")).verify == "every"
    assert timed_plan(static, 1e-6, 0.0, s).iterations == static.iterations


def test_one_slow_check_does_not_make_the_plan_unbounded(world):
    # One check as long as 50 iterations (the first, cold) used to be set against the mean
    # iteration: "ends", an iteration of ~0 s, and the static count (here 200) instead of the
    # budget's ~10; the same case then got 8 timed iterations in one run and 1000 in the next.
    settings = BenchSettings(time_budget=0.05, min_iterations=5, max_iterations=200, warmup=3)
    # registered for this test only (the workers get it with the run): a kind left registered
    # showed up in every later test's list of payload kinds
    register_payload("cold-first-check", Kind(_cold_build, _cold_equal, len))
    try:
        result = world.run(_bench, BackendSpec("fake-paced", "bytes"), PayloadSpec("cold-first-check", 100),
                           "broadcast", settings)[0]
    finally:
        PAYLOADS.unregister("cold-first-check")
    plan = result.plan
    assert plan["verify"] == "every"  # the checks cost nothing after the first
    assert plan["limited_by"] in ("time", "min") and plan["iterations"] <= settings.time_budget / PACE_S


def test_plan_verify_at():
    assert all(Plan(1, 5, "every").verify_at(i) for i in range(5))
    assert [Plan(1, 5, "ends").verify_at(i) for i in range(5)] == [True, False, False, False, True]


def test_settings_are_checked():
    for bad in ({"verify": "sometimes"}, {"time_budget": 0}, {"min_iterations": 0},
                {"min_iterations": 9, "max_iterations": 3}, {"window": 0}, {"work": -1}):
        with pytest.raises(ValueError):
            BenchSettings(**bad)


# -------------------------------------------------------------------------- payload, touch


def test_buffer_payload_has_the_exact_size_and_seeds_differ():
    p = BufferPayload(1)
    assert p.build().nbytes == 1 and p.nbytes == 1 and p.id == "buffer-1B"
    big = BufferPayload(1000)
    a, b = big.build(1), big.build(2)
    assert a.nbytes == 1000 and not big.equal(a, b) and big.equal(a, a.copy())
    assert big.equal(a.tobytes(), a) and big.equal(memoryview(a), a)
    assert not big.equal(a[:10], a) and not big.equal(object(), a)
    with pytest.raises(ValueError):
        BufferPayload(0)


@pytest.mark.parametrize("kind", ["dict", "ndarray", "array1d", "ragged2d", "tiny"])
@pytest.mark.parametrize("size", [1, 1000, 123_457, 2_000_000])
def test_payload_bytes_without_building(kind, size):
    spec = PayloadSpec(kind, size)
    assert measure.payload_bytes(spec) == spec.nbytes


def test_touch_reads_every_buffer():
    a = np.ones(10_000, dtype=np.uint8)
    assert touch(a) == len(range(0, 10_000, 64))
    assert touch(np.ones((100, 100), dtype=np.float32)[:, ::2]) == 1  # not contiguous: summed
    assert touch([a, a]) == 2 * touch(a)
    assert touch(bytes(a)) == touch(a)
    assert touch({"k": 1, "j": 2}) == 2
    assert touch(np.empty(0)) == 0


# ---------------------------------------------------------------------------- the harness


def test_same_iteration_count_on_every_rank(world):
    outs = world.run(_bench_counting, BackendSpec("fake-chan", "native"), PayloadSpec("ndarray", 10_000),
                     "broadcast", FAST)
    result, counts = outs[0][0], [c for _, c in outs]
    plan = result.plan
    # warm-up, timed, and the counting pass: its repeats, counted, then one iteration under
    # the profile function that is not kept (it fills caches) and one traced per repeat
    c = result.counters
    n = plan["warmup"] + plan["iterations"] + 1 + c.repeats * (c.iterations + 1)  # + 1: the traced iteration
    assert counts[0] == {"write": n}
    assert all(c == {"read": n} for c in counts[1:])
    assert all(len(v) == plan["iterations"] for v in result.samples.values())
    assert result.readers == 3 and result.verified.failed == 0
    assert result.verified.checked >= 3 * (plan["warmup"] + 2)


def test_completion_is_the_max_over_readers(world):
    result = world.run(_bench, BackendSpec("fake-slow", "bytes"), PayloadSpec("dict", 1000), "broadcast",
                       BenchSettings(time_budget=0.05, min_iterations=5, warmup=1))[0]
    s = {k: np.array(v) for k, v in result.samples.items()}
    assert np.all(s["read_max"] >= SLOW_S)  # the last rank sleeps that long in each read
    assert np.median(s["read_min"]) < 0.5 * np.median(s["read_max"])
    assert np.all(s["read_min"] <= s["read_avg"]) and np.all(s["read_avg"] <= s["read_max"])
    assert np.all(s["completion_synced"] >= s["read_max"])  # barrier exit -> read done covers the read
    # delivery, on one clock: the writer starts no later than the slow reader's sleep begins
    assert np.median(s["completion"]) >= SLOW_S and result.extra["clock"] == "shared"
    by_rank = result.extra["read_median_by_rank"]
    assert by_rank["3"] >= SLOW_S and by_rank["1"] < by_rank["3"]


def test_delivery_is_timed_on_the_writers_clock():
    # the writer starts at 10.0 and 20.0; reader 1's clock is 5 s ahead of the writer's
    started = [10.0, 20.0]
    arrived = {1: [15.001, 25.004], 2: [10.002, 20.001]}
    got = delivery_times(started, arrived, offsets=(0.0, 5.0, 0.0))
    assert np.allclose(got, [0.002, 0.004])


def test_offset_corrected_clocks_agree_with_the_shared_one(world):
    # every worker runs on this host: the estimated offsets are ~0, within their own error bound
    outs = world.run(_clocks, True)
    clocks = outs[0]
    assert all(c == clocks for c in outs)  # the same on every rank
    assert clocks.method == "offset-corrected" and clocks.offsets[0] == 0.0
    assert 0 < clocks.error < 0.05
    assert all(abs(o) <= clocks.error + 1e-6 for o in clocks.offsets)
    shared = world.run(_clocks, False)[0]
    assert shared.method == "shared" and shared.offsets == (0.0,) * 4 and shared.error == 0.0


def test_broadcast_with_offset_clocks_measures_the_same_delivery(world):
    settings = BenchSettings(time_budget=0.05, min_iterations=5, warmup=1, clock="offset")
    result = world.run(_bench, BackendSpec("fake-slow", "bytes"), PayloadSpec("dict", 1000), "broadcast", settings)[0]
    assert result.extra["clock"] == "offset-corrected" and result.extra["clock_error_s"] > 0
    assert np.median(result.samples["completion"]) >= SLOW_S - result.extra["clock_error_s"]
    with pytest.raises(ValueError, match="clock must be one of"):
        BenchSettings(clock="ntp")


def test_a_reader_that_gets_other_data_fails_every_rank(world):
    with pytest.raises(GroupError) as info:
        world.run(_bench, BackendSpec("fake-corrupt", "native"), PayloadSpec("ndarray", 10_000), "broadcast", FAST)
    text = str(info.value)
    assert "VerificationError" in text and "rank 3" in text and "differ" in text


def test_a_stale_store_is_caught_by_alternating_payloads(world):
    with pytest.raises(GroupError, match="VerificationError"):
        world.run(_bench, BackendSpec("fake-stale", "bytes"), PayloadSpec("dict", 1000), "broadcast", FAST)


def test_store_write_then_read(world):
    result = world.run(_bench, BackendSpec("fake-store", "bytes"), PayloadSpec("ndarray", 10_000), "broadcast", FAST)[0]
    s = {k: np.array(v) for k, v in result.samples.items()}
    assert result.delivery == "store" and result.primary == "completion"
    assert np.allclose(s["completion"], s["write"] + s["read_max"])
    assert np.allclose(s["completion_touched"], s["write"] + s["touched_max"])
    assert "completion_synced" in s and result.verified.failed == 0


def test_stream_reports_send_only_and_delivered(world):
    result = world.run(_bench, BackendSpec("fake-chan", "native"), BufferPayload(1000), "stream",
                       replace_settings(FAST, window=8))[0]
    assert result.primary == "delivered" and result.extra["window"] == 8
    s = {k: np.array(v) for k, v in result.samples.items()}
    assert set(s) >= {"send", "delivered", "read_avg", "read_max"}
    assert np.all(s["delivered"] >= s["send"])  # delivery is acknowledged after the sends
    with pytest.raises(GroupError, match="channel"):
        world.run(_bench, BackendSpec("fake-store", "bytes"), BufferPayload(100), "stream", FAST)


def test_pingpong_latency_is_half_the_round_trip(world):
    result = world.run(_bench, BackendSpec("fake-chan", "native"), BufferPayload(1), "pingpong", FAST, ranks=2)[0]
    rtt, lat = np.array(result.samples["roundtrip"]), np.array(result.samples["latency"])
    assert result.ranks == 2 and np.allclose(lat, rtt / 2) and result.primary == "latency"
    with pytest.raises(GroupError, match="2 ranks"):
        world.run(_bench, BackendSpec("fake-chan", "native"), BufferPayload(1), "pingpong", FAST)


def test_granularity_subtracts_the_work(world):
    s = replace_settings(FAST, work=0.002)
    result = world.run(_bench, BackendSpec("fake-chan", "bytes"), PayloadSpec("tiny", 64), "granularity", s, ranks=2)[0]
    rtt, work, over = (np.array(result.samples[k]) for k in ("roundtrip", "work", "overhead"))
    assert np.all(work >= 0.002) and np.allclose(over, rtt - work) and np.all(rtt >= work)
    assert result.variant == "work=2ms" and result.key.endswith("/work=2ms")


def test_interleaved_cases_keep_their_own_samples(world):
    specs = [BackendSpec("fake-chan", "bytes"), BackendSpec("fake-chan", "native")]
    results = world.run(_interleaved, specs, PayloadSpec("ndarray", 10_000), "broadcast", FAST, 3)[0]
    assert [r.mode for r in results] == ["bytes", "native"]
    for r in results:
        assert len(r.samples["completion"]) == r.plan["iterations"]


def test_run_bench_returns_rank_0s_result(world):
    result = measure.run_bench(world.group(2), BackendSpec("fake-chan", "bytes"), PayloadSpec("tiny", 64),
                               "pingpong", FAST)
    assert result.key == "pingpong/fake-chan/bytes/tiny/64/r2"


def test_unknown_scenario():
    with pytest.raises(ValueError, match="scenario"):
        measure.bench_interleaved(LocalWorld(1).group(1), [BackendSpec("fake-chan")], BufferPayload(1), "nope")


# ----------------------------------------------------------------------------- copy, efficiency


def test_copy_bandwidth_and_efficiency():
    r = measure.copy_result(1_000_000, time_budget=0.02)
    assert r.scenario == "copy" and r.primary == "copy" and r.throughput() > 0
    assert len(r.samples["copy"]) >= 5
    ref = measure.CopyReference(0.01)
    bw = ref.bandwidth(10_000)
    assert bw > 0 and ref.bandwidth(10_000) == bw  # measured once per size
    fake = measure.Result("broadcast", "x", "bytes", "ndarray", 10_000, 4,
                          {"completion": [0.001] * 3, "completion_touched": [0.002] * 3}, nbytes=10_000)
    assert fake.efficiency() is None  # no reference yet
    done = measure.with_copy_reference(fake, 1e8, test="t")
    assert fake.copy_bandwidth is None and "test" not in fake.extra  # built once: a new Result, not a change
    fake = done
    assert fake.extra["test"] == "t"
    assert fake.bandwidth_metric() == "completion_touched"
    assert fake.bandwidth() == pytest.approx(5e6) and fake.efficiency() == pytest.approx(0.05)


# ------------------------------------------------------------------------- real backends


@pytest.mark.parametrize("mode", ["bytes", "native"])
def test_shm_backend_through_the_harness(world, mode):
    reason = unavailable_reason("shm", world.group(4))
    if reason:
        pytest.skip(reason)
    result = measure.run_bench(world.group(4), BackendSpec("shm", mode), PayloadSpec("ndarray", 100_000),
                               "broadcast", FAST)
    assert result.delivery == "store" and result.verified.failed == 0
    assert result.summary("completion_touched").median >= result.summary("read_max").median


# ------------------------------------------------------------------ the fixture, pytest-benchmark
# ipc_bench feeding the session's report and pytest-benchmark (each call's samples as its rounds,
# the replay clock, the case in extra_info) in a pytest run: tests/plugin/test_pytest_route.py


def test_replay_clock_gives_each_round_its_sample():
    from pytest_ipcbench.plugin.fixtures.bench import ReplayClock

    clock = ReplayClock()
    clock.load([0.5, 0.25, 2.0])
    spans = []
    for _ in range(3):
        t0 = clock()
        clock.tick()
        spans.append(clock() - t0)
    assert spans == [0.5, 0.25, 2.0]


def replace_settings(s: BenchSettings, **kw) -> BenchSettings:
    from dataclasses import replace

    return replace(s, **kw)
