"""A plain ``pytest`` run ended by SIGTERM or SIGHUP cleans up as after a Ctrl-C.

The signal raises ``Terminated``, a KeyboardInterrupt (core/terminate.py): pytest's interrupt
path runs (teardown, the session end that stops the workers and sweeps what is ours), and the run
exits ``128 + signal``, the code its default death gave. Under ``--with-mpi`` nothing changes:
Hydra ends the ranks and their reapers reclaim (core/reaper.py).
"""

from __future__ import annotations

import pytest

from ..core.terminate import AsInterrupt
from .session import SESSION_KEY

_KEY = pytest.StashKey[AsInterrupt]()


@pytest.hookimpl(trylast=True)  # after the plugin's own pytest_configure made the session
def pytest_configure(config: pytest.Config) -> None:
    session = config.stash.get(SESSION_KEY, None)
    if session is not None and not session.mpi:
        config.stash[_KEY] = AsInterrupt()


@pytest.hookimpl(trylast=True)  # after the teardowns: they read INTERRUPTED (an interrupted test's guard)
def pytest_sessionfinish(session: pytest.Session) -> None:
    term = session.config.stash.get(_KEY, None)
    if term is not None and term.signum is not None:
        session.exitstatus = 128 + term.signum  # pytest's main returns it, read after this hook


def pytest_unconfigure(config: pytest.Config) -> None:
    term = config.stash.get(_KEY, None)
    if term is not None:
        term.restore()
