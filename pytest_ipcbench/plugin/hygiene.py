"""The plugin's hooks under ``--with-mpi``: quiet ranks, collective verdicts, the watchdog, and the
check that every rank collected the same tests (:class:`MpiHygiene`, registered by the plugin's
``pytest_configure``), and each rank's own temp folder.
"""

from __future__ import annotations

import hashlib
import os
import sys
import tempfile
import time
from collections.abc import Generator
from pathlib import Path
from typing import Any

import pytest

from ..core.group import launcher_rank_size, observe, unobserve
from ..core.terminate import fail_early_exit
from ..core.watchdog import INTERRUPTED_EXIT_CODE, Watchdog
from .fixtures.conformance import conformance_deadline, deadline_hint
from .session import IpcSession, get_session
from .settings import marker_kwargs
from .verdict import WorldChannel, exchange_and_apply, failure_text, idle_call

INTERRUPT_SETTLE_S = 2.0  # rank 0 prints the summary of a run every rank was interrupted in


def rank_temproot(rank: int) -> Path:
    """``<tmp>/pytest-of-<user>/rank<N>``, made 0700; each name read with ``lstat``, never followed
    blindly: a folder or link there of another user is refused (it could send our files anywhere)."""
    import getpass

    from ..core.outdir import OutputFolderError, check_folder

    try:  # the user name in pytest's temp folder, as pytest finds it
        name = getpass.getuser()
    except (ImportError, KeyError, OSError):
        name = "unknown"
    user = Path(tempfile.gettempdir()) / f"pytest-of-{name}"
    try:
        check_folder(user, mode=0o700)
        return check_folder(user / f"rank{rank}", mode=0o700)
    except OutputFolderError as exc:
        raise pytest.UsageError(f"rank {rank}'s temp folder: {exc}") from None


def refuse_ranks_without_mpi(mpi_mode: bool) -> bool:
    """``mpi_mode``, once checked: ``mpiexec -n 2 pytest`` without ``--with-mpi`` would run the whole
    session on every rank on its own, with local workers, and nothing would say so (issue 39); it is
    a usage error, said by rank 0."""
    job = launcher_rank_size()
    if mpi_mode or job is None or job[1] < 2:
        return mpi_mode
    rank, size = job
    raise pytest.UsageError(*([] if rank else [
        f"ipcbench: this pytest is rank 0 of {size} started by mpiexec, without --with-mpi: each of the {size} "
        f"ranks would run the whole session on its own ({size} separate runs with local workers). Add --with-mpi "
        "(mpiexec -n N python -m pytest --with-mpi -m mpi), or run pytest without mpiexec"]))


def item_ranks(item: pytest.Item) -> int | None:
    """The rank count of a parametrized ipcbench test (None if it has none)."""
    callspec = getattr(item, "callspec", None)
    value = callspec.params.get("ipc_ranks") if callspec is not None else None
    return value if isinstance(value, int) else None


def _conformance_class(item: pytest.Item) -> tuple[type | None] | None:
    """(the kit's class,) of a conformance case without a marker timeout (None for any other test)."""
    if "conformance_backend" not in getattr(item, "fixturenames", ()):
        return None
    if marker_kwargs(item.get_closest_marker("ipcbench"), item.nodeid).get("timeout") is not None:
        return None
    return (getattr(item, "cls", None),)


def item_timeout(item: pytest.Item) -> float:
    """The deadline of one test: its marker's ``timeout``, else the conformance kit's (a case of
    ``BackendConformance``), else the session's (0: no deadline)."""
    session = get_session(item.config)
    kit = _conformance_class(item)
    if kit is not None and session.settings.timeout:
        return conformance_deadline(kit[0])
    marked = marker_kwargs(item.get_closest_marker("ipcbench"), item.nodeid).get("timeout")
    return session.settings.timeout if marked is None else marked


