"""Counter records (core/counters.py) and their comparison (comparison/counters.py), without processes."""

from __future__ import annotations

import json

import pytest

from pytest_ipcbench.comparison.counters import CounterChange, counter_changes, explain
from pytest_ipcbench.core.counters import CounterAbsent, Counters, RankCounters
from pytest_ipcbench.core.units import format_count
from pytest_ipcbench.results.results import Result, ResultSet

MIB = 2**20
MESSAGES = 16


def rank(r: int, role: str, per_message: dict[str, list[float]], absent: dict[str, str] | None = None) -> RankCounters:
    """Totals from per-message values of each repeat (a list of one value: all repeats equal)."""
    totals = {}
    for name, values in per_message.items():
        values = values * 3 if len(values) == 1 else values
        totals[name] = [round(v * MESSAGES) for v in values]
    return RankCounters(r, role, totals, MESSAGES, absent or {})


def result(writer: dict, reader: dict, readers: int = 1, **reader_absent: str) -> Result:
    ranks = [rank(0, "writer", writer)] + [rank(i, "reader", reader, dict(reader_absent)) for i in range(1, readers + 1)]
    return Result("broadcast", "x", "bytes", "ndarray", MIB, readers + 1, {"completion": [1e-3]}, nbytes=MIB,
                  counters=Counters(ranks, MESSAGES, 1, 3))


BASE_W = {"syscalls.data": [1], "pickle.dumps": [1], "ctx.voluntary": [2, 3, 4], "alloc.peak_bytes": [MIB + 200]}
BASE_R = {"syscalls.data": [0], "pickle.loads": [1], "faults.minor": [0], "alloc.peak_bytes": [300],
          "ctx.voluntary": [2, 3, 4]}


def test_accessors_exact_spread_absent_and_json_round_trip(tmp_path):
    r = result(BASE_W, BASE_R, readers=2, **{"syscalls.total": "perf_event_paranoid=4 and no CAP_PERFMON"})
    assert r.cost("writer", "syscalls.data") == 1 and isinstance(r.cost("writer", "syscalls.data"), int)
    assert r.counters.writer.pickle_dumps == 1
    assert r.counters.reader.pickle_loads == 1
    assert len(r.counters.readers) == 2
    assert r.counters.writer.exact("syscalls.data") and not r.counters.writer.exact("ctx.voluntary")
    assert r.counters.writer.spread("ctx.voluntary") == (2, 4)
    assert r.counters.writer.value("ctx.voluntary") == 3  # the median repeat
    with pytest.raises(CounterAbsent, match="perf_event_paranoid=4"):
        r.cost("reader", "syscalls.total")
    with pytest.raises(KeyError, match="no counter 'nope'"):
        r.counters.writer.value("nope")
    with pytest.raises(ValueError, match="role must be"):
        r.cost("echo", "syscalls.data")
    with pytest.raises(AttributeError):
        r.counters.writer.not_a_counter  # noqa: B018
    # a fraction per message stays exact (totals / messages)
    odd = RankCounters(0, "writer", {"syscalls.data": [3, 3, 3]}, 2)
    assert odd.value("syscalls.data") == 1.5 and odd.exact("syscalls.data")

    rs = ResultSet(results=[r])
    path = rs.save(tmp_path / "results.json")
    back = ResultSet.load(path).results[0]
    assert back.counters == r.counters
    stored = json.loads(path.read_text())["results"][0]["counters"]["ranks"][0]
    assert stored["per_message"]["syscalls.data"] == 1 and stored["exact"]["syscalls.data"] is True
    assert stored["spread"]["ctx.voluntary"] == [2, 4]


def test_result_without_counters_says_why_and_old_files_load(tmp_path):
    r = Result("broadcast", "x", "bytes", "ndarray", 10, 2, {"completion": [1e-3]},
               extra={"counting": "counting turned off (count=False, --ipc-count=no)"})
    with pytest.raises(CounterAbsent, match="counting turned off"):
        r.cost("reader", "syscalls.data")
    d = r.to_dict()
    del d["counters"]  # a file written before counters existed
    assert Result.from_dict(d).counters is None


