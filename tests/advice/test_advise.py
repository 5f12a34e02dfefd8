"""``advise``: exact features, the decision's JSON, a failing backend left out, a slowed backend
lost on a ratio measured interleaved, bad input exit 2, one pick on every MPI rank."""

from __future__ import annotations

import json
import os
import pickle
import subprocess
import sys
from pathlib import Path

import advice_support  # tests/ is on sys.path (rootdir conftest, no package)
import numpy as np
import pytest

from pytest_ipcbench import Advice, advise
from pytest_ipcbench.advice import advise_described, features
from pytest_ipcbench.advice.cases import FAMILIES, cases
from pytest_ipcbench.advice.decision import Candidate
from pytest_ipcbench.advice.describe import described
from pytest_ipcbench.advice.driver import pairs
from pytest_ipcbench.advice.prior import shortlist
from pytest_ipcbench.advice.race import RACE_SHARE, affordable_rounds, iteration_seconds
from pytest_ipcbench.backends.base import BACKENDS, register_backend
from pytest_ipcbench.core.errors import UsageError
from pytest_ipcbench.core.group import in_mpi_job
from pytest_ipcbench.core.procs import find_mpiexec
from pytest_ipcbench.results.results import Result

IPCBENCH = str(Path(sys.executable).with_name("ipcbench"))


def _inband(obj: object) -> int:
    return len(pickle.dumps(obj, protocol=5, buffer_callback=lambda b: None))


def test_features_of_a_dict_of_arrays_are_exact() -> None:
    obj = {f"a{i}": np.zeros(512, dtype=np.float64) for i in range(3)}
    f = features(obj)
    assert (f.oob_count, f.oob_bytes, f.oob_largest) == (3, 3 * 4096, 4096)
    assert f.inband_bytes == _inband(obj)
    assert f.total_bytes == f.inband_bytes + 3 * 4096
    assert f.oob_largest_share == round(4096 / f.total_bytes, 6)
    assert (f.python_objects, f.arrays, f.noncontiguous_arrays, f.object_arrays) == (4, 3, 0, 0)  # the dict, 3 keys
    assert (f.dtypes, f.depth, f.top) == (("<f8",), 1, "dict")


def test_features_of_views_bytes_strings_and_object_arrays_are_exact() -> None:
    view = np.arange(100, dtype=np.int32)[::2]
    f = features(view)
    assert (f.oob_count, f.arrays, f.noncontiguous_arrays, f.python_objects, f.depth) == (0, 1, 1, 0, 0)
    f = features(b"x" * 1000)
    assert (f.oob_count, f.python_objects, f.total_bytes) == (0, 1, _inband(b"x" * 1000))
    f = features(["ab", "cd", ("e", 1)])
    assert (f.python_objects, f.depth) == (6, 2)  # the list, 2 strings, the tuple, "e", 1
    obj = np.array(["a", 1, 2.5], dtype=object)
    f = features(obj)
    assert (f.object_arrays, f.python_objects, f.oob_count) == (1, 3, 0)
    rec = np.zeros(10, dtype=[("i", "<i8"), ("x", "<f4")])
    f = features(rec)
    assert (f.oob_count, f.oob_bytes, f.dtypes) == (1, 120, ("record",))


def test_an_unpicklable_object_is_a_usage_error() -> None:
    with pytest.raises(UsageError, match="cannot be pickled"):
        features({"f": lambda: 0})


def test_the_case_generator_is_deterministic_and_stratified() -> None:
    a, b = cases(24, seed=3), cases(24, seed=3)
    assert a == b
    assert {c.family for c in a} == set(FAMILIES)
    assert {c.readers for c in a} == {1, 2}
    for c in a[:12]:
        from pytest_ipcbench.advice.payload import equal_deep

        assert equal_deep(c.build(), c.build())


def test_describe_builds_the_object_it_names() -> None:
    obj = described("dict of 50 float64 arrays of 4 KiB")
    assert len(obj) == 50 and all(a.nbytes == 4096 and a.dtype == np.float64 for a in obj.values())
    assert described("bytes of 1MB") == bytes(10**6)
    assert described("list of 3 strings of 5 B") == ["xxxxx"] * 3
    for bad in ("a cat", "dict of 5 floop arrays of 4 KiB", "bytes of 4 parsecs", "list of 999999999999 ints"):
        with pytest.raises(UsageError, match="--describe"):
            described(bad)
    advice = advise_described("float32 array of 64 MiB")
    assert not advice.measured and advice.features.oob_bytes == 64 * 2**20
    assert advice.pick == advice.prior["order"][0]


