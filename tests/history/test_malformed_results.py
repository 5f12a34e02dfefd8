"""Malformed results files: ``compare`` and ``report`` exit 2 naming the file and the field, and
nothing is half-written."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pytest_ipcbench.commands import main as ipcbench
from pytest_ipcbench.history.results import MalformedResults, Result, ResultSet


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