def test_identical_counts_are_no_change():
    assert counter_changes(result(BASE_W, BASE_R), result(BASE_W, BASE_R)) == []


def test_one_extra_write_system_call_on_the_writer():
    head_w = {**BASE_W, "syscalls.data": [2]}
    changes = counter_changes(result(BASE_W, BASE_R), result(head_w, BASE_R))
    assert [(c.role, c.counter, c.base, c.head, c.exact) for c in changes] == [("writer", "syscalls.data", 1, 2, True)]
    assert changes[0].text == "writer: +1 data system call (read/write/send/recv family) per message"


def test_an_extra_copy_on_the_reader_is_explained_as_a_copy():
    head_r = {**BASE_R, "alloc.peak_bytes": [300 + MIB], "faults.minor": [256]}
    base, head = result(BASE_W, BASE_R), result(BASE_W, head_r)
    changes = counter_changes(base, head)
    assert {c.counter for c in changes} == {"alloc.peak_bytes", "faults.minor"}
    assert all(c.role == "reader" for c in changes)
    assert explain(changes, head.nbytes) == [
        "reader: +1 copy of 1 MiB per message (+1,048,576 B allocated (peak), +256 minor faults)"]


def test_a_copy_that_the_peak_cannot_see_is_named_by_the_bytes_allocated():
    # shm's bytes mode: the reader unpickles through a transient of the payload's size; a copy of the
    # value afterwards allocates 1 MiB more but raises no peak and faults no page (reused heap)
    base_r = {**BASE_R, "alloc.peak_bytes": [2 * MIB], "alloc.bytes": [2 * MIB + 300]}
    head_r = {**base_r, "alloc.bytes": [3 * MIB + 410]}
    base, head = result(BASE_W, base_r), result(BASE_W, head_r)
    changes = counter_changes(base, head)
    assert [(c.role, c.counter, c.regression) for c in changes] == [("reader", "alloc.bytes", True)]
    assert explain(changes, head.nbytes) == ["reader: +1 copy of 1 MiB per message (+1,048,686 B allocated)"]
    # within the allocator's tolerance (256 B or 1%) of the base: no change
    assert counter_changes(base, result(BASE_W, {**base_r, "alloc.bytes": [2 * MIB + 500]})) == []


def test_one_less_pickle_is_a_change_too():
    head_w = {**BASE_W, "pickle.dumps": [0]}
    (change,) = counter_changes(result(BASE_W, BASE_R), result(head_w, BASE_R))
    assert change.delta == -1 and change.text == "writer: -1 pickle dumps per message"


def test_statistical_counters_against_their_spread_and_timing_ones_not_across_runs():
    base_w = {**BASE_W, "io.syscw": [2, 3, 4]}  # e.g. zmq's I/O thread batching as timing allows
    near = {**BASE_W, "io.syscw": [3, 4, 5]}
    assert counter_changes(result(base_w, BASE_R), result(near, BASE_R)) == []
    # far outside both spreads: a change, said to be statistical
    far = {**BASE_W, "io.syscw": [20, 21, 22]}
    (change,) = counter_changes(result(base_w, BASE_R), result(far, BASE_R))
    assert change.counter == "io.syscw" and not change.exact and "statistical" in change.text
    # context switches (or waits) far apart: not compared across runs, unless asked for
    switches = {**BASE_W, "ctx.voluntary": [20, 21, 22]}
    assert counter_changes(result(BASE_W, BASE_R), result(switches, BASE_R)) == []
    (change,) = counter_changes(result(BASE_W, BASE_R), result(switches, BASE_R), timing=True)
    assert change.counter == "ctx.voluntary" and not change.exact


def test_exact_on_one_side_only_is_compared_as_statistical():
    head_w = {**BASE_W, "syscalls.data": [1, 1, 2]}  # noisy now: not a verdict by itself
    assert counter_changes(result(BASE_W, BASE_R), result(head_w, BASE_R)) == []


