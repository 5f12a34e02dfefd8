"""Deep mode (harness/deep.py): parsing valgrind's output, the counters' records, and one tiny
case under valgrind (skipped where valgrind is absent)."""

from __future__ import annotations

import json

import pytest

from pytest_ipcbench.core.counters import CounterAbsent, Counters, RankCounters
from pytest_ipcbench.core.group import in_mpi_job
from pytest_ipcbench.core.payloads import PayloadSpec
from pytest_ipcbench.harness import deep
from pytest_ipcbench.harness.deep import DeepCase, deep_counters, merge, parse_callgrind, parse_dhat
from pytest_ipcbench.harness.payload import payload_bytes

pytestmark = pytest.mark.skipif(in_mpi_job(), reason="deep mode starts its own mpiexec: not inside an MPI job")

# the shape valgrind 3.19's DHAT writes with --mode=copy (abridged: frames and the frame table)
DHAT_COPY = {
    "dhatFileVersion": 2, "mode": "copy", "verb": "Copied", "bklt": False, "bkacc": False, "tu": "instrs",
    "Mtu": "Minstr", "cmd": "python -c ...", "pid": 16291, "te": 94046870,
    "pps": [{"tb": 45, "tbk": 3, "fs": [1, 2]}, {"tb": 1_000_000, "tbk": 1, "fs": [1, 3]},
            {"tb": 0, "tbk": 2, "fs": [4]}],
    "ftbl": ["[root]", "0x1: memcpy", "0x2: f", "0x3: g", "0x4: h"],
}

CALLGRIND = """# callgrind format
version: 1
creator: callgrind-3.19.0
pid: 16072
cmd:  python x.py
part: 1

positions: line
events: Ir
summary: 467116292

fl=(1) ???
fn=(1) 0x0000000000001100
0 12
totals: 467116292
"""


def test_parse_dhat_sums_bytes_and_calls() -> None:
    assert parse_dhat(json.dumps(DHAT_COPY)) == (1_000_045, 6)


def test_parse_dhat_refuses_a_heap_profile() -> None:
    with pytest.raises(ValueError, match="--mode=copy"):
        parse_dhat(json.dumps({**DHAT_COPY, "mode": "heap"}))


def test_parse_dhat_of_no_copies() -> None:
    assert parse_dhat(json.dumps({**DHAT_COPY, "pps": []})) == (0, 0)


def test_parse_callgrind_totals_and_summary() -> None:
    assert parse_callgrind(CALLGRIND) == 467116292
    # a file cut before its totals line: the summary
    assert parse_callgrind(CALLGRIND.replace("totals: 467116292\n", "").replace("467116292", "123")) == 123
    with pytest.raises(ValueError, match="totals"):
        parse_callgrind("events: Ir\n0 12\n")


def test_deep_counters_use_their_own_message_count_and_survive_json() -> None:
    """A merged record: the counting pass's counters per its 16 messages, deep's per its 4."""
    counted = Counters([RankCounters(0, "writer", {"pickle.dumps": [16, 16, 16]}, 16)], 16, 1, 3)
    dc = Counters([RankCounters(0, "writer", {"copied.bytes": [4096, 4100], "instructions": [400, 400]}, 4, {}, 4)],
                  4, 1, 2)
    both = merge(counted, dc)
    w = both.writer
    assert w.value("pickle.dumps") == 1 and w.exact("pickle.dumps")
    assert w.instructions == 100 and w.exact("instructions")
    assert not w.exact("copied.bytes") and w.spread("copied.bytes") == (1024, 1025)
    back = Counters.from_dict(json.loads(json.dumps(both.to_dict())))
    assert back.writer.value("copied.bytes") == w.value("copied.bytes")
    assert back.writer.instructions == 100
    # without deep mode the deep counters are not counted (absent), never 0
    with pytest.raises(CounterAbsent):
        Counters([RankCounters(0, "writer", {"pickle.dumps": [1]}, 1)], 1, 1, 1).writer.value("copied.bytes")