def test_an_unknown_backend_is_always_shortlisted() -> None:
    f = features(np.zeros(1000))
    raced, left = shortlist(f, ["shm/native", "shm/bytes", "lmdb/native", "zmq/native", "zmq/bytes", "mine/bytes"], 2)
    assert "mine/bytes" in raced and len(raced) == 3 and len(left) == 3


def _advice() -> Advice:
    f = features({"a": np.zeros(10)})
    return Advice(pick="shm/native", runner_up="zmq/native", ratio=1.5, low=1.2, high=1.8, confidence=0.95,
                  tie=["shm/native"], tie_threshold=0.05, measured=True, scenario="broadcast",
                  metric="completion_touched", readers=2, features=f,
                  candidates=[Candidate("shm/native", "pick", 1e-5, 1.0, 1.0, 1.0, 12, None, "",
                                        {"writer": {"syscalls.total": 2, "exact": {"syscalls.total": True}}}),
                              Candidate("x/bytes", "failed", reason="PayloadError: no")],
                  environment={"cores": 2, "ranks": 3, "ranks_per_core": 1.5, "load_start": 3.0, "load_end": 4.0,
                               "group": "local"},
                  prior={"source": "s", "bucket": "tiny/buffers", "order": ["shm/native"], "shortlist": ["shm/native"]},
                  race={"stages": 2, "stopped": "the budget", "rounds": 12}, notes=["n"])


def test_the_stream_scenario_offers_channels_only() -> None:
    """A store keeps only the newest value: streamed, it would lose messages (no group: this machine)."""
    ok, why = pairs(None, "stream", ["shm", "zmq"])
    assert {s.name for s in ok} == {"zmq"}
    assert all("needs a channel" in why[f"shm/{mode}"] for mode in ("bytes", "native"))


def test_the_decision_round_trips_through_json(tmp_path: Path) -> None:
    advice = _advice()
    path = tmp_path / "advice.json"
    advice.write_json(path)
    data = json.loads(path.read_text())
    assert data["schema"] == "pytest-ipcbench-advice" and data["pick"] == "shm/native"
    assert Advice.read_json(path) == advice
    assert Advice.from_dict(json.loads(json.dumps(advice.to_dict()))) == advice
    with pytest.raises(UsageError):
        Advice.from_dict({"schema": "other"})
    assert "1.50x faster than zmq/native" in advice.lines()[-1]


@pytest.fixture
def extra_backends():
    register_backend(advice_support.RefusingStore)
    register_backend(advice_support.ShmTwin)
    yield
    BACKENDS.unregister("test-refusing")
    BACKENDS.unregister("test-shm-twin")


@pytest.mark.timeout(300)
def test_a_backend_that_fails_on_the_object_is_left_out_with_its_reason(extra_backends: None) -> None:
    obj = {"x": np.arange(1000.0)}
    advice = advise(obj, readers=1, backends=["shm", "test-refusing"], budget=3, confirm_rounds=4, rounds=4)
    failed = {c.pair: c for c in advice.candidates if c.status == "failed"}
    assert set(failed) == {"test-refusing/bytes", "test-refusing/native"}
    assert all("takes no object" in c.reason for c in failed.values())
    assert advice.pick.startswith("shm/")
    assert "failed on the object, left out" in "\n".join(advice.lines())


@pytest.mark.timeout(300)
def test_a_slowed_backend_loses_the_race(extra_backends: None, monkeypatch: pytest.MonkeyPatch) -> None:
    # the same code under two names, one slowed 3x in the measured path (IPCBENCH_INJECT): the ratio
    # of the slowed one to the leader, measured interleaved, must show it
    monkeypatch.setenv("IPCBENCH_INJECT", "test-shm-twin=3")
    obj = np.arange(2**18, dtype=np.float64)  # 2 MiB
    advice = advise(obj, readers=1, backends=["shm", "test-shm-twin"], budget=8, shortlist_size=4)
    assert advice.pick.startswith("shm/")
    twins = [c for c in advice.candidates if c.pair.startswith("test-shm-twin/") and c.ratio is not None]
    assert twins and all(c.ratio > 1.5 for c in twins)
    assert not advice.race["probes_only"]
    # the stages' rounds: those asked, or what the slowest probe's iteration lets fit in a stage
    r = advice.race
    assert r["iteration_s"] > 0 and r["asked_rounds"] == 6
    assert r["stage_rounds"] == affordable_rounds(6, r["iteration_s"], 4, r["race_budget_s"] * RACE_SHARE / 3)[0]