def test_absent_counters_are_not_compared_and_several_readers_compare_as_their_mean():
    head_r = {**BASE_R, "syscalls.data": [5]}
    base = result(BASE_W, BASE_R, readers=2, **{"syscalls.data": "tracefs is not mounted"})
    assert counter_changes(base, result(BASE_W, head_r, readers=2)) == []
    changes = counter_changes(result(BASE_W, BASE_R, readers=2), result(BASE_W, head_r, readers=2))
    assert [c.text for c in changes] == [
        "readers (mean of 2): +5 data system calls (read/write/send/recv family) per message"]


def test_different_cases_are_refused_and_missing_counters_give_nothing():
    other = result(BASE_W, BASE_R)
    other.size = 10
    with pytest.raises(ValueError, match="compares one case"):
        counter_changes(result(BASE_W, BASE_R), other)
    bare = Result("broadcast", "x", "bytes", "ndarray", MIB, 2, {"completion": [1e-3]}, nbytes=MIB)
    assert counter_changes(bare, result(BASE_W, BASE_R)) == []
    assert isinstance(CounterChange, type)


@pytest.mark.parametrize("x, text", [(1048576, "1,048,576"), (2.5, "2.5"), (0.0625, "0.0625"), (None, "-"),
                                     (-3, "-3")])
def test_format_count(x, text):
    assert format_count(x) == text
    if x and x > 0:
        assert format_count(x, signed=True) == "+" + text


def test_asv_tracks_counters_per_case_and_skips_what_was_not_counted():
    from pytest_ipcbench.runner import asv_suite

    r = result(BASE_W, {**BASE_R, "syscalls.data": [2]}, readers=2, **{"syscalls.total": "tracefs is not mounted"})
    cache = {r.key + "#counters": asv_suite._counters(r.to_dict())}
    bench = asv_suite.DeclaredCounters()
    assert bench.track_count(cache, r.key, "writer pickle.dumps") == 1
    assert bench.track_count(cache, r.key, "reader syscalls.data") == 2
    with pytest.raises(NotImplementedError, match="tracefs is not mounted"):
        bench.track_count(cache, r.key, "reader syscalls.total")
    off = Result("broadcast", "y", "bytes", "ndarray", 1, 2, {"completion": [1e-3]}, extra={"counting": "counting turned off"})
    cache[off.key + "#counters"] = asv_suite._counters(off.to_dict())
    with pytest.raises(NotImplementedError, match="counting turned off"):
        bench.track_count(cache, off.key, "writer pickle.dumps")
    with pytest.raises(NotImplementedError, match="not measured"):
        bench.track_count(cache, "broadcast/none/bytes/x/1/r2", "writer pickle.dumps")


def test_a_few_bytes_per_message_are_not_a_change_but_a_copy_is():
    base_w = {**BASE_W, "io.wchar": [1000]}
    few = {**BASE_W, "io.wchar": [1003]}  # e.g. a sequence number pickled one byte longer
    assert counter_changes(result(base_w, BASE_R), result(few, BASE_R)) == []
    copy = {**BASE_W, "io.wchar": [1000 + MIB]}
    (change,) = counter_changes(result(base_w, BASE_R), result(copy, BASE_R))
    assert change.counter == "io.wchar" and change.exact


def test_compare_shows_the_counter_change_beside_each_time_verdict():
    # one interleaved experiment (same gate job): the time verdict comes from the samples; the
    # counters say what changed per message, or that nothing did
    from pytest_ipcbench.comparison.compare import compare_sets
    from pytest_ipcbench.comparison.verdict_text import format_table

    def one(reader: dict, key_size: int) -> Result:
        r = result(BASE_W, reader)
        r.size = key_size
        r.samples = {"completion": [1e-3 * (1 + 0.001 * i) for i in range(40)]}
        return r

    copied = {**BASE_R, "alloc.peak_bytes": [MIB + 300]}
    base = ResultSet(results=[one(BASE_R, MIB), one(BASE_R, 2 * MIB)], env={"gate_job": "j"})
    head = ResultSet(results=[one(copied, MIB), one(BASE_R, 2 * MIB)], env={"gate_job": "j"})
    comparison = compare_sets(base, head)
    by_key = {c.key: c for c in comparison.cases}
    changed, same = by_key[base.results[0].key], by_key[base.results[1].key]
    assert changed.counter_changes == 1 and any("+1 copy of" in e for e in changed.explanations), changed
    assert same.counter_changes == 0 and same.explanations == ["no counter moved"]
    text = format_table(comparison)
    assert "+1 copy of" in text and "cost per message changed in 1 case(s)" in text