def test_without_valgrind_the_counters_are_absent_with_the_reason(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(deep.shutil, "which", lambda name: None)
    c = deep_counters(DeepCase("shm", "native", "ndarray", 1024))
    for rank in c.ranks:
        for name in ("copied.bytes", "copied.calls", "instructions"):
            with pytest.raises(CounterAbsent, match="valgrind not found"):
                rank.value(name)


def test_bad_requests_are_usage_errors() -> None:
    from pytest_ipcbench.core.errors import UsageError

    with pytest.raises(UsageError, match="granularity"):
        deep_counters(DeepCase("shm", scenario="granularity"))
    with pytest.raises(UsageError, match="unknown deep tool"):
        deep_counters(DeepCase("shm"), tools=("massif",))
    with pytest.raises(UsageError, match="iterations"):
        deep_counters(DeepCase("shm"), iterations=0)


NO_VALGRIND = deep.valgrind_unavailable()


@pytest.mark.skipif(NO_VALGRIND is not None, reason=f"deep mode needs valgrind: {NO_VALGRIND}")
def test_shm_native_reader_copies_no_payload_and_a_pickling_reader_copies_it() -> None:
    """Under valgrind (DHAT copy mode), 2 MPI ranks, 256 KiB: shm's native path copies the payload
    once, on the writer (into the segment), and not on the reader (a view of the segment); in bytes
    mode (pickle) the reader copies at least the payload (unpickling) and the writer at least twice
    (pickling, then into the segment)."""
    size = 256 * 1024
    nbytes = payload_bytes(PayloadSpec("ndarray", size))  # whole rows of the array: a little under size
    native = deep_counters(DeepCase("shm", "native", "ndarray", size), iterations=4, repeats=1, tools=("dhat",))
    pickled = deep_counters(DeepCase("shm", "bytes", "ndarray", size), iterations=4, repeats=1, tools=("dhat",))
    copied = {(c, r.role): r.value("copied.bytes") for c, x in (("native", native), ("bytes", pickled))
              for r in x.ranks}
    # besides the payload: harness and pickle bookkeeping only (a few KiB per message)
    assert nbytes <= copied["native", "writer"] < nbytes + nbytes / 8, copied
    assert copied["native", "reader"] < nbytes / 8, copied
    assert copied["bytes", "reader"] >= nbytes, copied
    assert copied["bytes", "writer"] >= 2 * nbytes, copied
    with pytest.raises(CounterAbsent):
        native.writer.value("instructions")  # callgrind was not asked for: not counted, not 0


def test_run_deep_that_matches_no_case_exits_2(tmp_path, capsys: pytest.CaptureFixture[str]) -> None:
    from pytest_ipcbench.commands import main

    code = main(["run", "--backends", "shm", "--sizes", "1KiB", "--kinds", "ndarray", "--scenarios", "broadcast",
                 "--no-extras", "--no-config", "--out", str(tmp_path / "out"), "--deep", "granularity"])
    assert code == 2
    assert "--deep granularity matches no broadcast, ping-pong or stream case" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()  # refused before anything ran


def test_the_counted_window_is_the_part_dumped_at_the_marker(tmp_path) -> None:
    trigger = f"desc: Trigger: --dump-before={deep.DUMP_MARK}\n"
    (tmp_path / "callgrind.7").write_text(CALLGRIND.replace("part: 1", "part: 2"))  # at exit: everything after
    (tmp_path / "callgrind.7.1").write_text(CALLGRIND.replace("part: 1\n", "part: 1\n" + trigger))
    (tmp_path / "callgrind.77.1").write_text(CALLGRIND.replace("part: 1\n", "part: 1\n" + trigger))  # another pid
    assert deep._window_part(str(tmp_path), 7, "case") == str(tmp_path / "callgrind.7.1")
    (tmp_path / "callgrind.7.2").write_text(CALLGRIND.replace("part: 1\n", "part: 2\n" + trigger))
    with pytest.raises(RuntimeError, match="2 dumps at getpgrp"):
        deep._window_part(str(tmp_path), 7, "case")