def timeout_hint(item: pytest.Item) -> str:
    """How to raise :func:`item_timeout`, said with a hang."""
    kit = _conformance_class(item)
    if kit is not None and get_session(item.config).settings.timeout:
        return deadline_hint(kit[0])
    return "raise it with --ipc-timeout SECONDS or @pytest.mark.ipcbench(timeout=SECONDS) if it is only slow"


class MpiHygiene:
    """Hooks active under --with-mpi: quiet ranks, collective verdicts, the watchdog, lockstep checks."""

    NAME = "ipcbench-mpi"

    def __init__(self, config: pytest.Config, session: IpcSession, comm: Any, quiet: bool) -> None:
        self.config = config
        self.session = session
        self.rank = session.rank
        self.size = session.world_size or 1
        self.quiet = quiet
        self._stdout = sys.stdout
        if quiet:
            # The terminal reporter is made right after this hook (we run first) from sys.stdout:
            # give it /dev/null; sys.stdout itself comes back at session start. stderr stays.
            sys.stdout = open(os.devnull, "w")
        # outlives this rank if it is killed: says so and reclaims what it left (core/reaper.py)
        from ..core import reaper

        self.reaper = reaper.start(self.rank)
        self.undo_exit = fail_early_exit(self.rank)  # os._exit(0) mid-session: the job fails, not exit 0
        self.watchdog = Watchdog(self.rank, comm.Abort)
        self.watchdog.watch_interrupts()  # Ctrl-C must end the job even if a rank is blocked in MPI
        observe(self.watchdog)  # where this rank waits in group collectives, and its own errors
        self.watchdog.arm("pytest start-up", session.settings.timeout, "start-up")
        self.channel = WorldChannel.open(comm)
        self.watchdog.disarm()
        self._pending: dict[str, str] = {}  # idle rank: call failures of others, shown at teardown
        self.interrupted = False

    @pytest.hookimpl(tryfirst=True)
    def pytest_sessionstart(self, session: pytest.Session) -> None:
        if self.quiet:  # the reporter keeps its /dev/null; the test code gets the real stdout
            sys.stdout = self._stdout

    def pytest_collection_finish(self, session: pytest.Session) -> None:
        """Every rank must run the same tests in the same order: check it once."""
        ids = [item.nodeid for item in session.items]
        self.watchdog.arm("collection", self.session.settings.timeout, "collection")
        try:
            digest = hashlib.sha256("\n".join(ids).encode()).hexdigest()
            everyone = self.channel.allgather((len(ids), digest, ids[:3]))
        finally:
            self.watchdog.disarm()
        if len({(n, h) for n, h, _ in everyone}) > 1:
            detail = "; ".join(f"rank {r}: {n} tests" for r, (n, _, _) in enumerate(everyone))
            message = (
                f"ipcbench: the MPI ranks collected different tests ({detail}); every rank must run "
                "the same tests in the same order (same files, options and seeds on every rank)"
            )
            raise pytest.UsageError(*([] if self.quiet else [message]))  # printed by rank 0 only

    def idle_reason(self, item: pytest.Item) -> str | None:
        """Why this rank sits ``item`` out while the others run it (None if it takes part).

        A rank outside the test's group is idle; with ``--ipc-unmarked rank0`` so is every rank but
        0 for a test without the ``mpi`` marker: it runs once instead of N times at once on one
        machine, where the copies would race for the same files and see each other's resources.
        """
        ranks = item_ranks(item)
        if self.session.mpi and ranks is not None and self.rank >= ranks:
            return f"idle: rank {self.rank} is not in this test's group of {ranks} ranks"
        if self.rank > 0 and self.session.settings.unmarked == "rank0" and item.get_closest_marker("mpi") is None:
            return f"idle: not an MPI test, it runs on rank 0 only (rank {self.rank} waits)"
        return None

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_setup(self, item: pytest.Item) -> None:
        reason = self.idle_reason(item)
        if reason:
            pytest.skip(reason)

    @pytest.hookimpl(wrapper=True, tryfirst=True)
    def pytest_runtest_protocol(self, item: pytest.Item, nextitem: pytest.Item | None) -> Generator[None, Any, Any]:
        self.watchdog.arm(item.nodeid, item_timeout(item), "setup", hint=timeout_hint(item))
        try:
            return (yield)
        finally:
            self.watchdog.disarm()

    @pytest.hookimpl(wrapper=True, tryfirst=True)
    def pytest_runtest_makereport(self, item: pytest.Item, call: pytest.CallInfo[None]) -> Generator[None, Any, Any]:
        report = yield
        idle = self.idle_reason(item) is not None
        if idle and report.when == "setup" and report.skipped and not hasattr(report, "wasxfail"):
            path, line, reason = report.longrepr if isinstance(report.longrepr, tuple) else ("", 0, "")
            report.longrepr = (str(item.location[0]), (item.location[1] or 0) + 1, reason)
        self.watchdog.phase(report.when, waiting=True)
        verdict = exchange_and_apply(self.channel, report, idle)
        if idle and report.when == "setup" and verdict.outcome == "passed" and not item.config.getoption("setuponly"):
            # the others run the body now: take part in their call-phase verdict
            call_verdict, outcomes = idle_call(self.channel, item.nodeid)
            if call_verdict.outcome == "failed":
                self._pending[item.nodeid] = failure_text(outcomes, call_verdict.ranks, self.size, "call")
        if report.when == "teardown" and item.nodeid in self._pending:
            text = self._pending.pop(item.nodeid)
            if report.outcome != "failed":  # count the failure on this rank too (exit code, -x)
                report.outcome = "failed"
                report.longrepr = text
        following = {"setup": "call", "call": "teardown"}.get(report.when, "teardown")
        self.watchdog.phase(following, waiting=False)
        return report

    def finish(self, session: pytest.Session, leftovers: list[str]) -> list[str]:
        """Session end: everyone's leftovers and exit status, known on every rank."""
        if session.exitstatus == pytest.ExitCode.INTERRUPTED:
            self.interrupted = True  # ended at unconfigure (see there)
            return leftovers  # the ranks may be at different places: no more exchanges
        self.watchdog.arm("session end", self.session.settings.timeout, "session end")
        try:
            everyone = self.channel.allgather((int(session.exitstatus), leftovers))
        finally:
            self.watchdog.disarm()
        mine = int(session.exitstatus)
        worst = [status for status, _ in everyone if status not in (0, 5)]
        if mine in (0, 5) and worst:
            session.exitstatus = worst[0]
        return [f"rank {r}: {line}" for r, (_, lines) in enumerate(everyone) for line in lines]

    def pytest_internalerror(self, excrepr: Any, excinfo: Any) -> None:
        if self.quiet:  # the terminal reporter of this rank writes to /dev/null: a crash must show
            for line in str(excrepr).splitlines():
                sys.stderr.write(f"ipcbench rank {self.rank}: INTERNALERROR> {line}\n")
            sys.stderr.flush()

    def pytest_unconfigure(self, config: pytest.Config) -> None:
        from ..core import reaper

        reaper.release(self.reaper, interrupted=self.interrupted and self.size > 1)
        self.undo_exit()
        if self.interrupted and self.size > 1:
            # Ctrl-C on one rank only: the others wait for it in a collective until their watchdog
            # (minutes), and this rank's MPI_Finalize for them, where no thread of ours runs any
            # more. End the job now, with pytest's exit code for an interrupted run; the other
            # ranks give rank 0 a moment to finish its summary when all were interrupted.
            time.sleep(0 if self.rank == 0 else INTERRUPT_SETTLE_S)
            self.watchdog.end_job(f"ipcbench: rank {self.rank} was interrupted: ending the MPI job\n",
                                  INTERRUPTED_EXIT_CODE)
        unobserve(self.watchdog)
        self.watchdog.close()
        self.channel.close()