# ----------------------------------------------------------------- verdicts (exit code, words)


def _two_readers(faults: tuple[int, int], mapping: tuple[int, int]) -> Result:
    r = result(BASE_W, BASE_R, readers=2)
    for rank, f, m in zip(r.counters.readers, faults, mapping):
        rank.totals["faults.minor"] = [f * MESSAGES] * 3
        rank.totals["syscalls.mapping"] = [m * MESSAGES] * 3
    return r


def test_first_touch_costs_that_move_between_readers_are_no_change():
    # measured in two runs of identical code (lmdb, 1 MB dicts): one reader 26 faults fewer per
    # message, another 26 more; the readers' mean is the same
    assert counter_changes(_two_readers((203, 202), (6, 6)), _two_readers((177, 228), (6, 6))) == []
    # the allocator's state: a mapping call fewer on one reader of two is half a call on their mean
    assert counter_changes(_two_readers((203, 202), (6, 6)), _two_readers((203, 202), (5, 6))) == []
    # a copy of a 1 MiB payload on each reader is 256 faults more each: a change
    (change,) = counter_changes(_two_readers((203, 202), (6, 6)), _two_readers((459, 458), (6, 6)))
    assert change.counter == "faults.minor" and change.exact and change.regression
    assert change.text == "readers (mean of 2): +256 minor faults per message"


def test_write_system_call_and_pickle_round_trip_are_named():
    base_w = {**BASE_W, "io.syscw": [0], "io.wchar": [0]}
    head_w = {**base_w, "syscalls.data": [2], "io.syscw": [1], "io.wchar": [1]}
    changes = counter_changes(result(base_w, BASE_R), result(head_w, BASE_R))
    assert explain(changes, MIB) == [
        "writer: +1 write system call per message (+1 data system call (read/write/send/recv family), "
        "+1 write-family call)"]
    base_w = {**BASE_W, "pickle.loads": [0]}
    head_w = {**BASE_W, "pickle.dumps": [2], "pickle.loads": [1]}
    changes = counter_changes(result(base_w, BASE_R), result(head_w, BASE_R))
    assert explain(changes, MIB)[0].startswith("writer: +1 pickle round trip (dumps and loads) per message (")


def test_a_copy_of_a_small_payload_with_its_object_header_is_a_copy():
    small = 1000
    head_r = {**BASE_R, "alloc.peak_bytes": [300 + small + 112]}  # a 1000 B ndarray copied: data and header
    base, head = result(BASE_W, BASE_R), result(BASE_W, head_r)
    assert explain(counter_changes(base, head), small) == [
        "reader: +1 copy of 1 KB per message (+1,112 B allocated (peak))"]


def test_an_exact_increase_is_a_regression_a_decrease_or_a_statistical_change_is_not():
    from pytest_ipcbench.comparison.counters import counter_verdict

    more = counter_verdict(result(BASE_W, BASE_R), result({**BASE_W, "syscalls.data": [2]}, BASE_R))
    assert more is not None and more.changes == 1
    assert more.regressions == ["writer: +1 data system call (read/write/send/recv family) per message"]
    fewer = counter_verdict(result(BASE_W, BASE_R), result({**BASE_W, "pickle.dumps": [0]}, BASE_R))
    assert fewer is not None and fewer.changes == 1 and fewer.regressions == []
    noisy = counter_verdict(result({**BASE_W, "io.syscw": [2, 3, 4]}, BASE_R),
                            result({**BASE_W, "io.syscw": [20, 21, 22]}, BASE_R))
    assert noisy is not None and noisy.changes == 1 and noisy.regressions == []
    same = counter_verdict(result(BASE_W, BASE_R), result(BASE_W, BASE_R))
    assert same is not None and same.lines == ["no counter moved"] and same.regressions == []
    bare = Result("broadcast", "x", "bytes", "ndarray", MIB, 2, {"completion": [1e-3]}, nbytes=MIB)
    assert counter_verdict(bare, bare) is None


