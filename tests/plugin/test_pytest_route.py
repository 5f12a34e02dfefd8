"""The pytest route end to end: ``--ipc-report`` writes results.json that ``ipcbench compare``
reads, the report's tables carry ranks and the test, every ``ipc_bench`` call is recorded, and
pytest-benchmark gets the parameters by their ids, each call's samples as its rounds (the harness's
replay clock) with the case in its ``extra_info``."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest

from pytest_ipcbench.backends.base import unavailable_reason
from pytest_ipcbench.commands import main
from pytest_ipcbench.results.results import ResultSet

TWO_CALLS = """
    import pytest

    @pytest.mark.ipcbench(backends="shm", modes="bytes", payloads="ndarray", sizes="10KB", ranks="2,4")
    def test_two_calls(ipc_bench, ipc_backend, ipc_payload, ipc_group):
        first = ipc_bench(ipc_backend, ipc_payload, time_budget=0.02, min_iterations=5, max_iterations=5)
        second = ipc_bench(ipc_backend, ipc_payload, "pingpong" if ipc_group.size == 2 else "broadcast",
                           time_budget=0.02, min_iterations=6, max_iterations=6)
        assert first.extra["test"].startswith("test_route.py::test_two_calls[")
        assert first.verified.failed == 0 == second.verified.failed and first.efficiency() > 0
"""


@pytest.fixture
def two_runs(pytester: pytest.Pytester, tmp_path: Path) -> list[tuple[Path, Path]]:
    if unavailable_reason("shm"):
        pytest.skip("no shm backend")
    pytester.makepyfile(test_route=textwrap.dedent(TWO_CALLS))
    runs = []
    for i in (1, 2):
        bench, report = tmp_path / f"bench{i}.json", tmp_path / f"report{i}"
        res = pytester.runpytest_subprocess("-p", "no:cacheprovider", f"--benchmark-json={bench}",
                                            f"--ipc-report={report}", "-q", timeout=180)
        res.assert_outcomes(passed=2)
        runs.append((bench, report))
    return runs


def test_pytest_route_records_every_call_and_is_comparable(two_runs: list[tuple[Path, Path]],
                                                           capsys: pytest.CaptureFixture[str]) -> None:
    (bench, report), (_, report2) = two_runs
    rs = ResultSet.load(report / "results.json")
    measured = [r for r in rs.results if r.scenario not in ("copy", "reference")]
    # two tests (r2, r4) x two calls each: nothing dropped, each knows its test
    assert len(measured) == 4
    assert len({r.key for r in rs.results}) == len(rs.results)  # the case measured twice: its call2 variant
    assert sum(r.variant == "call2" for r in measured) == 1
    assert {r.scenario for r in measured} == {"broadcast", "pingpong"}
    assert all("test_two_calls[" in r.extra["test"] for r in measured)
    assert {r.ranks for r in measured} == {2, 4}
    assert {r.scenario for r in rs.results} >= {"copy", "reference"}  # in-run references
    assert rs.env["run_id"] and "load_end" in rs.env

    data = json.loads(bench.read_text())
    # pytest-benchmark: every call a benchmark of its own, the first under the test's name
    assert len(data["benchmarks"]) == 4
    by_name = {bm["name"]: bm for bm in data["benchmarks"]}
    # (key, samples) -> result: with 4 ranks both calls are broadcasts of the same case
    keys = {(r.key, len(r.samples[r.primary])): r for r in measured}
    for ranks in ("2", "4"):
        (first,) = [bm for name, bm in by_name.items() if name.startswith("test_two_calls[") and name.endswith("]")
                    and ranks in bm["param"]]
        second = by_name[first["name"] + "#2"]
        assert second["fullname"] == first["fullname"] + "#2" and second["param"] == first["param"]
        assert first["stats"]["rounds"] == 5 and second["stats"]["rounds"] == 6  # each call's own samples
        for bm, scenario in ((first, "broadcast"), (second, "pingpong" if ranks == "2" else "broadcast")):
            info = bm["extra_info"]["ipcbench"]
            result = keys[info["key"], bm["stats"]["rounds"]]
            assert result.scenario == scenario == info["scenario"]
            assert (info["backend"], info["mode"]) == ("shm", "bytes")
            assert bm["stats"]["median"] == pytest.approx(result.summary().median)
            # rounds fixed by the harness's plan, replayed through its clock
            assert bm["stats"]["rounds"] == info["samples"] and bm["options"]["timer"] == "ipcbench_replay_clock"
            assert bm["stats"]["median"] == pytest.approx(info["median_s"], rel=1e-6)
            assert bm["params"]["ipc_payload"] == "ndarray-10KB" and "shm" in json.dumps(bm["params"])
            assert "UNSERIALIZABLE" not in json.dumps(bm["params"])

    assert (report / "read_summary.csv").exists()
    summary = (report / "summary.md").read_text()
    assert "| Ranks |" in summary and "| Test |" in summary and "test_two_calls[" in summary
    assert "In-run references" in summary

    # two pytest runs: different runs, compared through their references (never "no references")
    code = main(["compare", str(report / "results.json"), str(report2 / "results.json")])
    out, err = capsys.readouterr()
    assert code in (0, 1, 3), err  # read whole (a case measured twice is its callN variant), never exit 2
    assert "different runs" in out + err
    assert "share no in-run reference" not in err


SKIPPED_IN_SETUP = """
    import pytest

    @pytest.fixture
    def cannot_run_here():
        pytest.skip("not here")

    @pytest.mark.ipcbench(backends="shm", modes="bytes", payloads="ndarray", sizes="1KB", ranks="2")
    def test_skipped_after_ipc_bench(ipc_bench, cannot_run_here, ipc_backend, ipc_payload):
        ipc_bench(ipc_backend, ipc_payload)
"""


def test_a_test_skipped_in_setup_gets_no_unused_benchmark_warning(pytester: pytest.Pytester) -> None:
    """A fixture after ``ipc_bench`` that skips (the conformance kit's ``conformance_backend`` for a
    local-only backend under mpiexec) left pytest-benchmark's fixture unused, and it warned
    "Benchmark fixture was not used at all" about a skipped test."""
    pytester.makepyfile(test_skip=textwrap.dedent(SKIPPED_IN_SETUP))
    res = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-q", timeout=120)
    res.assert_outcomes(skipped=1)
    assert "not used at all" not in res.stdout.str()
