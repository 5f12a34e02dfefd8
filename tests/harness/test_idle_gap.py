"""The ``idle`` scenario: latency of one message after an idle gap, from the harness, the
``ipc_bench`` fixture (as a user's test calls it) and the report."""

from __future__ import annotations

import pytest

from pytest_ipcbench import BenchSettings, BufferPayload, LocalWorld
from pytest_ipcbench.backends.base import BackendSpec
from pytest_ipcbench.core.group import in_mpi_job
from pytest_ipcbench.harness.measure import bench
from pytest_ipcbench.report.markdown import markdown
from pytest_ipcbench.results.results import ResultSet

pytestmark = pytest.mark.skipif(in_mpi_job(), reason="local worker processes: not inside an MPI job")



def _bench_idle(group, gap):
    settings = BenchSettings(gap=gap, time_budget=0.3, min_iterations=5, max_iterations=20, warmup=2)
    return bench(group, BackendSpec("zmq", "bytes"), BufferPayload(64), "idle", settings)


def test_the_gap_is_idle_time_outside_the_timed_round_trip() -> None:
    with LocalWorld(2) as world:
        import time

        t0 = time.monotonic()
        result = world.run(_bench_idle, 0.05, ranks=2)[0]
        took = time.monotonic() - t0
    assert result.scenario == "idle" and result.variant == "gap=50ms" and result.extra["gap_s"] == 0.05
    lat = result.samples["latency"]
    n = len(result.samples["roundtrip"])
    assert 5 <= n <= 20 and len(lat) == n
    assert sorted(lat)[len(lat) // 2] < 0.05  # the gap itself is not in the figure
    assert took >= 0.05 * (n + 2)  # but every iteration waited it (warm-up included)
    assert result.verified is not None and result.verified.failed == 0
    text = markdown(ResultSet(results=[result], env={}))
    assert "## Latency after an idle gap" in text and "| zmq | bytes | 64 B | 50 ms |" in text


def test_bad_gaps_are_refused() -> None:
    with pytest.raises(ValueError, match="gap must be between 0 and 3600 seconds, got -1"):
        BenchSettings(gap=-1)


def test_a_users_test_measures_it_with_ipc_bench(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_idle="""
import pytest
from pytest_ipcbench import BufferPayload


@pytest.mark.ipcbench(ranks=2, modes="bytes")
def test_wake_up(ipc_bench, zmq_backend):
    result = ipc_bench(zmq_backend, BufferPayload(64), scenario="idle", gap=0.02, time_budget=0.2)
    assert result.verified.failed == 0 and result.extra["gap_s"] == 0.02
    assert result.summary("latency").median < 0.02  # the gap is not in the figure
""")
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "--ipc-report", "report")
    result.assert_outcomes(passed=1)
    assert "## Latency after an idle gap" in (pytester.path / "report" / "summary.md").read_text()