def _timed(r: Result, seconds: float) -> Result:
    r.samples = {"completion": [seconds * (1 + 0.001 * i) for i in range(40)]}
    return r


def test_compare_exits_1_on_a_counter_regression_even_when_the_time_is_unchanged():
    from pytest_ipcbench.comparison.compare import compare_sets
    from pytest_ipcbench.comparison.verdict import EXIT_OK, EXIT_REGRESSION
    from pytest_ipcbench.comparison.verdict_text import format_markdown, format_table

    base = ResultSet(results=[_timed(result(BASE_W, BASE_R), 1e-3)], env={"gate_job": "j"})
    head = ResultSet(results=[_timed(result({**BASE_W, "syscalls.data": [2]}, BASE_R), 1e-3)], env={"gate_job": "j"})
    comparison = compare_sets(base, head)
    (case,) = comparison.cases
    assert case.status == "unchanged" and comparison.costlier == [case]
    assert comparison.exit_code == EXIT_REGRESSION
    text = format_table(comparison)
    assert "REGRESSION: 1 case(s) cost more per message" in text
    assert "writer: +1 data system call" in text.splitlines()[-1]
    assert ":x:" in format_markdown(comparison)
    # one pickle fewer: cheaper, not a regression
    cheaper = ResultSet(results=[_timed(result({**BASE_W, "pickle.dumps": [0]}, BASE_R), 1e-3)], env={"gate_job": "j"})
    assert compare_sets(base, cheaper).exit_code == EXIT_OK


def test_a_change_on_some_messages_only_is_a_note_not_a_verdict():
    # zmq's writer in two A/A runs: 420 and 416 data calls in 16 messages (its I/O thread's wake-ups)
    base_w = {**BASE_W, "syscalls.data": [420 / 16]}
    head_w = {**BASE_W, "syscalls.data": [416 / 16]}
    (change,) = counter_changes(result(head_w, BASE_R), result(base_w, BASE_R))
    assert not change.exact and not change.regression and "some messages only" in change.text
    # one more call per message on one reader of three: a whole call over the readers, a verdict
    base_r = {**BASE_R, "syscalls.data": [0]}
    head = result(BASE_W, base_r, readers=3)
    head.counters.readers[0].totals["syscalls.data"] = [MESSAGES] * 3
    (change,) = counter_changes(result(BASE_W, base_r, readers=3), head)
    assert change.exact and change.regression and change.readers == 3


