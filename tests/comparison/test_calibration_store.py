"""A calibration that is found, not remembered, and cannot be poisoned (issues 38 and 42).

``ipcbench calibrate`` stores its result in the user's own cache folder under the machine's and
the matrix's digests; compare finds it there and says so; a hostile file (noise 0, NaN, negative,
wrong types) or a folder that is not the user's is an exit 2 naming it, never a verdict.
"""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest
from test_compare_runs import run_set  # tests/comparison is on sys.path (rootdir conftest, no package)

from pytest_ipcbench.commands import main
from pytest_ipcbench.comparison import calibration as cal, calibration_store as store
from pytest_ipcbench.comparison.calibration_check import CalibrationError


def _runs(tmp_path: Path, n: int = 4) -> list[str]:
    return [str(run_set(400 + i, scatter=0.05).save(tmp_path / f"r{i}.json")) for i in range(n)]


def test_calibrate_stores_where_compare_finds_it_and_every_verdict_says_which(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    b = run_set(1).save(tmp_path / "b.json")
    h = run_set(2, load=1.3, scatter=0.05, slow={"zmq": 2.0}).save(tmp_path / "h.json")
    assert main(["compare", str(b), str(h)]) in (0, 3)  # no calibration yet: nothing decides 2x across runs
    out = capsys.readouterr().out
    assert "calibration: none for this machine and matrix" in out
    assert main(["calibrate", "--from", *_runs(tmp_path), "--plot", "none"]) == 0
    stored = list(store.cache_root().glob("calibration-*.json"))
    assert len(stored) == 1 and str(stored[0]) in capsys.readouterr().out
    assert stat.S_IMODE(store.cache_root().stat().st_mode) == 0o700
    assert stat.S_IMODE(stored[0].stat().st_mode) & 0o077 == 0
    assert main(["compare", str(b), str(h)]) == 1  # found: the same machine and matrix
    out = capsys.readouterr().out
    assert f"calibration: {stored[0]}, made " in out and "2 cores" in out and "REGRESSION" in out
    assert main(["compare", str(b), str(h), "--calibration", "none"]) != 1
    assert "calibration: none" in capsys.readouterr().out


def test_another_machine_or_matrix_does_not_find_it(tmp_path: Path) -> None:
    assert main(["calibrate", "--from", *_runs(tmp_path), "--plot", "none"]) == 0
    same, other_cpu, fewer = run_set(9), run_set(9), run_set(9)
    other_cpu.env["cpu"] = "another CPU"
    fewer.results = [r for r in fewer.results if r.backend != "zmq"]
    assert store.find(same) is not None
    assert store.find(other_cpu) is None and store.find(fewer) is None
    assert store.find(fewer, same) is not None  # a pull request that adds a case finds the base's matrix's


def test_the_folder_is_per_user_never_a_shared_tmp_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert store.cache_root() == tmp_path / "home" / ".cache" / "pytest-ipcbench"
    monkeypatch.setenv("XDG_CACHE_HOME", "relative/path")  # the XDG spec: relative values are ignored
    assert store.cache_root() == tmp_path / "home" / ".cache" / "pytest-ipcbench"
    monkeypatch.chdir("/tmp")
    assert not str(store.cache_root()).startswith("/tmp/.ipcbench")


def test_a_symlinked_or_foreign_folder_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    files = _runs(tmp_path)
    root = store.cache_root()
    root.parent.mkdir(parents=True, exist_ok=True)
    elsewhere = tmp_path / "planted"
    elsewhere.mkdir()
    root.symlink_to(elsewhere)
    assert main(["calibrate", "--from", *files, "--plot", "none"]) == 2
    assert "is a symlink" in capsys.readouterr().err and not list(elsewhere.iterdir())
    b = run_set(1).save(tmp_path / "b.json")
    assert main(["compare", str(b), str(b)]) == 2
    assert "is a symlink" in capsys.readouterr().err
    root.unlink()
    if os.geteuid() != 0:
        pytest.skip("another user's folder needs root to make")
    root.mkdir(mode=0o700)
    os.chown(root, 65534, 65534)
    assert main(["compare", str(b), str(b)]) == 2
    assert "belongs to uid 65534" in capsys.readouterr().err
    assert main(["calibrate", "--from", *files, "--plot", "none"]) == 2


def _good(tmp_path: Path) -> dict:
    assert main(["calibrate", "--from", *_runs(tmp_path), "--plot", "none"]) == 0
    [path] = store.cache_root().glob("calibration-*.json")
    return json.loads(path.read_text())


HOSTILE = [
    ("noise 0", lambda d, k: d["cases"][k].update(sigma=0.0, upper=0.0), "sigma"),
    ("NaN", lambda d, k: d["cases"][k].update(upper=float("nan")), "upper"),
    ("negative", lambda d, k: d["cases"][k].update(sigma=-0.1), "sigma"),
    ("a string", lambda d, k: d["cases"][k].update(sigma="0.1"), "sigma"),
    ("a bool", lambda d, k: d["cases"][k].update(runs=True), "runs"),
    ("negative runs", lambda d, k: d["cases"][k].update(runs=-3), "runs"),
    ("group noise 0", lambda d, k: d["groups"].update({next(iter(d["groups"])): 0}), "groups["),
    ("a ratio of 0", lambda d, k: d["cases"][k].update(ratios=[1.0, 0.0]), "ratios[1]"),
    ("negative held out", lambda d, k: d.update(held_out={"g": [-1, 4]}), "held_out"),
    ("runs a float", lambda d, k: d.update(runs=4.5), "'runs'"),
    ("threshold inf", lambda d, k: d.update(threshold=float("inf")), "'threshold'"),
    ("cases a list", lambda d, k: d.update(cases=[1, 2]), "'cases'"),
]


@pytest.mark.parametrize("what,spoil,field", HOSTILE, ids=[h[0] for h in HOSTILE])
def test_a_hostile_calibration_is_exit_2_naming_file_and_field_never_a_verdict(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], what: str, spoil, field: str) -> None:
    data = _good(tmp_path)
    key = sorted(data["cases"])[0]
    spoil(data, key)
    [path] = store.cache_root().glob("calibration-*.json")
    path.write_text(json.dumps(data))  # planted where compare looks by default
    capsys.readouterr()
    same = run_set(1).save(tmp_path / "same.json")
    again = run_set(2, scatter=0.05).save(tmp_path / "again.json")
    assert main(["compare", str(same), str(again)]) == 2  # identical code: no verdict at all
    err = capsys.readouterr()
    assert str(path) in err.err and field in err.err and "REGRESSION" not in err.out and "OK" not in err.out
    copy = tmp_path / "named.json"
    copy.write_text(json.dumps(data))
    assert main(["compare", str(same), str(again), "--calibration", str(copy)]) == 2
    assert str(copy) in capsys.readouterr().err


