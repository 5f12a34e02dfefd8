"""One object per pytest run: the resolved settings (:mod:`.settings`), the process group and the
run's record of results.

The plugin builds one :class:`IpcSession` in ``pytest_configure`` and keeps it in
``config.stash``; other code gets it with :func:`get_session`.
"""

from __future__ import annotations

import contextlib
import itertools
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pytest

from ..backends.base import backend_names, declared_resources, unavailable_reason
from ..core.group import DEFAULT_TIMEOUT, Group, MPIGroup
from ..core.local import LocalGroup, LocalWorld
from ..core.names import find_ours, remove
from ..core.payloads import PayloadSpec, get_kind
from ..results.record import RunRecord
from ..results.results import Result
from .settings import Settings


def backend_fixture_name(backend: str) -> str:
    """``mpi-pkl5`` -> ``mpi_pkl5_backend``: the per-backend fixture's name."""
    return f"{backend.replace('-', '_').replace('.', '_')}_backend"


def backend_fixtures() -> dict[str, str]:
    """Fixture name -> backend name, for every backend known now (built-ins and plugins)."""
    return {backend_fixture_name(name): name for name in backend_names()}


# ---------------------------------------------------------------------------------- the matrix


@dataclass(frozen=True)
class Matrix:
    """One ``metafunc.parametrize(argnames, values, ids=ids, indirect=True)`` call."""

    argnames: tuple[str, ...]
    values: list[Any]  # pytest.param objects
    ids: list[str]


def payload_specs(kinds: Sequence[str], sizes: Sequence[int]) -> list[PayloadSpec]:
    """Kinds x sizes; a kind of fixed size (``tiny``) appears once."""
    specs: list[PayloadSpec] = []
    for kind in kinds:
        fixed = get_kind(kind).fixed_size
        if fixed is not None:
            specs.append(PayloadSpec(kind, fixed))
        else:
            specs.extend(PayloadSpec(kind, size) for size in sizes)
    return specs


# ------------------------------------------------------------------------------------ session