@pytest.mark.timeout(300)
def test_an_object_too_slow_for_the_budget_is_judged_on_its_probes() -> None:
    """Each message takes 0.4 s to pickle, and the budget is 1 s: the first probe spends it, so the
    other pairs are not probed and there is no race. Before, the race's floor (every pair's rounds,
    then the confirmation) ran regardless (docs/advise.md: the 98th evaluation case)."""
    advice = advise(advice_support.SlowToPickle(), readers=1, backends=["shm", "zmq"], budget=1)
    r = advice.race
    assert r["probes_only"] and r["stages"] == 0
    statuses = {c.pair: c.status for c in advice.candidates}
    assert statuses[advice.pick] == "pick" and "not-probed" in statuses.values()
    assert r["stopped"].startswith("the budget: 1 probe(s)") and "--budget" in r["stopped"]
    assert "without a race or an interval" in advice.verdict()
    assert "not probed (the budget was spent on the probes)" in "\n".join(advice.lines())
    assert Advice.from_dict(json.loads(json.dumps(advice.to_dict()))) == advice


def test_a_slow_object_gets_fewer_rounds_not_a_longer_call() -> None:
    # rounds of 3 iterations of each pair: 6 rounds of 4 pairs at 0.5 s an iteration would take 36 s
    assert affordable_rounds(6, 0.5, 4, 9.0) == (2, 1)  # 9 s hold 1.5 rounds: 2 of one iteration
    assert affordable_rounds(6, 0.2, 4, 9.0) == (3, 3)
    assert affordable_rounds(6, 0.1, 4, 9.0) == (6, 3)  # 7.5 rounds fit: the 6 asked
    assert affordable_rounds(6, 0.0, 4, 0.1) == (6, 3)  # no probe time: as asked
    # one iteration: a ping-pong is two one-way trips, a stream's iteration a window of messages
    one = Result("pingpong", "shm", "bytes", "x", 1, 2, {"latency": [0.25]})
    assert iteration_seconds(one, "pingpong") == 0.5
    one = Result("stream", "shm", "bytes", "x", 1, 2, {"delivered": [0.1, 0.2]}, extra={"window": 4})
    assert iteration_seconds(one, "stream") == pytest.approx(0.8)


def _cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([IPCBENCH, "advise", *args], capture_output=True, text=True, timeout=300, env=env)


def test_bad_input_exits_2(tmp_path: Path) -> None:
    bad = tmp_path / "bad.pkl"
    bad.write_bytes(b"not a pickle")
    sample = tmp_path / "ok.pkl"
    sample.write_bytes(pickle.dumps(b"abc"))
    for args, said in ((["--sample", str(tmp_path / "missing.pkl")], "no such file"),
                       (["--sample", str(bad)], "cannot read it as a pickle"),
                       (["--sample", str(tmp_path)], "not a file"),
                       (["--describe", "a cat"], "not a description"),
                       (["--describe", "bytes of 1MB", "--scenario", "pingpong", "--readers", "2"], "one reader"),
                       (["--sample", str(sample), "--json", str(tmp_path / "no" / "a.json")], "not a writable folder"),
                       (["--sample", str(sample), "--backends", "nosuch"], "unknown backend")):
        proc = _cli(*args)
        assert proc.returncode == 2, (args, proc.stdout, proc.stderr)
        assert said in proc.stderr and "Traceback" not in proc.stderr
    assert not (tmp_path / "no").exists()


@pytest.mark.skipif(in_mpi_job(), reason="starts its own MPI job: not inside one")
@pytest.mark.skipif(find_mpiexec() is None, reason="no mpiexec (install pytest-ipcbench[mpi])")
@pytest.mark.timeout(600)
def test_every_mpi_rank_prints_the_same_pick(tmp_path: Path) -> None:
    sample = tmp_path / "obj.npy"
    np.save(sample, np.arange(10**5, dtype=np.float64))
    out = tmp_path / "advice.json"
    proc = subprocess.run([find_mpiexec(), "-n", "2", IPCBENCH, "advise", "--sample", str(sample), "--budget", "4",
                           "--backends", "shm,zmq,mpi-bcast", "--json", str(out)],
                          capture_output=True, text=True, timeout=500, env={**os.environ})
    assert proc.returncode == 0, proc.stdout + proc.stderr
    picks = {line.split("pick ")[1] for line in proc.stdout.splitlines() if " of 2: pick " in line}
    lines = [line for line in proc.stdout.splitlines() if " of 2: pick " in line]
    assert len(lines) == 2 and len(picks) == 1, proc.stdout
    advice = Advice.read_json(out)
    assert advice.pick in picks and advice.environment["group"] == "mpi"

