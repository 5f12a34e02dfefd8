"""Reports say which process model each case ran in (MPI ranks or local workers) and never rank
the two in one table without saying so; every backend of a report has a colour of its own
(issue 39: built-ins in MPI ranks beside plugins in local workers in one table; lmdb and a plugin
shared a blue)."""

from __future__ import annotations

import csv

import numpy as np

from pytest_ipcbench import report
from pytest_ipcbench.report.markdown import headline, markdown
from pytest_ipcbench.report.plots import _palette, _style, colour_order, series_label
from pytest_ipcbench.results.results import Result, ResultSet


def _bcast(backend: str, group: str, t: float, size: int = 1_000_000) -> Result:
    samples = {m: list(t * (1 + 0.01 * np.linspace(-1, 1, 9))) for m in ("write", "read_avg", "completion")}
    return Result("broadcast", backend, "bytes", "ndarray", size, 4, samples, nbytes=size, delivery="channel",
                  readers=3, group=group)


def _mixed() -> ResultSet:
    rs = ResultSet(env={})
    rs.add(_bcast("shm", "mpi", 2e-3))
    rs.add(_bcast("zmq", "mpi", 4e-3))
    rs.add(_bcast("fifo", "local", 1e-3))
    rs.add(_bcast("mp-queue", "local", 3e-3))
    return rs


def test_the_summary_ranks_within_each_process_model_and_says_so() -> None:
    text = headline(_mixed().results)
    rows = {line.split("|")[1].strip(): line for line in text.splitlines() if line.startswith("| ") and "---" not in line}
    assert "| Processes |" in rows["Backend"]
    assert "| MPI ranks |" in rows["shm"] and "baseline (1.00x)" in rows["shm"]
    assert "| local workers |" in rows["fifo"] and "baseline (1.00x)" in rows["fifo"]
    assert "2.00x slower" in rows["zmq"] and "3.00x slower" in rows["mp-queue"]  # each against its own model
    assert "These rows ran in different process models (MPI ranks and local workers)" in text


def test_one_process_model_needs_no_note() -> None:
    rs = ResultSet(env={})
    rs.add(_bcast("shm", "mpi", 2e-3))
    rs.add(_bcast("zmq", "mpi", 4e-3))
    assert "different process models" not in markdown(rs)
    assert "| MPI ranks |" in markdown(rs)


def test_tables_csv_and_plots_name_the_process_model(tmp_path) -> None:
    rs = _mixed()
    report.write_report(rs, tmp_path, plots=False)
    text = (tmp_path / "summary.md").read_text()
    assert "| Backend | Mode | Ranks | Processes |" in text  # the tables by size
    with open(tmp_path / "read_summary.csv") as f:
        by_backend = {row["backend"]: row["processes"] for row in csv.DictReader(f)}
    assert by_backend == {"shm": "MPI ranks", "zmq": "MPI ranks", "fifo": "local workers", "mp-queue": "local workers"}
    assert series_label("fifo", "bytes", "local") == "fifo (bytes, local workers)"
    assert series_label("shm", "native", "mpi") == "shm (native, MPI ranks)"


def test_every_backend_of_a_report_has_a_colour_of_its_own() -> None:
    names = ["lmdb", "shm", "zmq", "mpi-bcast", "mpi-pkl5", "mpi-buffer", "mpi-p2p", "mp-queue", "mpi-shm-win",
             "fifo", "arrow-uds", "posixmq", "ishm"]  # nine built-ins and four plugins
    colours = colour_order(_bcast(n, "local", 1e-3) for n in names)
    styles = {n: _style(n, "bytes", colours)["color"] for n in names}
    assert len(set(styles.values())) == len(names), styles
    assert len(set(map(tuple, _palette()))) >= 20
