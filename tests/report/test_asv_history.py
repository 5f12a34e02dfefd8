"""asv's record of the suite's samples, read back and drawn with each commit's interval.

The results files are written by asv's own code (``asv.results.Results``) from what
``Declared.track_median`` returns, so the test holds for the format asv really writes.
"""

from __future__ import annotations

import datetime
from pathlib import Path

import pytest

from pytest_ipcbench.core.errors import UsageError
from pytest_ipcbench.report.asv_history import load_history, plot_history
from pytest_ipcbench.runner.asv_suite import Declared, main

pytest.importorskip("asv", reason="asv is not installed (pip install -e '.[dev]')")

CASES = ["broadcast/fifo/bytes/records/1000/r2", "pingpong/fifo/bytes/buffer/1000/r2"]


def _save_commit(results: Path, commit: str, date: int, runs: dict[str, list[float]]) -> None:
    from asv.results import Results
    from asv.runner import BenchmarkResult

    bench = {"name": "bench_ipcbench.Declared.track_median", "params": [[repr(c) for c in CASES]],
             "version": "1"}
    points = [Declared().track_median(runs, case) for case in CASES]  # what asv gets from the suite
    res = Results({"machine": "m", "python": "3.11"}, {}, commit, date, "3.11", "env", {})
    res.add_result(bench, BenchmarkResult(result=[True] * len(CASES), samples=[p["samples"] for p in points],
                                          number=[p["number"] for p in points], errcode=0, stderr="", profile=None),
                   started_at=datetime.datetime.now(datetime.timezone.utc), duration=1.0)
    res.save(str(results))


def test_each_commit_has_its_median_and_interval(tmp_path: Path) -> None:
    results = tmp_path / "results"
    runs = {  # the seconds of three runs per case and commit
        "c1": {CASES[0]: [30e-6, 36e-6, 31e-6], CASES[1]: [20e-6, 21e-6, 22e-6]},
        "c2": {CASES[0]: [60e-6, 66e-6, 70e-6], CASES[1]: [20e-6, 25e-6, 21e-6]},
    }
    _save_commit(results, "c2" * 20, 2_000, runs["c2"])  # files in another order than the commits'
    _save_commit(results, "c1" * 20, 1_000, runs["c1"])
    history = load_history(results)
    assert sorted(history) == sorted(CASES)
    for case in CASES:
        points = history[case]
        assert [p.commit for p in points] == ["c1c1c1c1", "c2c2c2c2"]  # by the commits' dates
        for p, commit in zip(points, ("c1", "c2")):
            samples = sorted(runs[commit][case])
            assert p.median == pytest.approx(samples[1]) and p.repeat == 3
            assert p.low <= min(samples) and p.high >= max(samples) and p.low < p.high  # asv's 99% interval
    out = plot_history(history, tmp_path / "history.png")
    assert out.stat().st_size > 1000
    assert main(["plot", str(results), "--out", str(tmp_path / "cli.png")]) == 0 and (tmp_path / "cli.png").is_file()


def test_nothing_to_plot_is_a_usage_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(UsageError, match="no asv results"):
        plot_history(load_history(tmp_path), tmp_path / "x.png")
    assert main(["plot", str(tmp_path), "--out", str(tmp_path / "x.png")]) == 2
    assert "no asv results" in capsys.readouterr().err and not (tmp_path / "x.png").exists()


def test_the_picture_is_one_column_per_scenario_whatever_the_number_of_cases(tmp_path: Path) -> None:
    """Issue 39 item 10: 72 cases made a 1260x6240 column of 72 panels; now a grid that reads at a glance."""
    from PIL import Image

    from pytest_ipcbench.report.asv_history import Point

    def history(n: int) -> dict[str, list[Point]]:
        return {f"{sc}/b{i % 4}/bytes/ndarray/{i}/r2": [Point(f"c{j}" * 4, j, 1e-5 * (j + 1), 0.9e-5, 1.2e-5 * (j + 1), 3)
                                                       for j in range(4)]
                for sc in ("broadcast", "pingpong") for i in range(n // 2)}

    small = Image.open(plot_history(history(4), tmp_path / "small.png")).size
    large = Image.open(plot_history(history(72), tmp_path / "large.png")).size
    assert small == large and large[0] <= 1400 and large[1] <= 800, large
