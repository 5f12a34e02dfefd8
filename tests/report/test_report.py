"""report.py: every file is produced and well formed, from a synthetic results file."""

from __future__ import annotations

import csv
import itertools

import numpy as np
import pytest

from pytest_ipcbench import report
from pytest_ipcbench.commands import main as cli_main
from pytest_ipcbench.report.common import copy_bandwidth_by_size
from pytest_ipcbench.report.markdown import relative_speed_table
from pytest_ipcbench.results.results import Result, ResultSet, Verified

BACKENDS = {"shm": 1.0, "zmq": 1.5, "mp-queue": 4.0}


def _samples(median: float, n: int = 9) -> list[float]:
    return list(median * (1 + 0.02 * np.linspace(-1, 1, n)))


def synthetic() -> ResultSet:
    rs = ResultSet(env={"ranks": 4, "cores": 2, "oversubscribed": True, "cpu": "test cpu", "python": "CPython 3",
                        "mpi": {"vendor": "MPICH", "vendor_version": "4.3.0", "standard": "4.1"},
                        "packages": {"numpy": "2"}, "git": {"commit": "abc123", "dirty": False},
                        "failures": ["broadcast x/bytes dict-1KB r4: boom"]})
    for (backend, k), mode, kind, size in itertools.product(BACKENDS.items(), ("bytes", "native"),
                                                            ("dict", "ndarray"), (1_000, 100_000, 10_000_000)):
        t = k * (1e-5 + size / 1e9) * (0.5 if mode == "native" else 1.0)
        delivery = "channel" if backend != "shm" else "store"
        samples = {"write": _samples(t / 3), "read_avg": _samples(t / 2), "read_min": _samples(t / 2.5),
                   "read_max": _samples(t / 1.5), "touched_avg": _samples(t / 1.8), "touched_max": _samples(t / 1.4),
                   "completion": _samples(t), "completion_touched": _samples(t * 1.1)}
        rs.add(Result("broadcast", backend, mode, kind, size, 4, samples, nbytes=size,
                      delivery=delivery, readers=3, verified=Verified(12, 0)))
    for backend, size in itertools.product(BACKENDS, (1, 1024, 1_000_000)):
        lat = BACKENDS[backend] * (2e-6 + size / 5e9)
        rs.add(Result("pingpong", backend, "native", "buffer", size, 2,
                      {"roundtrip": _samples(2 * lat), "latency": _samples(lat)}, nbytes=size, primary="latency"))
    for size in (1000, 65536):
        rs.add(Result("stream", "zmq", "native", "buffer", size, 4,
                      {"send": _samples(1e-6 + size / 1e10), "delivered": _samples(3e-6 + size / 3e9)},
                      nbytes=size, primary="delivered", extra={"window": 64}, readers=3, delivery="channel"))
    for work in (0.0, 1e-4, 1e-3):
        r = Result("granularity", "zmq", "bytes", "tiny", 64, 2,
                   {"roundtrip": _samples(work + 3e-5), "work": _samples(work) if work else [0.0] * 9,
                    "overhead": _samples(3e-5)}, nbytes=64, primary="overhead", extra={"work_s": work})
        r.variant = f"work={work}"
        rs.add(r)
    for size in (1_000, 100_000, 10_000_000):
        rs.add(Result("copy", "numpy", "native", "buffer", size, 1, {"copy": _samples(size / 1e10)}, nbytes=size,
                      primary="copy"))
    rs.add(Result("shared-array", "pool", "native", "ndarray", 602_000_000, 2, {"completion": _samples(0.05)},
                  nbytes=602_000_000))
    for path, t in (("handle", 6e-5), ("ping", 5e-5)):
        rs.add(Result("shared-array-handle", path, "native", "ndarray", 2**30, 2, {"completion": _samples(t)},
                      nbytes=2**30, extra={"release": 4.5e-6} if path == "handle" else {}))
    return rs


@pytest.fixture(scope="module")
def written(tmp_path_factory):
    out = tmp_path_factory.mktemp("report")
    rs = synthetic()
    rs.save(out / "results.json")
    summary = report.write_report(rs, out)
    return out, summary


def test_csv_files_are_well_formed(written):
    out, _ = written
    expected_rows = {"write_summary.csv": 36, "read_summary.csv": 36, "throughput_summary.csv": 36 + 9 + 2,
                     "latency_summary.csv": 9, "stream_summary.csv": 2, "granularity_summary.csv": 3,
                     "copy_bandwidth.csv": 3}
    for name, n in expected_rows.items():
        with (out / name).open() as f:
            rows = list(csv.DictReader(f))
        assert len(rows) == n, name
        assert all(r["backend"] and r["scenario"] for r in rows)
    with (out / "read_summary.csv").open() as f:
        row = next(csv.DictReader(f))
    assert float(row["completion_median_s"]) > 0 and row["verified_checks"] == "12"
    with (out / "throughput_summary.csv").open() as f:
        eff = [float(r["efficiency"]) for r in csv.DictReader(f) if r["scenario"] == "broadcast"]
    assert all(0 < e < 10 for e in eff)  # a fraction of the copy bandwidth of the same run
    with (out / "all_results.csv").open() as f:
        all_rows = list(csv.DictReader(f))
    assert {r["metric"] for r in all_rows} >= {"completion", "write", "latency", "delivered", "overhead", "copy"}


