"""The collective verdict and the watchdog, as plain classes (no MPI needed)."""

from __future__ import annotations

import os
import threading
import time

import pytest

from pytest_ipcbench.core.watchdog import Watchdog
from pytest_ipcbench.plugin.verdict import RankOutcome, Verdict, apply, decide, outcome_of, short_error


def report(outcome: str = "passed", when: str = "call", longrepr=None, **attrs) -> pytest.TestReport:
    rep = pytest.TestReport("t.py::test_x", ("t.py", 9, "test_x"), {}, outcome, longrepr, when)
    for key, value in attrs.items():
        setattr(rep, key, value)
    return rep


def ok(rank: int, **kw) -> RankOutcome:
    return RankOutcome(rank, "passed", **kw)


def test_decide_orders_failed_xfailed_skipped_passed() -> None:
    assert decide([ok(0), ok(1)]) == Verdict("passed")
    assert decide([ok(0), RankOutcome(1, "failed"), RankOutcome(2, "skipped"), RankOutcome(3, "failed")]) == Verdict(
        "failed", (1, 3)
    )
    assert decide([ok(0), RankOutcome(2, "skipped", xfail="known")]) == Verdict("xfailed", (2,))
    assert decide([ok(0), RankOutcome(3, "skipped")]) == Verdict("skipped", (3,))
    # an idle rank's skip does not skip the test for the ranks of the group
    assert decide([ok(0), ok(1), RankOutcome(2, "skipped", idle=True)]) == Verdict("passed")


def test_a_failure_elsewhere_fails_this_rank_and_names_the_rank() -> None:
    mine = report("passed")
    theirs = RankOutcome(2, "failed", short="AssertionError: boom (t.py:10)", long="> assert 0\nE boom")
    outcomes = [outcome_of(mine, 0), ok(1), theirs, ok(3)]
    apply(mine, decide(outcomes), outcomes, outcomes[0], 4)
    assert mine.failed
    assert mine.longrepr.reprcrash.message == "failed on rank 2: AssertionError: boom (t.py:10)"
    text = str(mine.longrepr)
    assert "call failed on rank 2 of 4" in text and "E boom" in text


def test_own_failure_keeps_its_report_and_lists_the_others() -> None:
    mine = report("failed", longrepr="E  mine")
    outcomes = [outcome_of(mine, 0), RankOutcome(1, "failed", short="ValueError: theirs")]
    apply(mine, decide(outcomes), outcomes, outcomes[0], 2)
    assert mine.failed and str(mine.longrepr) == "E  mine"
    assert mine.sections[-1][0] == "ipcbench: also failed on rank 1"


def test_skip_and_xfail_elsewhere_become_this_ranks() -> None:
    mine = report("passed", when="setup")
    outcomes = [outcome_of(mine, 0), RankOutcome(1, "skipped", short="no gpu")]
    apply(mine, decide(outcomes), outcomes, outcomes[0], 2)
    assert mine.skipped and mine.longrepr == ("t.py", 10, "Skipped: on rank 1: no gpu")

    mine = report("passed", wasxfail="")  # an unexpected pass here
    outcomes = [outcome_of(mine, 0), RankOutcome(1, "skipped", xfail="known bug", short="E boom")]
    apply(mine, decide(outcomes), outcomes, outcomes[0], 2)
    assert mine.skipped and "known bug" in mine.wasxfail and "rank 1" in mine.wasxfail


def test_idle_rank_keeps_its_skip_unless_something_failed() -> None:
    idle = report("skipped", when="setup", longrepr=("t.py", 10, "Skipped: idle"))
    outcomes = [ok(0), outcome_of(idle, 1, idle=True)]
    apply(idle, decide(outcomes), outcomes, outcomes[1], 2)
    assert idle.skipped
    outcomes = [RankOutcome(0, "failed", short="boom"), outcome_of(idle, 1, idle=True)]
    apply(idle, decide(outcomes), outcomes, outcomes[1], 2)
    assert idle.failed


def test_short_error_forms() -> None:
    assert short_error(report("skipped", longrepr=("t.py", 3, "Skipped: why"))) == "why"
    assert short_error(report("failed", longrepr="line 1\nE  last line\n")) == "E  last line"


def test_watchdog_fires_with_a_clear_message_and_aborts() -> None:
    read, write = os.pipe()
    aborted: list[int] = []
    exited: list[int] = []
    done = threading.Event()

    def hard_exit(code: int) -> None:
        exited.append(code)
        done.set()

    dog = Watchdog(2, aborted.append, err_fd=write, grace=5.0, hard_exit=hard_exit)
    try:
        dog.arm("t.py::test_hang", 0.2, "call")
        assert done.wait(5.0)
        os.close(write)
        text = os.read(read, 1 << 20).decode()
    finally:
        dog.close()
        os.close(read)
    assert aborted == [1] and exited == [70]
    assert text.startswith(
        "ipcbench: t.py::test_hang did not finish within 0.2 s on rank 2: rank 2 did not arrive (its traceback "
        "follows) — a rank hung or died; aborting the MPI job"
    )
    assert "rank 2 was still in call" in text
    assert "test_watchdog_fires_with_a_clear_message_and_aborts" in text  # the tracebacks


def test_watchdog_disarmed_or_waiting_does_not_fire_early() -> None:
    fired: list[int] = []
    dog = Watchdog(0, fired.append, grace=10.0, hard_exit=fired.append)  # its own copy of stderr
    try:
        dog.arm("t", 0.1, "call")
        dog.disarm()
        dog.arm("t", 0.1, "call")
        dog.phase("call", waiting=True)  # a waiting rank gets the grace: the stuck one fires first
        time.sleep(0.4)
        assert not dog.fired.is_set() and fired == []
    finally:
        dog.close()


def test_watchdog_survives_a_huge_deadline() -> None:
    """A deadline beyond what the OS can wait for (an API caller's 1e12 s) must not kill its thread."""
    fired: list[int] = []
    dog = Watchdog(0, fired.append, grace=10.0, hard_exit=fired.append)
    try:
        dog.arm("t", 1e12, "call")
        time.sleep(0.2)
        assert dog._thread.is_alive()
        dog.arm("t", 0.1, "call")  # still watching: a short deadline after it fires
        assert dog.fired.wait(5.0)
    finally:
        dog.close()
    assert fired


class _HangingBackend:
    """A backend whose read waits (on the main thread) until the watchdog has fired."""

    name = "hangbk"

    def __init__(self, done: threading.Event) -> None:
        self.group, self.root, self.done = object(), 0, done

    def read(self) -> None:
        self.done.wait(5.0)


def test_the_watchdog_names_the_backend_its_step_and_how_to_raise_the_deadline() -> None:
    """Issue 39: a hang said only "did not answer within 300 s (hung?)", nothing about where."""
    read, write = os.pipe()
    done = threading.Event()

    def hard_exit(code: int) -> None:
        done.set()

    dog = Watchdog(1, lambda code: None, err_fd=write, grace=5.0, hard_exit=hard_exit)
    try:
        dog.arm("t.py::TestX::test_delivers", 0.2, "call", hint="raise it with IPCBENCH_CONFORMANCE_TIMEOUT=SECONDS")
        _HangingBackend(done).read()
        assert done.is_set()
        os.close(write)
        text = os.read(read, 1 << 20).decode()
    finally:
        dog.close()
        os.close(read)
    assert "(rank 1 hung in hangbk's read (at read, test_plugin_verdict.py:" in text, text[:600]
    assert "during call; raise it with IPCBENCH_CONFORMANCE_TIMEOUT=SECONDS)" in text
