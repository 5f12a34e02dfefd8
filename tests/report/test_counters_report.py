"""The counters in the report (report/counters.py): the cost table, counters.csv, run's note."""

from __future__ import annotations

import csv

from pytest_ipcbench.core.counters import Counters, RankCounters
from pytest_ipcbench.report import write_report
from pytest_ipcbench.report.counters import cost_section, counter_rows, run_note
from pytest_ipcbench.results.results import Result, ResultSet


def counted() -> Result:
    writer = RankCounters(0, "writer", {"syscalls.data": [16, 16, 16], "pickle.dumps": [16, 16, 16],
                                        "ctx.voluntary": [3, 9, 5], "pickle.loads": [0, 16, 0]}, 16)
    readers = [RankCounters(i, "reader", {"syscalls.data": [16 * i] * 3, "pickle.loads": [16] * 3}, 16,
                            {"syscalls.total": "tracefs is not mounted"}) for i in (1, 2)]
    return Result("broadcast", "shm", "bytes", "ndarray", 1024, 3, {"completion": [1e-5, 2e-5]}, nbytes=1024,
                  counters=Counters([writer, *readers], 16, 1, 3))


def test_cost_table_marks_statistical_and_absent_counters():
    bare = Result("broadcast", "zmq", "bytes", "ndarray", 1024, 3, {"completion": [1e-5]})
    text = "\n".join(cost_section([counted(), bare]))
    assert "## Cost per message" in text
    rows = [line for line in text.splitlines() if line.startswith("| broadcast")]
    assert len(rows) == 2  # the uncounted case has no row
    writer, reader = rows
    # columns: syscalls, data, sync, mapping, waiting, read B, written B, minor faults, dumps, loads, alloc B, alloc peak B
    assert writer.endswith("| writer | n/a | 1 | n/a | n/a | n/a | n/a | n/a | n/a | 1 | ~0 | n/a | n/a |")
    assert "| reader | n/a | 2 |" in reader  # total absent; data: the larger reader's, 2
    assert "- tracefs is not mounted" in text
    assert cost_section([bare]) == []


def test_counters_csv_and_run_note(tmp_path):
    rows = counter_rows([counted()])
    by = {(r["rank"], r["counter"]): r for r in rows}
    assert by[(0, "syscalls.data")]["per_message"] == 1 and by[(0, "syscalls.data")]["exact"] is True
    v = by[(0, "ctx.voluntary")]
    assert v["exact"] is False and (v["min"], v["max"]) == (3 / 16, 9 / 16)
    assert by[(1, "syscalls.total")]["absent"] == "tracefs is not mounted"
    assert by[(0, "faults.minor")]["absent"] == "not counted"
    note = run_note(counted())
    assert note == "writer data 1 dumps 1 | reader data 2 loads 1"
    write_report(ResultSet(results=[counted()]), tmp_path, plots=False)
    with open(tmp_path / "counters.csv") as f:
        assert len(list(csv.DictReader(f))) == len(rows)
    assert "Cost per message" in (tmp_path / "summary.md").read_text()


def test_deep_counters_get_columns_and_csv_rows_only_where_deep_mode_ran():
    from pytest_ipcbench.harness.deep import merge

    plain = counted()
    assert "copied B" not in "\n".join(cost_section([plain]))
    assert not any(r["counter"] == "instructions" for r in counter_rows([plain]))
    deep = Counters([RankCounters(0, "writer", {"copied.bytes": [4096, 4096], "copied.calls": [8, 8],
                                                "instructions": [4000, 4400]}, 4, {}, 4),
                     RankCounters(1, "reader", {}, 0, {"copied.bytes": "valgrind not found", "copied.calls":
                                                       "valgrind not found", "instructions": "valgrind not found"})],
                    4, 1, 2)
    r = counted()
    r.counters = merge(r.counters, deep)
    text = "\n".join(cost_section([r]))
    writer = next(line for line in text.splitlines() if "| writer |" in line)
    assert writer.endswith("| 1,024 | 2 | ~1,100 |")  # per deep mode's 4 messages, not the pass's 16
    assert "- valgrind not found" in text
    rows = {(x["rank"], x["counter"]): x for x in counter_rows([r])}
    assert rows[(0, "copied.bytes")]["per_message"] == 1024 and rows[(0, "copied.bytes")]["messages"] == 4
    assert rows[(1, "instructions")]["absent"] == "valgrind not found"
    assert (2, "instructions") not in rows  # a rank deep mode did not report: no row


def test_a_reference_is_listed_right_under_its_backend():
    def one(backend: str, mode: str, data: int) -> Result:
        ranks = [RankCounters(0, "writer", {"syscalls.data": [data] * 3}, 1), RankCounters(1, "reader", {}, 1)]
        return Result("pingpong", backend, mode, "buffer", 1024, 2, {"latency": [1e-5]}, nbytes=1024,
                      counters=Counters(ranks, 1, 1, 3))
    text = "\n".join(cost_section([one("ref-zmq", "native", 2), one("shm", "native", 0), one("zmq", "native", 4),
                                   one("ref-shm", "native", 0)]))
    order = [line.split("|")[2].strip() for line in text.splitlines() if "| writer |" in line]
    assert order == ["shm/native", "ref-shm/native", "zmq/native", "ref-zmq/native"]
