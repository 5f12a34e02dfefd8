"""Wait pacing (core/wait.py): sleeps that end when asked, and a backoff that overshoots little."""

from __future__ import annotations

import subprocess
import sys

import pytest

from pytest_ipcbench.core import wait
from pytest_ipcbench.core.wait import Backoff


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="timer slack is a Linux setting")
def test_a_polling_process_asks_for_a_short_timer_slack() -> None:
    # Linux's default slack first: a child inherits its parent's (a rank that already polled)
    code = ("import ctypes; from pytest_ipcbench.core.wait import Backoff, TIMER_SLACK_NS;"
            "libc = ctypes.CDLL(None); libc.prctl(29, 50000, 0, 0, 0); before = libc.prctl(30, 0, 0, 0, 0);"
            "Backoff(1.0); print(before, libc.prctl(30, 0, 0, 0, 0), TIMER_SLACK_NS)")
    before, after, asked = map(int, subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                                                   check=True, timeout=60).stdout.split())
    assert before > asked and after == asked


def test_backoff_sleeps_grow_by_a_quarter_up_to_the_cap(monkeypatch: pytest.MonkeyPatch) -> None:
    slept: list[float] = []
    monkeypatch.setattr(wait.time, "sleep", slept.append)
    monkeypatch.setattr(wait.os, "sched_yield", lambda: None)
    backoff = Backoff(60.0)
    for _ in range(Backoff.SPINS + Backoff.YIELDS + 40):
        assert backoff.wait()
    assert slept[0] == Backoff.MIN_SLEEP and slept[-1] == Backoff.MAX_SLEEP
    growing = [b / a for a, b in zip(slept, slept[1:]) if b < Backoff.MAX_SLEEP]
    assert growing and all(g == pytest.approx(Backoff.GROWTH) for g in growing)
