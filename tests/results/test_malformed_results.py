"""Malformed results files: ``compare`` and ``report`` exit 2 naming the file and the field, and
nothing is half-written."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from pytest_ipcbench.commands import main as ipcbench
from pytest_ipcbench.results.results import MalformedResults, Result, ResultSet
from pytest_ipcbench.results.validation import MAX_SAMPLES


def good(path: Path) -> Path:
    rs = ResultSet(env={"python": "3"})
    for size in (1000, 10**6):
        for backend in ("shm", "zmq"):
            rs.add(Result("broadcast", backend, "bytes", "ndarray", size, 2,
                          {"completion": [size / 1e9 * (1 + i / 100) for i in range(20)],
                           "write": [size / 2e9] * 20},
                          nbytes=size))
    return rs.save(path)


def corrupt(src: Path, dst: Path, index: int, field: str, value: object) -> Path:
    data = json.loads(src.read_text())
    data["results"][index][field] = value
    dst.write_text(json.dumps(data))
    return dst


@pytest.mark.parametrize(
    ("field", "value", "expected"),
    [
        ("samples", {"completion": ["fast", 1.0]}, "field 'samples' must be an object of metric -> list of finite"),
        ("size", "big", "field 'size' must be a whole number >= 0, got \"big\""),
        ("ranks", 0, "field 'ranks' must be a whole number >= 1, got 0"),
        ("verified", [1, 2], "field 'verified' must be null or {checked, failed} whole numbers"),
    ],
)
def test_compare_names_the_file_the_record_and_the_field_and_exits_2(tmp_path, capsys, field, value, expected) -> None:
    base = good(tmp_path / "base.json")
    bad = corrupt(base, tmp_path / "head.json", 2, field, value)
    assert ipcbench(["compare", str(base), str(bad)]) == 2  # 1 would say "regression"
    err = capsys.readouterr().err
    assert f"{bad}: results[2]" in err and expected in err, err
    assert "Traceback" not in err


def test_report_of_a_malformed_file_exits_2_and_writes_nothing(tmp_path, capsys) -> None:
    bad = corrupt(good(tmp_path / "base.json"), tmp_path / "bad.json", 3, "samples", {"completion": [None]})
    out = tmp_path / "report"
    assert ipcbench(["report", str(bad), "--out", str(out), "--no-plots"]) == 2
    err = capsys.readouterr().err
    assert f"{bad}: results[3]" in err and "field 'samples'" in err, err
    assert not out.exists() or list(out.iterdir()) == []


def test_missing_field_is_named(tmp_path) -> None:
    data = json.loads(good(tmp_path / "a.json").read_text())
    del data["results"][0]["backend"]
    (tmp_path / "b.json").write_text(json.dumps(data))
    with pytest.raises(MalformedResults, match=r"b.json: results\[0\].*: field 'backend' is missing"):
        ResultSet.load(tmp_path / "b.json")


def test_a_report_that_fails_half_way_leaves_no_file(tmp_path, monkeypatch) -> None:
    from pytest_ipcbench import report

    def broken_plots(results, out):
        raise RuntimeError("plotting failed")

    monkeypatch.setattr(report, "write_plots", broken_plots)
    out = tmp_path / "report"
    out.mkdir()
    (out / "notes.txt").write_text("mine")  # what was there stays, untouched
    with pytest.raises(RuntimeError, match="plotting failed"):
        report.write_report(ResultSet.load(good(tmp_path / "r.json")), out)
    assert sorted(p.name for p in out.iterdir()) == ["notes.txt"]  # no CSV written before the plots


# --------------------------------------------------------------------------- hostile files (issue 24)

def _deep(depth: int) -> str:
    return "[" * depth + "]" * depth


def _with(src: Path, dst: Path, index: int | None, field: str, raw: str) -> Path:
    """``src`` with ``field`` of record ``index`` (or of the file when None) set to the JSON text ``raw``."""
    data = json.loads(src.read_text())
    holder = data if index is None else data["results"][index]
    holder[field] = "@@RAW@@"
    dst.write_text(json.dumps(data).replace('"@@RAW@@"', raw))
    return dst


# (where: a record index or None for the file, field, raw JSON value, what the message names)
HOSTILE = [
    (2, "extra", '{"a": ' + _deep(100_000) + "}", "nested"),  # RecursionError in json
    (2, "extra", '{"a": ' + _deep(900) + "}", "field 'extra'"),  # deep, but json can parse it
    (2, "size", "1" + "0" * 400, "field 'size'"),  # OverflowError as a float
    (2, "nbytes", "1" + "0" * 400, "field 'nbytes'"),
    (2, "size", "1" * 5000, "digits"),  # beyond Python's int-from-string limit
    (2, "copy_bandwidth", '"fast"', "field 'copy_bandwidth'"),  # TypeError
    (2, "copy_bandwidth", "1" + "0" * 400, "field 'copy_bandwidth'"),
    (2, "nodes", '"two"', "field 'nodes'"),
    (2, "wait", "[1]", "field 'wait'"),
    (2, "verified", '{"checked": 1' + "0" * 400 + ', "failed": 0}', "field 'verified'"),
    (2, "extra", '{"gate_rounds": 5}', "field 'extra'"),
    (2, "extra", '{"work_s": "slow"}', "field 'extra'"),
    (2, "plan", '{"iterations": "many"}', "field 'plan'"),
    (2, "primary", '"nothing"', "field 'primary'"),
    (2, "samples", '{"completion": []}', "field 'samples'"),
    (2, "samples", '{"completion": [0, 0, 0, 0, 0]}', "field 'samples'"),
    (None, "env", '{"load_start": 1' + "0" * 400 + "}", "field 'env'"),
    (None, "env", '{"failures": 5}', "field 'env'"),
    (None, "env", '{"cores": "many"}', "field 'env'"),
    (None, "env", '{"x": ' + _deep(900) + "}", "field 'env'"),
    (None, "created", "5", "field 'created'"),
]


@pytest.mark.parametrize(("index", "field", "raw", "names"), HOSTILE,
                         ids=[f"{f}-{i}" for i, (_, f, _, _) in enumerate(HOSTILE)])
@pytest.mark.parametrize("command", ["compare", "report"])
def test_a_hostile_record_is_exit_2_naming_the_file_and_the_field(tmp_path, capsys, command, index, field, raw,
                                                                  names) -> None:
    base = good(tmp_path / "base.json")
    bad = _with(base, tmp_path / "bad.json", index, field, raw)
    args = ["compare", str(base), str(bad)] if command == "compare" else \
        ["report", str(bad), "--out", str(tmp_path / "report"), "--no-plots"]
    assert ipcbench(args) == 2
    err = capsys.readouterr().err
    assert str(bad) in err and names in err, err
    assert "Traceback" not in err and len(err) < 2000


def test_too_many_samples_are_refused_quickly_before_any_statistics(tmp_path, capsys) -> None:
    # 300,000 samples in one case took 9.4 GB and 94 s in compare's bootstrap
    base = good(tmp_path / "base.json")
    bad = _with(base, tmp_path / "bad.json", 2, "samples",
                json.dumps({"completion": [1e-5 + i * 1e-12 for i in range(MAX_SAMPLES + 1)]}))
    start = time.monotonic()
    assert ipcbench(["compare", str(base), str(bad)]) == 2
    assert time.monotonic() - start < 10
    err = capsys.readouterr().err
    assert f"{bad}: results[2]" in err and "field 'samples'" in err and str(MAX_SAMPLES + 1) in err, err


def test_a_file_beyond_the_size_limit_is_refused_without_reading_it(tmp_path, capsys) -> None:
    huge = tmp_path / "huge.json"
    with huge.open("wb") as f:
        f.truncate(2 * 10**9)  # sparse: nothing on disk, 2 GB to read
    start = time.monotonic()
    assert ipcbench(["report", str(huge), "--out", str(tmp_path / "r"), "--no-plots"]) == 2
    assert time.monotonic() - start < 5
    err = capsys.readouterr().err
    assert str(huge) in err and "larger than" in err, err


LOAD = "import sys; from pytest_ipcbench.commands import main; sys.exit(main(sys.argv[1:]))"


@pytest.mark.parametrize("what", ["fifo", "folder", "device"])
def test_a_file_that_is_not_a_regular_file_is_refused(tmp_path, what) -> None:
    if what == "fifo":
        path = tmp_path / "results.json"
        os.mkfifo(path)  # nobody ever writes: reading it blocked forever
    elif what == "folder":
        path = tmp_path / "results.json"
        path.mkdir()
    else:
        path = Path("/dev/zero")  # endless
    base = good(tmp_path / "base.json")
    for args in (["compare", str(base), str(path)], ["report", str(path), "--out", str(tmp_path / "r"), "--no-plots"]):
        proc = subprocess.run([sys.executable, "-c", LOAD, *args], capture_output=True, text=True, timeout=60)
        assert proc.returncode == 2, proc.stdout + proc.stderr
        assert f"{path} is not a regular file" in proc.stderr and "Traceback" not in proc.stderr, proc.stderr


def test_a_case_recorded_twice_is_exit_2_naming_it(tmp_path, capsys) -> None:
    """A results file with one case twice decided a REGRESSION without naming the duplicate."""
    import json

    from pytest_ipcbench.commands import main
    from pytest_ipcbench.results.results import Result, ResultSet

    rs = ResultSet()
    rs.add(Result("broadcast", "shm", "bytes", "ndarray", 1000, 2, {"completion": [1e-5] * 20}, nbytes=1000))
    path = rs.save(tmp_path / "a.json")
    data = json.loads(path.read_text())
    data["results"].append({**data["results"][0], "samples": {"completion": [9e-5] * 20}})
    (tmp_path / "dup.json").write_text(json.dumps(data))
    assert main(["compare", str(path), str(tmp_path / "dup.json"), "--calibration", "none"]) == 2
    err = capsys.readouterr().err
    assert f"dup.json: results[1] repeats the case {rs.results[0].key} of results[0]" in err
