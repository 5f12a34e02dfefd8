"""Report of the MPI method matrix on synthetic results (no MPI needed)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from pytest_ipcbench.report import mpi_methods as rep
from pytest_ipcbench.results.results import Result

SIZES = {"Small": 11_000, "Medium": 110_000, "Large": 1_100_000}

# median seconds per (config, shape, method); chosen so that the winners differ by size
TIMES = {
    ("Small", "1d", "bcast"): 10e-6,
    ("Small", "1d", "p2p"): 12e-6,
    ("Small", "1d", "pickle"): 30e-6,
    ("Small", "2d", "pack"): 25e-6,
    ("Small", "2d", "bcast"): 40e-6,
    ("Small", "2d", "rma-lock"): 90e-6,
    ("Medium", "1d", "p2p"): 60e-6,
    ("Medium", "1d", "bcast"): 70e-6,
    ("Medium", "2d", "datatype"): 80e-6,
    ("Medium", "2d", "p2p"): 150e-6,
    ("Large", "2d", "bcast"): 900e-6,  # no 1D at Large: not in the 1D-vs-2D table
}


def result(config: str, shape: str, method: str, median: float, ranks: int = 4, **kw) -> Result:
    samples = [median * f for f in (0.9, 1.0, 1.0, 1.1, 1.3)]
    return Result(
        scenario="mpi-method",
        backend=method,
        mode="native",
        payload={"1d": "array1d", "2d": "ragged2d"}[shape],
        size=SIZES[config],
        ranks=ranks,
        samples={"completion": samples},
        nbytes=SIZES[config],
        extra={"config": config, "base": SIZES[config] // 220, **kw},
    )


@pytest.fixture
def results() -> list[Result]:
    out = [result(c, s, m, t) for (c, s, m), t in TIMES.items()]
    # results of other scenarios are ignored
    out.append(Result("broadcast", "shm", "copy", "ndarray", 1000, 4, {"completion": [1.0]}))
    return out


def _section(md: str, title: str) -> str:
    """The lines of the markdown table following a heading ``#### title``."""
    lines = md.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("#### ") and title in line)
    body = []
    for line in lines[start + 1 :]:
        if line.startswith("#"):
            break
        if line.startswith("| ") and not line.startswith("| Rank"):
            body.append([c.strip() for c in line.strip("|").split("|")])
    return body


def test_rows_use_the_median_and_ignore_other_scenarios(results: list[Result]) -> None:
    rows = rep.rows_of(results)
    assert len(rows) == len(TIMES)
    small_bcast = next(r for r in rows if (r.config, r.shape, r.method) == ("Small", "1d", "bcast"))
    assert small_bcast.median == pytest.approx(10e-6)
    assert small_bcast.n == 5 and small_bcast.ranks == 4


def test_rows_keep_the_latest_result_of_a_case(results: list[Result]) -> None:
    results.append(result("Small", "1d", "bcast", 99e-6))
    rows = [r for r in rep.rows_of(results) if (r.config, r.shape, r.method) == ("Small", "1d", "bcast")]
    assert [r.median for r in rows] == [pytest.approx(99e-6)]


def test_ranking_tables_rank_methods_by_time(results: list[Result]) -> None:
    md = rep.ranking_tables(results)
    assert md.index("2D (ragged rows)") < md.index("1D (contiguous)")  # the seed's order
    small_2d = _section(md.split("1D (contiguous)")[0], "Small")
    assert [(r[0], r[1]) for r in small_2d] == [("1", "**pack**"), ("2", "bcast"), ("3", "rma-lock")]
    assert small_2d[0][2:4] == ["25 µs", "1.00x"]
    assert small_2d[1][2:4] == ["40 µs", "1.60x"]
    assert small_2d[2][2:4] == ["90 µs", "3.60x"]
    medium_1d = _section(md.split("1D (contiguous)")[1], "Medium")
    assert [r[1] for r in medium_1d] == ["**p2p**", "bcast"]
    assert "C++ benchmark: 107 KB" in md


def test_1d_vs_2d_table(results: list[Result]) -> None:
    md = rep.comparison_1d_2d_table(results)
    lines = [line for line in md.splitlines() if line.startswith("| Small") or line.startswith("| Medium")]
    assert len(lines) == 2  # Large has no 1D result
    small = [c.strip() for c in lines[0].strip("|").split("|")]
    assert small[2] == "pack (25 µs)" and small[3] == "bcast (10 µs)"
    assert small[4] == "2.50x"
    assert small[5] == "1.79x"  # the seed: Pack 7.5 µs / Bcast 4.2 µs
    medium = [c.strip() for c in lines[1].strip("|").split("|")]
    assert medium[2].startswith("datatype") and medium[3].startswith("p2p") and medium[4] == "1.33x"
    pairs = rep.best_pairs(results)
    assert [(p.config, p.best_2d.method, p.best_1d.method) for p in pairs] == [
        ("Small", "pack", "bcast"),
        ("Medium", "datatype", "p2p"),
    ]