def test_counts_of_different_message_numbers_are_not_compared():
    """A version that counts 4 messages a repeat against one that counted 16: a backend that
    batches or numbers its messages has other per-message figures, so no verdict either way."""
    from pytest_ipcbench.comparison.counters import counter_verdict

    head = result({**BASE_W, "syscalls.data": [2]}, BASE_R)
    assert head.counters is not None
    head.counters = Counters([RankCounters(r.rank, r.role, r.totals, r.messages // 4, r.absent)
                              for r in head.counters.ranks], MESSAGES // 4, 1, 3)
    verdict = counter_verdict(result(BASE_W, BASE_R), head)
    assert verdict is not None and verdict.regressions == [] and "not compared" in verdict.lines[0]
    assert "base counted 16 messages a repeat, head 4" in verdict.lines[0]


def test_a_waived_case_whose_counter_grew_is_listed_never_a_regression():
    from datetime import date

    from pytest_ipcbench.comparison.compare import compare_sets
    from pytest_ipcbench.comparison.verdict import EXIT_OK, rule_callables
    from pytest_ipcbench.comparison.verdict_text import format_table
    from pytest_ipcbench.core.case_rules import CaseRules, Waiver

    base = ResultSet(results=[_timed(result(BASE_W, BASE_R), 1e-3)], env={"gate_job": "j"})
    head = ResultSet(results=[_timed(result({**BASE_W, "syscalls.data": [2]}, BASE_R), 1e-3)], env={"gate_job": "j"})
    rules = CaseRules(waivers=(Waiver("broadcast/x/*", "a write per message, on purpose", date(2999, 1, 1)),))
    comparison = compare_sets(base, head, **rule_callables(rules, 0.10))
    (case,) = comparison.cases
    assert case.counter_regressions and case.waiver is not None and comparison.exit_code == EXIT_OK
    text = format_table(comparison)
    assert "waived: broadcast/x/bytes/ndarray/1048576/r2 (unchanged, 1.000x, counters grew), waived until 2999-01-01" in text
    assert "COUNTER REGRESSION" not in text


def test_asv_declares_counter_benchmarks_only_where_counters_are_measured(tmp_path, monkeypatch):
    """Issue 39 item 10: no benchmark that is all n/a."""
    import subprocess
    import sys

    from pytest_ipcbench.runner import asv_suite

    table = '[tool.ipcbench]\nbackends = ["shm"]\nscenarios = ["pingpong"]\nsizes = ["1KB"]\nranks = 2\n'
    off, on = tmp_path / "off.toml", tmp_path / "on.toml"
    off.write_text(table + "count = false\n")
    on.write_text(table + "count = true\n")
    assert asv_suite.tracked_counters(off) == []
    monkeypatch.setattr("pytest_ipcbench.core.syscalls.syscall_unavailable", lambda: "tracefs is not mounted")
    tracked = asv_suite.tracked_counters(on)
    assert tracked and "reader pickle.loads" in tracked and not [c for c in tracked if "syscalls" in c]
    monkeypatch.setattr("pytest_ipcbench.core.syscalls.syscall_unavailable", lambda: None)
    assert asv_suite.tracked_counters(on) == list(asv_suite.TRACKED_COUNTERS)
    # what an adopter's `from pytest_ipcbench.runner.asv_suite import *` gets
    code = "from pytest_ipcbench.runner.asv_suite import *; print(sorted(k for k in dir() if 'Declared' in k))"
    for path, names in ((off, "['Declared']"), (on, "'DeclaredCounters'")):
        out = subprocess.run([sys.executable, "-c", code], env={**__import__("os").environ, "IPCBENCH_CONFIG": str(path)},
                             capture_output=True, text=True, timeout=60)
        assert names in out.stdout, out.stdout + out.stderr


def test_allocation_counters_of_two_counting_methods_are_not_compared():
    """A record without ``alloc_method`` was counted by the first method (every iteration traced):
    its allocation counters differ from the second's by the method, so only the others compare."""
    base = Result.from_dict(json.loads(json.dumps(result(BASE_W, BASE_R).to_dict())))
    assert base.counters is not None and base.counters.alloc_method == 2
    old = result(BASE_W, BASE_R).to_dict()
    del old["counters"]["alloc_method"]
    old_base = Result.from_dict(old)
    assert old_base.counters is not None and old_base.counters.alloc_method == 1
    head = result({**BASE_W, "alloc.peak_bytes": [2 * MIB + 200], "syscalls.data": [2]}, BASE_R)
    assert {c.counter for c in counter_changes(base, head)} == {"alloc.peak_bytes", "syscalls.data"}
    assert {c.counter for c in counter_changes(old_base, head)} == {"syscalls.data"}


def test_counters_a_backend_declares_timing_driven_are_not_compared_across_runs():
    """zmq's I/O thread batches sends and signals its caller only when asleep: two runs of identical
    code counted its writer's data calls 4 apart per message, each run's repeats agreeing (make test,
    the README's compare at 4 ranks). The backend declares them (``Backend.timing_counters``), the
    counting pass records them, and compare leaves them out, on either side's word."""
    from pytest_ipcbench.backends.base import get_backend

    declared = get_backend("zmq").timing_counters
    assert {"syscalls.data", "io.syscr", "io.syscw"} <= declared
    assert get_backend("ref-zmq").timing_counters == declared and not get_backend("shm").timing_counters
    base, head = result(BASE_W, BASE_R), result({**BASE_W, "syscalls.data": [5], "pickle.dumps": [2]}, BASE_R)
    assert {c.counter for c in counter_changes(base, head)} == {"syscalls.data", "pickle.dumps"}
    assert head.counters is not None
    head.counters.timing = tuple(sorted(declared))
    head = Result.from_dict(json.loads(json.dumps(head.to_dict())))  # recorded with the counts
    assert head.counters is not None and head.counters.timing == tuple(sorted(declared))
    assert [c.counter for c in counter_changes(base, head)] == ["pickle.dumps"]  # the others still count
    assert [c.counter for c in counter_changes(head, base)] == ["pickle.dumps"]
    assert "timing" not in result(BASE_W, BASE_R).to_dict()["counters"]  # absent when none: old files stay as they were


TURNS = ("as run", "writes late", "reads late")


def turned(writer: dict, reader: dict, nbytes: int = 1000) -> Result:
    """A ping-pong record whose repeats took the counting pass's turns (harness/count.py)."""
    ranks = [rank(0, "writer", writer), rank(1, "reader", reader)]
    r = Result("pingpong", "x", "bytes", "buffer", nbytes, 2, {"latency": [1e-5]}, nbytes=nbytes,
               counters=Counters(ranks, MESSAGES, 1, 3, turns=TURNS))
    return Result.from_dict(json.loads(json.dumps(r.to_dict())))  # the turns are recorded


def test_counts_that_follow_the_turns_compare_turn_by_turn():
    """Measured (docs/counters.md, "Counts that follow timing"): a read that waited allocated about
    0.8 KB more, so the turn of late writes differs and the counter is not exact; a copy of the
    1 KB payload in every message moves every turn alike (+1,064 B): a regression. The example's
    fifo reader read a message in 3 calls as run but 2 when its reads were late: two A/A runs that
    differ in one turn only are no verdict (a note), as run-to-run timing is not the code."""
    calls = {"syscalls.data": [3, 3, 2]}
    base = turned({"alloc.bytes": [0, 812, 0], **calls}, {"alloc.bytes": [256, 1036, 0], **calls})
    assert base.counters is not None and base.counters.turns == TURNS
    copied = turned({"alloc.bytes": [1064, 1876, 1064], **calls}, {"alloc.bytes": [1320, 2132, 1064], **calls})
    worse = [c for c in counter_changes(base, copied) if c.regression]
    assert [(c.role, c.counter, c.delta) for c in worse] == [("writer", "alloc.bytes", 1064),
                                                             ("reader", "alloc.bytes", 1064)]
    assert explain(worse, 1000)[0] == "writer: +1 copy of 1 KB per message (+1,064 B allocated)"
    # the same records without turns (made before them): inexact sides, a note at most
    for r in (base, copied):
        assert r.counters is not None
        r.counters.turns = ()
    assert not [c for c in counter_changes(base, copied) if c.regression]
    # A/A: one turn read in fewer calls (3, 3, 2 against 2, 3, 2): no verdict
    base = turned({"syscalls.data": [0]}, calls)
    other = turned({"syscalls.data": [0]}, {"syscalls.data": [2, 3, 2]})
    assert not [c for c in counter_changes(base, other) if c.regression]
    assert not [c for c in counter_changes(other, base) if c.regression]
    # a run's state that moved every turn alike by less than a payload's copy (a loaded A/A: where
    # the run's frees fell between the probe's events): within the allocation counters' tolerance
    one = turned({"syscalls.data": [0]}, {"alloc.bytes": [12772, 12712, 12128]})
    another = turned({"syscalls.data": [0]}, {"alloc.bytes": [13444, 13330, 12744]})
    assert not [c for c in counter_changes(one, another) if c.regression]
    # one read call more in every turn: the code's
    more = turned({"syscalls.data": [0]}, {"syscalls.data": [4, 4, 3]})
    assert [c.text for c in counter_changes(base, more) if c.regression] == [
        "reader: +1 data system call (read/write/send/recv family) per message"]
