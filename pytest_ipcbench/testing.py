"""A backend author's kit: the conformance suite every backend must pass, built-in or plugin.

Subclass it in a test module of your project and name your backend::

    from pytest_ipcbench.testing import BackendConformance

    class TestMyFifo(BackendConformance):
        backend = "fifo"

It runs with the ipcbench fixtures and options: plain ``pytest`` over local workers at 2 and 4
ranks, ``mpiexec -n 4 python -m pytest --with-mpi -m mpi`` over MPI. It checks, in both modes:
**delivery** of every payload kind at every size, several rounds (a stale read fails); **writer
errors** (an unpicklable object raises PayloadError on the writer and every reader, and the next
transfer works); **timeouts** (a reader given nothing raises a TimeoutError naming the backend,
unless the class sets ``no_read_timeout``); **nothing left behind** (no ``ipcb-<pid>-*`` name or
declared ``resources`` after a transfer or an exception); **objects made before the ranks**
(``before_ranks`` inherited, released by ``after_ranks``); and **the paths users take** (an
installed plugin's backend through ``ipc_group`` and ``ipc_bench``). Where the backend cannot run
(``Backend.unavailable``) every test is skipped with its reason.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import pytest

from .backends.base import BackendSpec, PayloadError
from .core import names
from .core.group import Group
from .core.payloads import PayloadSpec
from .harness.transfer import Delivery, assert_delivered, deliver

__all__ = ["BackendConformance"]


# ----------------------------------------------------------------- programs run on every rank
# (module level: local worker processes import them from here)


def _ours(patterns: tuple[str, ...]) -> set[str]:
    return {str(item.path) for item in names.find_ours(os.getpid(), patterns)}


def delivery_program(group: Group, spec: BackendSpec, payload: PayloadSpec, rounds: int) -> tuple[Delivery, list[str]]:
    """``deliver`` plus what this rank left behind: (delivery, leftovers)."""
    patterns = spec.cls.resources
    before = _ours(patterns)
    delivery = deliver(group, spec, payload, rounds)
    return delivery, sorted(_ours(patterns) - before)


class _Unpicklable:
    def __reduce__(self) -> Any:
        raise TypeError("this object refuses to be pickled (conformance check)")


def writer_error_program(group: Group, spec: BackendSpec) -> tuple[str, str, list[str]]:
    """The writer sends an unpicklable object, then a good one.

    Returns (what the first transfer raised here, how the second went, leftovers).
    """
    bad = {"fine": np.arange(10), "bad": _Unpicklable()}
    good: list[Any] = [np.arange(5, dtype=np.int32), {"x": 1}]
    patterns = spec.cls.resources
    before = _ours(patterns)
    with spec.open(group) as live:
        store = live.delivery == "store"
        group.barrier()
        first = "no error"
        if group.rank == live.root:
            try:
                live.write(bad)
            except PayloadError as exc:
                first = f"PayloadError: {exc}"
            except Exception as exc:
                first = f"{type(exc).__name__}: {exc}"
            if store:
                group.barrier()
        else:
            if store:
                group.barrier()
            try:
                live.read()
            except PayloadError as exc:
                first = f"PayloadError: {exc}"
            except Exception as exc:
                first = f"{type(exc).__name__}: {exc}"
        group.barrier()
        second = "sent"
        if group.rank == live.root:
            live.write(good)
            if store:
                group.barrier()
        else:
            if store:
                group.barrier()
            got = live.read()
            same = (
                isinstance(got, (list, tuple))
                and len(got) == 2
                and np.array_equal(got[0], good[0])
                and got[1] == good[1]
            )
            second = "ok" if same else f"wrong value: {type(got).__name__}"
        group.barrier()
    return first, second, sorted(_ours(patterns) - before)


def read_timeout_program(group: Group, spec: BackendSpec) -> tuple[str, float]:
    """Nobody writes: every reader's read() must give up. Returns (outcome, seconds waited)."""
    with spec.open(group) as live:
        group.barrier()
        outcome, waited = "writer", 0.0
        if group.rank != live.root:
            start = time.monotonic()
            try:
                got = live.read()
                outcome = f"read() returned a {type(got).__name__} although nothing was written"
            except TimeoutError as exc:
                outcome = f"TimeoutError: {exc}"
            except Exception as exc:
                outcome = f"{type(exc).__name__} instead of TimeoutError: {exc}"
            waited = time.monotonic() - start
        group.barrier()
    return outcome, waited