def test_seed_comparison_uses_the_seed_numbers(results: list[Result]) -> None:
    comps = {(c.config, c.shape, c.method): c for c in rep.cpp_comparisons(results)}
    # methods without a counterpart in the seed's tables are left out
    assert ("Small", "2d", "rma-lock") not in comps
    c = comps[("Small", "2d", "pack")]
    assert c.cpp_method == "Pack MPI" and c.cpp == pytest.approx(7.5e-6)
    assert c.ratio == pytest.approx(25 / 7.5)
    c = comps[("Large", "2d", "bcast")]
    assert c.cpp == pytest.approx(193e-6) and c.ratio == pytest.approx(900 / 193)
    c = comps[("Medium", "1d", "p2p")]
    assert c.cpp_method == "Raw MPI 1D" and c.cpp == pytest.approx(26.9e-6)
    md = rep.cpp_comparison_table(results)
    header = md.splitlines()[0]
    assert "pack (C++ Pack MPI)" in header and "rma-lock" not in header
    small_2d = next(line for line in md.splitlines() if line.startswith("| Small | 2D | 4 |"))
    assert "25 µs vs 7.5 µs: **3.33x**" in small_2d


def test_seed_comparison_only_for_the_seeds_rank_count(results: list[Result]) -> None:
    two = [result("Small", "1d", "bcast", 5e-6, ranks=2)]
    assert rep.cpp_comparisons(two) == []
    assert [c.ranks for c in rep.cpp_comparisons(two, ranks=None)] == [2]
    assert "No measured case" in rep.cpp_comparison_table(two)


def test_seed_data_matches_the_seed_tables() -> None:
    # spot checks against the C++ benchmark's tables, and the fastest per size (its 1D-vs-2D table)
    assert rep.CPP_FIGURES_US["2d"]["XXXLarge"]["RDMA MPI"] == 3_428_000
    assert rep.CPP_FIGURES_US["1d"]["XXLarge"]["Raw MPI 1D"] == 52_800
    best = {c: min(t, key=t.get) for c, t in rep.CPP_FIGURES_US["2d"].items()}
    assert best == {
        "Small": "Pack MPI", "Medium": "Bcast MPI", "Large": "Datatype MPI",
        "XLarge": "Bcast MPI", "XXLarge": "Raw MPI", "XXXLarge": "Bcast MPI",
    }
    assert all(len(t) == 7 for t in rep.CPP_FIGURES_US["2d"].values())
    assert all(len(t) == 4 for t in rep.CPP_FIGURES_US["1d"].values())


def test_winners_table(results: list[Result]) -> None:
    md = rep.winners_table(results)
    row = next(line for line in md.splitlines() if line.startswith("| Small | 2D"))
    assert "pack (25 µs)" in row and "bcast (40 µs)" in row and "Pack MPI (7.5 µs)" in row


def test_ranks_are_reported_apart(results: list[Result]) -> None:
    results.append(result("Small", "1d", "bcast", 5e-6, ranks=2))
    md = rep.ranking_tables(results)
    assert "1D (contiguous), 2 ranks" in md and "1D (contiguous), 4 ranks" in md


def test_write_report(results: list[Result], tmp_path: Path) -> None:
    paths = rep.write_mpi_method_report(results, tmp_path / "out")
    assert [p.name for p in paths] == ["mpi-methods.md", "mpi-methods.png"]
    md = paths[0].read_text()
    for heading in ("## Fastest method per size", "## 1D vs 2D", "## Python against the C++ benchmark",
                    "## Methods ranked, per configuration"):
        assert heading in md
    assert "![time vs size](mpi-methods.png)" in md
    png = paths[1].read_bytes()
    assert png.startswith(b"\x89PNG") and len(png) > 10_000
    assert not re.search(r"\bnan\b", md)


def test_write_report_without_method_results(tmp_path: Path) -> None:
    other = Result("broadcast", "shm", "copy", "ndarray", 1000, 4, {"completion": [1.0]})
    assert rep.write_mpi_method_report([other], tmp_path) == []
    assert list(tmp_path.iterdir()) == []
    assert rep.plot_time_vs_size([], tmp_path / "x.png") is None
    assert "No configuration" in rep.comparison_1d_2d_table([])


def test_pivot_table(results: list[Result]) -> None:
    md = rep.pivot_table(results)
    header = [c.strip() for c in md.splitlines()[0].strip("|").split("|")]
    assert header[:3] == ["Config", "Shape", "Ranks"]
    assert header[3:] == ["p2p", "bcast", "pack", "datatype", "rma-lock", "pickle"]  # the seed-style order
    small_2d = next(line for line in md.splitlines() if line.startswith("| Small | 2D |"))
    cells = [c.strip() for c in small_2d.strip("|").split("|")]
    assert cells[3:] == ["", "40 µs", "**25 µs**", "", "90 µs", ""]
    assert rep.pivot_table(results, ranks=2) == "_No results._"


def test_rows_use_the_primary_metric_of_harness_results() -> None:
    """Results of the MPI methods on the harness: primary ``transfer`` (max over every rank), not the
    readers' ``completion``; configurations recognised by size when ``extra`` lacks them."""
    r = Result(
        scenario="mpi-method", backend="p2p", mode="native", payload="array1d", size=SIZES["Medium"], ranks=4,
        samples={"completion": [1e-6] * 3, "write": [5e-6] * 3, "transfer": [5e-6] * 3},
        nbytes=SIZES["Medium"], primary="transfer",
    )
    (row,) = rep.rows_of([r])
    assert row.median == pytest.approx(5e-6) and row.config == "Medium" and row.shape == "1d"