def test_plots_are_pngs_with_content(written):
    import matplotlib.image as mpimg

    out, _ = written
    for name in ("write_performance", "read_performance", "completion", "throughput", "efficiency",
                 "latency", "stream", "granularity"):
        path = out / f"{name}.png"
        assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", name
        img = mpimg.imread(path)
        assert img.shape[0] > 300 and img.shape[1] > 600, name
        assert img[..., :3].std() > 0.05, name  # not a blank canvas


def test_markdown_has_the_tables_people_expect(written):
    out, summary = written
    text = summary.read_text()
    assert "# pytest-ipcbench results" in text
    assert "MPI: MPICH 4.3.0" in text and "oversubscribed: yes" in text and "MB = 10^6" in text
    assert "| Backend | Mode | Delivery | Ranks | Processes | Median write | Median read | Completion p10 | p50 | p90 | p99 |" in text
    assert "| Backend | Mode | Ranks | " in text  # tables by size: a row per backend, mode and rank count
    assert "baseline (1.00x)" in text and "x slower" in text
    assert "## Write time against size" in text and "seed 00" not in text.lower() and "## Read time against size" in text
    assert "## Ping-pong latency" in text and "## Stream" in text and "## Granularity" in text
    assert "## Cases that failed" in text and "boom" in text
    assert "(1000 entries)" in text  # dict sizes are shown as entries too
    assert "## Shared arrays: a 602 MB array" in text
    assert "handle against None" in text and "1.20x" in text and "4.5 µs" in text  # the release
    width = None
    for line in text.splitlines():  # every table row has as many cells as its header
        if not line.startswith("|"):
            width = None
        elif width is None:
            width = line.count("|")
        else:
            assert line.count("|") == width, line


def test_relative_speed_orders_by_completion(written):
    rs = synthetic()
    at = [r for r in rs.results if r.scenario == "broadcast" and r.payload == "ndarray" and r.size == 10_000_000]
    table = relative_speed_table(at, copy_bandwidth_by_size(rs.results))
    first = table.splitlines()[2]
    assert first.startswith("| shm | native |") and "baseline" in first
    assert "| mp-queue | bytes |" in table.splitlines()[-1]


def test_cli_report(tmp_path, capsys):
    full = synthetic()
    rs = ResultSet(env=full.env, results=[r for r in full.results if r.scenario == "broadcast" and r.size == 1_000])
    path = rs.save(tmp_path / "results.json")
    assert cli_main(["report", str(path), "--out", str(tmp_path / "out"), "--no-plots"]) == 0
    assert (tmp_path / "out" / "summary.md").exists() and (tmp_path / "out" / "read_summary.csv").exists()
    assert not list((tmp_path / "out").glob("*.png"))
    assert "baseline (1.00x)" in capsys.readouterr().out
    assert cli_main(["report", str(tmp_path / "missing.json")]) == 2


def test_empty_results_still_make_a_summary(tmp_path):
    summary = report.write_report(ResultSet(), tmp_path)
    assert summary.read_text().startswith("# pytest-ipcbench results")


def test_a_wide_distribution_is_shown_and_named(tmp_path) -> None:
    """The issue: shm at 1 KB had p10 4.2 us and median 160 us, and nothing showed it."""
    from pytest_ipcbench.results.results import ResultSet as RS

    rng = np.random.default_rng(0)
    fast, slow = rng.uniform(4.0e-6, 4.4e-6, 30), rng.uniform(150e-6, 170e-6, 40)
    wide = np.concatenate([fast, slow])
    narrow = rng.uniform(20e-6, 22e-6, 70)
    rs = RS(env={})
    for backend, s in (("shm", wide), ("zmq", narrow)):
        rs.add(Result("broadcast", backend, "native", "ndarray", 1000, 2,
                      {"write": list(s / 2), "read_avg": list(s), "completion": list(s), "completion_touched": list(s)},
                      nbytes=1000, delivery="store", readers=1))
    summary = report.write_report(rs, tmp_path)
    text = summary.read_text()
    note = next(line for line in text.splitlines() if line.startswith("- shm/native ndarray"))
    assert "completion p10 4." in note and "p50 1" in note and "a wide distribution, the median alone hides it" in note
    assert not any(line.startswith("- zmq/native") for line in text.splitlines())  # narrow: no note
    row = next(line for line in text.splitlines() if line.startswith("| shm | native | store | 2 |"))
    assert "(wide)" in row and "| 4." in row  # p10 beside the median
    with open(tmp_path / "write_summary.csv") as f:
        header = f.readline().strip().split(",")
    assert {"write_p10_s", "write_p90_s", "write_p99_s", "write_median_s"} <= set(header)
