"""``ipcbench export``: each format validated against its published description (JSON Schemas in
tests/data/schemas written from the formats' docs and sources), and read back by the tool itself
where it can be run here (pytest-benchmark's own ``compare``)."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from pytest_ipcbench.commands import main
from pytest_ipcbench.core.counters import Counters, RankCounters
from pytest_ipcbench.core.group import in_mpi_job
from pytest_ipcbench.report.exports import FORMATS
from pytest_ipcbench.results.results import Result, ResultSet
from pytest_ipcbench.results.stats import median_interval

jsonschema = pytest.importorskip("jsonschema", reason="jsonschema is in the dev extra (pip install -e '.[dev]')")
pytestmark = pytest.mark.skipif(in_mpi_job(), reason="runs commands in subprocesses: not inside an MPI job")
SCHEMAS = Path(__file__).resolve().parents[1] / "data" / "schemas"
SCHEMA_OF = {"bmf": "bmf.schema.json", "github-action-benchmark": "github-action-benchmark-custom.schema.json",
             "pytest-benchmark": "pytest-benchmark.schema.json"}


def _results(tmp_path: Path) -> Path:
    rng = np.random.default_rng(3)
    counted = Counters([RankCounters(0, "writer", {"syscalls.data": [16] * 3, "pickle.dumps": [16] * 3}, 16),
                        RankCounters(1, "reader", {"syscalls.data": [32] * 3, "io.rchar": [16 * 999_000] * 3}, 16)],
                       16, 1, 3)
    rs = ResultSet(env={"host": "h", "cpu": "cpu", "cores": 2, "python": "CPython 3.11.2",
                        "platform": "Linux-6.1-x86_64", "git": {"commit": "abc", "dirty": False}})
    rs.add(Result("broadcast", "shm", "bytes", "ndarray", 1_000_000, 4,
                  {"completion": list(rng.lognormal(np.log(4.6e-4), 0.1, 200))}, nbytes=999_000, counters=counted,
                  extra={"test": "tests/test_x.py::test_shm[r4]"}))
    rs.add(Result("pingpong", "zmq", "bytes", "tiny", 64, 2, {"completion": list(rng.lognormal(np.log(2e-5), 0.2, 50))},
                  nbytes=64))
    rs.add(Result("copy", "numpy", "bytes", "buffer", 1_000_000, 1, {"completion": [1e-4] * 10}))  # a reference
    return rs.save(tmp_path / "results.json")


@pytest.mark.parametrize("fmt", list(FORMATS))
def test_each_export_follows_its_published_format(fmt: str, tmp_path: Path) -> None:
    results = _results(tmp_path)
    out = tmp_path / f"{fmt}.json"
    assert main(["export", str(results), "--format", fmt, "--out", str(out)]) == 0
    data = json.loads(out.read_text())
    jsonschema.validate(data, json.loads((SCHEMAS / SCHEMA_OF[fmt]).read_text()))
    rs = ResultSet.load(results)
    shm = rs.results[0]
    med = shm.summary().median
    low, high = median_interval(shm.samples["completion"])
    key = "broadcast/shm/bytes/ndarray/1000000/r4"
    assert "copy" not in json.dumps(data)  # references measure the machine: not exported
    if fmt == "bmf":
        assert set(data) == {key, "pingpong/zmq/bytes/tiny/64/r2"}
        lat = data[key]["latency"]  # Bencher's latency is in nanoseconds
        assert lat["value"] == pytest.approx(med * 1e9) and lat["lower_value"] == pytest.approx(low * 1e9)
        assert lat["lower_value"] < lat["value"] < lat["upper_value"] == pytest.approx(high * 1e9)
        assert data[key]["reader-syscalls-data"] == {"value": 2.0} and data[key]["writer-pickle-dumps"] == {"value": 1.0}
        assert list(data["pingpong/zmq/bytes/tiny/64/r2"]) == ["latency"]  # not counted: no counter measure
    elif fmt == "github-action-benchmark":
        (entry,) = [e for e in data if e["name"] == key]
        assert entry["unit"] == "us" and entry["value"] == pytest.approx(med * 1e6)
        assert float(entry["range"].split()[1]) == pytest.approx(max(med - low, high - med) * 1e6, rel=1e-5)
        assert "95% interval" in entry["extra"]
        (count,) = [e for e in data if e["name"] == f"{key} reader io.rchar"]
        assert count == {"name": f"{key} reader io.rchar", "unit": "per message", "value": 999000.0,
                         "extra": "counted per message (docs/counters.md)"}
    else:
        bm = data["benchmarks"][0]
        assert bm["name"] == key and bm["fullname"] == f"tests/test_x.py::test_shm[r4]::{key}"
        assert bm["stats"]["rounds"] == 200 and bm["stats"]["median"] == pytest.approx(med)
        assert bm["stats"]["data"] == pytest.approx(shm.samples["completion"])
        assert bm["extra_info"]["counters"]["reader"]["syscalls.data"] == 2


def test_pytest_benchmark_reads_the_export_and_the_schema_holds_its_own_output(pytester: pytest.Pytester,
                                                                               tmp_path: Path) -> None:
    """The schema is true to what pytest-benchmark writes, and pytest-benchmark's own `compare`
    reads our export beside its own file."""
    schema = json.loads((SCHEMAS / SCHEMA_OF["pytest-benchmark"]).read_text())
    pytester.makepyfile(test_plain=textwrap.dedent("""
        def test_sum(benchmark):
            benchmark(sum, range(100))
    """))
    own = tmp_path / "own.json"
    pytester.runpytest_subprocess("-p", "no:cacheprovider", "-p", "no:ipcbench", f"--benchmark-json={own}",
                                  "-q").assert_outcomes(passed=1)
    jsonschema.validate(json.loads(own.read_text()), schema)
    ours = tmp_path / "ours.json"
    assert main(["export", str(_results(tmp_path)), "--format", "pytest-benchmark", "--out", str(ours)]) == 0
    cli = Path(sys.executable).with_name("pytest-benchmark")  # its console script (its module has no __main__)
    proc = subprocess.run([str(cli), "compare", str(own), str(ours),
                           "--columns", "min,median,max,rounds"], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "broadcast/shm/bytes/ndarray/1000000/r4" in proc.stdout and "test_sum" in proc.stdout


def test_bad_input_exits_2_and_writes_nothing(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    only_refs = ResultSet()
    only_refs.add(Result("copy", "numpy", "bytes", "buffer", 1000, 1, {"completion": [1e-6] * 5}))
    path = only_refs.save(tmp_path / "refs.json")
    out = tmp_path / "out.json"
    assert main(["export", str(path), "--format", "bmf", "--out", str(out)]) == 2
    assert "nothing to export" in capsys.readouterr().err and not out.exists()
    assert main(["export", str(tmp_path / "missing.json"), "--format", "bmf"]) == 2
    assert "missing.json" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["export", str(path), "--format", "csv"])


@pytest.mark.parametrize("n", [3, 9, 40, 1500])
def test_median_interval_covers_the_median_as_often_as_it_says(n: int) -> None:
    rng = np.random.default_rng(n)
    hits = sum(lo <= np.log(2) <= hi for lo, hi in (median_interval(rng.exponential(size=n)) for _ in range(600)))
    floor = 0.70 if n == 3 else 0.92  # 3 samples: min-max covers 1 - 2/8 = 75%; 600 draws: +-2%
    assert hits / 600 >= floor