def inherited_program(group: Group, spec: BackendSpec) -> str:
    """What this rank inherited from the backend's ``before_ranks`` hook: a type name, or 'nothing'."""
    from .core.local import inherited

    got = inherited(spec.name)
    return "nothing" if got is None else type(got).__name__


def cleanup_program(group: Group, spec: BackendSpec) -> tuple[str, list[str]]:
    """A transfer, then an exception inside ``with``: what this rank left behind."""
    patterns = spec.cls.resources
    before = _ours(patterns)
    deliver(group, spec, PayloadSpec("tiny", 64), 1)
    outcome = "no exception"
    try:
        with spec.open(group) as live:
            group.barrier()
            if group.rank == live.root and not live.needs_mpi:  # an MPI write needs its readers
                live.write(np.arange(1000))  # and nobody reads it
            group.barrier()
            raise RuntimeError("raised inside with")
    except RuntimeError as exc:
        outcome = str(exc)
    return outcome, sorted(_ours(patterns) - before)


# ---------------------------------------------------------------------------- the test class


def _leftovers(results: list[Any], index: int) -> list[str]:
    return [f"rank {rank}: {path}" for rank, result in enumerate(results) for path in result[index]]


class BackendConformance:
    """Subclass as ``Test...`` and set ``backend`` to the name of the backend under test.

    Its tests use the ``conformance_backend`` fixture, which the plugin defines once (see
    :mod:`pytest_ipcbench.plugin.fixtures.conformance`), so the kit may be used by any number of
    classes in one folder.
    """

    backend: ClassVar[str] = ""
    rounds: ClassVar[int] = 3  # transfers in a row per delivery check (each with another seed)
    # the backend's read timeout in every check but the timeout one: None is the kit's short default
    # ($IPCBENCH_CONFORMANCE_TIMEOUT, else 10 s), so a broken backend fails fast; set it for a slow one
    timeout: ClassVar[float | None] = None
    read_timeout: ClassVar[float] = 0.5  # seconds a reader waits in the timeout check

    def test_delivers_every_payload_kind(
        self, ipc_group: Group, ipc_payload: PayloadSpec, conformance_backend: BackendSpec
    ) -> None:
        results = ipc_group.run(delivery_program, conformance_backend, ipc_payload, self.rounds)
        assert_delivered([delivery for delivery, _ in results])
        left = _leftovers(results, 1)
        assert not left, f"{conformance_backend.id} left behind: {left}"

    def test_writer_error_reaches_the_readers(self, ipc_group: Group, conformance_backend: BackendSpec) -> None:
        spec = conformance_backend
        results = ipc_group.run(writer_error_program, spec)
        root = spec.root
        problems = []
        for rank, (first, second, _) in enumerate(results):
            side = "writer" if rank == root else "reader"
            if not first.startswith("PayloadError: "):
                problems.append(f"rank {rank} ({side}): expected PayloadError, got {first}")
            if rank != root and second != "ok":
                problems.append(f"rank {rank} (reader): the transfer after the error: {second}")
        assert not problems, f"{spec.id}, unpicklable object:\n  " + "\n  ".join(problems)
        left = _leftovers(results, 2)
        assert not left, f"{spec.id} left behind: {left}"

    @pytest.mark.ipcbench(timeout=120)  # a read that never gives up is caught within this
    def test_read_times_out_clearly(self, ipc_group: Group, conformance_backend: BackendSpec) -> None:
        reason = conformance_backend.cls.no_read_timeout
        if reason:
            pytest.skip(f"{conformance_backend.name}: {reason}")
        limit = self.read_timeout
        spec = BackendSpec(conformance_backend.name, conformance_backend.mode, timeout=limit)
        results = ipc_group.run(read_timeout_program, spec)
        problems = []
        for rank, (outcome, waited) in enumerate(results):
            if rank == spec.root:
                continue
            if not outcome.startswith("TimeoutError: "):
                problems.append(f"rank {rank}: {outcome}")
            elif spec.name not in outcome:
                problems.append(f"rank {rank}: the TimeoutError does not name the backend: {outcome}")
            elif not 0.9 * limit <= waited <= limit + 30:
                problems.append(f"rank {rank}: gave up after {waited:.2f} s with a timeout of {limit:g} s")
        assert not problems, f"{spec.id}, nothing written, timeout {limit:g} s:\n  " + "\n  ".join(problems)

    def test_objects_made_before_the_ranks_reach_every_rank(
        self, ipc_group: Group, conformance_backend: BackendSpec
    ) -> None:
        """A backend with a ``before_ranks`` hook: every rank holds what the hook made in the parent."""
        if conformance_backend.cls.before_ranks is None:
            pytest.skip(f"{conformance_backend.name} makes nothing before the ranks start (no before_ranks hook)")
        got = ipc_group.run(inherited_program, conformance_backend)
        missing = [rank for rank, what in enumerate(got) if what == "nothing"]
        assert not missing, f"{conformance_backend.name}: ranks {missing} did not inherit the before_ranks objects"
        assert len(set(got)) == 1, f"{conformance_backend.name}: the ranks inherited different things: {got}"

    def test_releases_what_it_made_before_the_ranks(self, ipc_group: Group, conformance_backend: BackendSpec) -> None:
        """A backend with a ``before_ranks`` hook: once a world of processes ends, its ``after_ranks``
        released what the hook made (the session's leak check comes after that, and fails otherwise)."""
        cls = conformance_backend.cls
        if cls.before_ranks is None:
            pytest.skip(f"{conformance_backend.name} makes nothing before the ranks start (no before_ranks hook)")
        from .core.local import LocalGroup, LocalWorld

        if not isinstance(ipc_group, LocalGroup):  # before_ranks: local worker processes only
            pytest.skip(f"{conformance_backend.name}: before_ranks objects reach local worker processes only")
        before = _ours(cls.resources)
        with LocalWorld(ipc_group.size, timeout=ipc_group.timeout) as world:
            got = world.run(inherited_program, conformance_backend)
        assert "nothing" not in got, f"{conformance_backend.name}: ranks inherited {got} from a world of their own"
        assert not world.release_problems, "; ".join(world.release_problems)
        left = sorted(_ours(cls.resources) - before)
        for path in left:
            names.remove(Path(path))
        assert not left, (
            f"{conformance_backend.name}: what before_ranks made is still there after the ranks ended: {left}; "
            "release it in a classmethod after_ranks(cls, made), which runs once the workers stopped "
            "(docs/extending.md)")

    def test_benchmarks_through_ipc_bench(self, ipc_bench: Any, ipc_group: Group,
                                          conformance_backend: BackendSpec) -> None:
        """The path a user's benchmark takes (``ipc_bench``: plan, timed rounds, verification)."""
        result = ipc_bench(conformance_backend, PayloadSpec("ndarray", 1000), time_budget=0.05, count=False)
        assert result.verified is not None and result.verified.checked > 0, (
            f"{conformance_backend.id}: nothing verified"
        )
        assert result.verified.failed == 0, f"{conformance_backend.id}: {result.verified.failed} transfers differed"

    def test_leaves_nothing_behind(self, ipc_group: Group, conformance_backend: BackendSpec) -> None:
        results = ipc_group.run(cleanup_program, conformance_backend)
        assert [outcome for outcome, _ in results] == ["raised inside with"] * len(results)
        left = _leftovers(results, 1)
        assert not left, f"{conformance_backend.id} left behind (after a transfer and an exception inside with): {left}"