def test_size_limit_and_a_fifo(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    big = tmp_path / "big.json"
    big.write_text(" " * 100 + "{}")
    monkeypatch.setattr("pytest_ipcbench.comparison.calibration_check.MAX_BYTES", 50)
    with pytest.raises(CalibrationError, match="larger than a calibration file may be"):
        cal.Calibration.load(big)
    fifo = tmp_path / "fifo.json"
    os.mkfifo(fifo)
    with pytest.raises(CalibrationError, match="FIFO"):
        cal.Calibration.load(fifo)


def test_a_stored_file_that_is_a_symlink_is_refused(tmp_path: Path) -> None:
    assert main(["calibrate", "--from", *_runs(tmp_path), "--plot", "none"]) == 0
    [path] = store.cache_root().glob("calibration-*.json")
    real = tmp_path / "real.json"
    path.rename(real)
    path.symlink_to(real)
    with pytest.raises(CalibrationError, match="symlink"):
        store.find(run_set(1))


def test_calibrate_runs_time_only_and_stores_its_runs_matrix(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The A/A runs measure time: no counting pass (as the gate's rounds after each side's first),
    unless the run arguments say otherwise; the file is found by the runs' machine and matrix."""
    from pytest_ipcbench.comparison import calibration_summary as tell

    asked: list[list[str]] = []

    def fake(run_args: list[str], budget: float, scratch: Path, runs: int | None = None):
        asked.append(list(run_args))
        return [run_set(600 + i, scatter=0.05) for i in range(3)], [1.0, 1.2]

    monkeypatch.setattr(tell, "measure_runs", fake)
    assert main(["calibrate", "--run-args", "--quick --ranks 2", "--plot", "none"]) == 0
    assert main(["calibrate", "--run-args", "--quick --count", "--plot", "none"]) == 0
    assert asked == [["--quick", "--ranks", "2", "--no-count"], ["--quick", "--count"]]
    assert store.find(run_set(1)) is not None


def test_out_is_a_checked_copy_never_through_another_users_link(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "copy.json"
    assert main(["calibrate", "--from", *_runs(tmp_path), "--plot", "none", "--out", str(out)]) == 0
    assert cal.Calibration.load(out).runs == 4 and len(list(store.cache_root().glob("calibration-*.json"))) == 1
    assert main(["calibrate", "--from", *_runs(tmp_path), "--plot", "none", "--out", "/proc/nope/c.json"]) == 2
    capsys.readouterr()
    if os.geteuid() != 0:
        pytest.skip("another user's link needs root to make")
    victim = tmp_path / "victim.txt"
    victim.write_text("keep me")
    link = tmp_path / "planted.json"
    link.symlink_to(victim)
    os.lchown(link, 65534, 65534)
    assert main(["calibrate", "--from", *_runs(tmp_path), "--plot", "none", "--out", str(link)]) == 2
    assert victim.read_text() == "keep me" and "--out" in capsys.readouterr().err