class IpcSession:
    """Everything one pytest run of the ipcbench plugin shares.

    ``mpi_comm`` is the MPI world communicator under ``--with-mpi`` (None in local mode, where a
    :class:`LocalWorld` of ``max(ranks)`` processes is started on first use and closed by
    :meth:`close`).
    """

    def __init__(self, settings: Settings, mpi_comm: Any = None, config: pytest.Config | None = None) -> None:
        self.settings = settings
        self.config = config
        self.mpi = mpi_comm is not None
        self.rank: int = mpi_comm.Get_rank() if self.mpi else 0
        self.world_size: int | None = mpi_comm.Get_size() if self.mpi else None
        self.run_record: RunRecord | None = None  # started by the first result rank 0 records
        self._mpi_world = MPIGroup(mpi_comm) if self.mpi else None
        self._local: LocalWorld | None = None
        self._local_size = max(settings.ranks)
        self._local_pids: set[int] = set()
        self._release_problems: list[str] = []  # after_ranks hooks that failed
        self._reasons: dict[str, str | None] = {}
        # what was there before this run (e.g. an outer pytest run in the same process): not ours
        self._before = {str(item.path) for item in find_ours(os.getpid(), declared_resources())}

    # --------------------------------------------------------------------------- groups

    def fits(self, ranks: int) -> str | None:
        """Why a group of ``ranks`` cannot be made here (None if it can)."""
        if self.mpi and self.world_size is not None and ranks > self.world_size:
            return f"needs {ranks} ranks; the MPI world has {self.world_size} (mpiexec -n {ranks} or more)"
        return None

    def world_group(self, ranks: int, timeout: float | None = None) -> Group | None:
        """A group of ``ranks`` ranks; None on an MPI rank that is not part of it.

        Under MPI it is a sub-communicator of the first ``ranks`` ranks (made once, by them only);
        locally it is rank 0 of a group over the session's worker processes.
        """
        reason = self.fits(ranks)
        if reason:
            raise ValueError(reason)
        if self._mpi_world is not None:
            return self._mpi_world.split(ranks)
        if timeout is None or timeout <= 0:
            timeout = None  # the world's own: --ipc-timeout (or the default when it is 0)
        size = max(self._local_size, ranks)
        if self._local is not None and self._local.size < size:
            self._forget_local()
        if self._local is None:
            self._local = LocalWorld(size, timeout=self.settings.timeout or DEFAULT_TIMEOUT)
        return self._local.group(ranks, timeout=timeout)

    def backend_unavailable(self, name: str, ranks: int | None = None) -> str | None:
        """Why backend ``name`` cannot run in this mode (cached), or None; asked of a group object
        that starts no process."""
        if name not in self._reasons:
            n = ranks or max(self.settings.ranks)
            # a local one stands for a running local group, with one mailbox per rank (mp-queue checks them)
            probe = self._mpi_world or LocalGroup(0, n, {}, mailboxes=[None] * n)
            self._reasons[name] = unavailable_reason(name, probe)
        return self._reasons[name]

    def pids(self) -> list[int]:
        """Processes of this run whose leftovers this rank checks: itself and its local workers."""
        pids = {os.getpid()} | self._local_pids
        if self._local is not None:
            pids |= set(self._local.pids)
        return sorted(pids)

    def sweep(self) -> list[str]:
        """Resources of this run's processes still there (call after :meth:`close`): removed, described.

        Only what appeared during the run counts; the owners are this process and its workers.
        """
        found = list(self._release_problems)
        patterns = declared_resources()  # of the backends this run loaded: plugins name theirs
        for pid in self.pids():
            for item in find_ours(pid, patterns):
                if str(item.path) in self._before:
                    continue
                found.append(f"{item.path} (owner pid {item.pid})")
                remove(item.path)
        return found

    def _forget_local(self) -> None:
        if self._local is not None:
            self._local_pids |= set(self._local.pids)
            self._local.close()  # runs the after_ranks hooks: before the leak check
            self._release_problems += self._local.release_problems
            self._local = None

    # -------------------------------------------------------------------------- results

    def record(self, result: Result) -> Result:
        """Keep a result for the report (rank 0 keeps them; other ranks drop theirs). The first
        one starts the run record: the environment (``results/record.RunRecord.start``), then every
        ``pytest_ipcbench_update_environment`` hook (another plugin's additions)."""
        if self.rank != 0:
            return result
        if self.run_record is None:
            world = self._mpi_world
            config = self.config
            self.run_record = RunRecord.start(
                self.world_size, group_kind=result.group, node_sizes=world.node_sizes if world is not None else None,
                update=(lambda env: config.hook.pytest_ipcbench_update_environment(config=config, env=env))
                if config is not None else None)
        return self.run_record.add(result)

    # ---------------------------------------------------------------------- parametrize

    def matrix(self, fixturenames: Sequence[str], marker: Mapping[str, Any]) -> Matrix | None:
        """The parameters of a test that uses the ipcbench fixtures (None if it uses none).

        Ids read backend-payload-size-ranks-mode, e.g. ``shm-ndarray-1MB-r4-native``. Backends
        that cannot run here and rank counts the world cannot hold stay in, skipped with the reason.
        The backend fixtures depend on ``ipc_mode`` and ``ipc_group`` on ``ipc_ranks``, so those
        two are in the closure of every test that needs them.
        """
        s = self.settings
        per_backend = backend_fixtures()
        named = [per_backend[f] for f in per_backend if f in fixturenames]
        dims: list[tuple[str, list[tuple[Any, str]]]] = []  # (argname, [(value, id part)])
        if "ipc_backend" in fixturenames:
            chosen = marker.get("backends", s.backends)
            dims.append(("ipc_backend", [(b, b) for b in s.backends if b in chosen]))
        if "ipc_payload" in fixturenames:
            kinds = [k for k in s.payloads if k in marker.get("payloads", s.payloads)]
            specs = payload_specs(kinds, marker.get("sizes", s.sizes))
            dims.append(("ipc_payload", [(p, p.id) for p in specs]))
        if "ipc_ranks" in fixturenames:
            dims.append(("ipc_ranks", [(n, f"r{n}") for n in marker.get("ranks", s.ranks)]))
        if "ipc_mode" in fixturenames:
            dims.append(("ipc_mode", [(m, m) for m in s.modes if m in marker.get("modes", s.modes)]))
        if not dims:
            return None

        argnames = tuple(argname for argname, _ in dims)
        empty = [argname for argname, cells in dims if not cells]
        if empty:  # options and marker together leave nothing: one skipped item says so
            reason = f"ipcbench: nothing selected for {', '.join(empty)} (the options and the marker exclude all)"
            skipped = pytest.param(*([None] * len(argnames)), marks=pytest.mark.skip(reason=reason))
            return Matrix(argnames, [skipped], ["unselected"])

        values: list[Any] = []
        ids: list[str] = []
        for combo in itertools.product(*(cells for _, cells in dims)):
            row = dict(zip(argnames, (value for value, _ in combo)))
            labels = [label for _, label in combo]
            if named:  # the per-backend fixtures: not a dimension, but first in the id
                labels.insert(1 if "ipc_backend" in row else 0, "-".join(named))
            ranks = row.get("ipc_ranks")
            reasons = []
            if ranks is not None:
                self._local_size = max(self._local_size, ranks)  # local mode sizes its world for the largest
                reasons.append(self.fits(ranks))
            for name in ([row["ipc_backend"]] if "ipc_backend" in row else []) + named:
                reasons.append(self.backend_unavailable(name, ranks))
            shown = list(dict.fromkeys(r for r in reasons if r))
            marks = [pytest.mark.skip(reason="; ".join(shown))] if shown else []
            values.append(pytest.param(*(row[a] for a in argnames), marks=marks))
            ids.append("-".join(labels))
        return Matrix(argnames, values, ids)

    # ---------------------------------------------------------------------------- close

    def close(self) -> None:
        """Stop the local worker processes (and free MPI sub-groups); safe to call twice."""
        self._forget_local()
        if self._mpi_world is not None:
            with contextlib.suppress(Exception):  # freeing is a courtesy; MPI_Finalize cleans up anyway
                self._mpi_world.free()  # the sub-groups; the world itself stays
            self._mpi_world = None


SESSION_KEY = pytest.StashKey[IpcSession]()


def get_session(config: pytest.Config) -> IpcSession:
    """The ipcbench session of this pytest run (built in ``pytest_configure``)."""
    try:
        return config.stash[SESSION_KEY]
    except KeyError:
        raise RuntimeError("the ipcbench plugin is not active in this pytest run (-p no:ipcbench?)") from None
