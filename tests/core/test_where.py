"""Where a hung rank is: the backend and its step, read from its main thread's stack (core/where.py)."""

from __future__ import annotations

import multiprocessing as mp
import sys

from pytest_ipcbench.core import where


class FakeBackend:
    name = "fakebk"

    def __init__(self) -> None:
        self.group, self.root = object(), 0

    def read(self):
        return self._wait()

    def _wait(self):
        return where.describe(sys._getframe())

    def __enter__(self):
        return where.describe(sys._getframe())


def test_the_step_and_the_innermost_call_are_named() -> None:
    text = FakeBackend().read()
    assert text.startswith("fakebk's read (at _wait, test_where.py:"), text
    assert FakeBackend().__enter__().startswith("fakebk's setup (at __enter__, test_where.py:")


def test_outside_a_backend_it_says_where_the_stack_is() -> None:
    text = where.describe(sys._getframe())
    assert text.startswith("in test_outside_a_backend_it_says_where_the_stack_is, test_where.py:"), text
    assert where.describe(None) == ""


def test_a_thread_answers_for_the_main_thread() -> None:
    here, there = mp.Pipe(duplex=True)
    where.serve(there, progress=lambda: 7)
    step, progress = where.ask(here)
    assert progress == 7 and step.startswith("in ask, where.py:"), step
    there.close()
    here.close()
    assert where.ask(here) == ""  # a closed pipe: no answer, no exception
