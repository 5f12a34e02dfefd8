"""A channel broadcast that completes faster than one message crosses the channel is an error."""

from __future__ import annotations

import numpy as np

from pytest_ipcbench.harness.physics import below_physics, judge
from pytest_ipcbench.results.results import Result


def _result(scenario, backend, size, metric, median, delivery="channel", mode="bytes", n=400):
    rng = np.random.default_rng(size)
    samples = list(median * (1 + 0.05 * rng.standard_normal(n)))
    return Result(scenario, backend, mode, "buffer" if scenario == "pingpong" else "dict", size,
                  2 if scenario == "pingpong" else 4, {metric: samples}, nbytes=size, delivery=delivery,
                  primary=metric)


def test_a_broadcast_faster_than_one_message_is_flagged():
    pong = _result("pingpong", "zmq", 1, "latency", 50e-6)
    fast = _result("broadcast", "zmq", 1000, "completion", 8e-6)
    slow = _result("broadcast", "zmq", 1000, "completion", 200e-6, mode="native")  # other mode: falls back to any
    big = _result("broadcast", "zmq", 10**6, "completion", 8e-6)  # above 1 KB: not checked
    store = _result("broadcast", "shm", 1000, "completion", 1e-6, delivery="store")  # a store is read, not delivered
    found = below_physics([pong, fast, slow, big, store])
    assert [v.broadcast for v in found] == [fast]
    text = str(found[0])
    assert "harness error" in text and fast.key in text and pong.key in text


def test_within_noise_is_not_flagged():
    # the ping-pong's median is 10 us, its 5th percentile ~9.2 us: a completion of 9.5 us is physics
    pong = _result("pingpong", "mpi-p2p", 1, "latency", 10e-6)
    near = _result("broadcast", "mpi-p2p", 1, "completion", 9.5e-6, n=20)  # 5% under the median, 5% noise
    assert below_physics([pong, near]) == []
    assert below_physics([near]) == []  # no ping-pong of that backend: nothing to check against


def test_selfcheck_marks_a_broadcast_below_its_own_pingpong():
    from pytest_ipcbench.harness.refcheck import RefRow, check_physics

    nan = float("nan")

    def row(scenario, size, ours, fast_end=nan, mode="native"):
        return RefRow("zmq", mode, scenario, size, "", ours, nan, nan, nan, nan, ranks=4, fast_end=fast_end)

    pong = row("pingpong", 1, 40e-6, fast_end=30e-6)
    ok = row("broadcast", 1024, 45e-6)
    bad = row("broadcast", 1, 8e-6)
    other_mode = row("broadcast", 1, 8e-6, mode="bytes")  # a crossing of any mode bounds it
    assert check_physics([pong, ok, bad, other_mode]) == [bad, other_mode]
    assert bad.verdict == "BELOW PHYSICS" and not bad.ok and "harness error" in bad.below_physics
    assert ok.verdict == "physics ok" and ok.ok


def test_the_bound_is_the_fastest_crossing_of_any_mode():
    """A ping-pong in its slow speed must not make a true broadcast a harness error: in a quiet
    selfcheck mp-queue's native 1 KB ping-pong crossed in 88 us at its fast end, its broadcast 43 us."""
    slow_pong = _result("pingpong", "mp-queue", 1, "latency", 100e-6, mode="native")
    fast_pong = _result("pingpong", "mp-queue", 1, "latency", 30e-6)
    bcast = _result("broadcast", "mp-queue", 1000, "completion", 25e-6, mode="native")
    assert [v.broadcast for v in below_physics([slow_pong, bcast])] == [bcast]
    assert below_physics([slow_pong, fast_pong, bcast]) == []
    fault = _result("broadcast", "mp-queue", 1000, "completion", 5e-6, mode="native")  # a local receive
    [v] = below_physics([slow_pong, fast_pong, fault])
    assert v.pingpong is fast_pong and fast_pong.key in str(v)


def test_below_physics_on_a_busy_machine_is_said_but_not_a_harness_error():
    pong = _result("pingpong", "zmq", 1, "latency", 50e-6)
    fast = _result("broadcast", "zmq", 1000, "completion", 8e-6)
    found = below_physics([pong, fast])
    [(key, text, error)] = judge(found, others_share=0.0)
    assert key == fast.key and error and text.startswith("harness error")
    [(key, text, error)] = judge(found, others_share=0.6)
    assert not error and "not counted as a harness error: other processes used 60% of the CPUs" in text
    assert judge(found, others_share=None)[0][2]  # cannot tell: the check stands
