"""Fixtures of the MPI method matrix (seed 004), registered by the plugin.

* ``mpi_method``: parametrized over :data:`~.mpi_methods.METHOD_NAMES`; a :class:`MethodRunner`
  whose ``run(comm, data)`` times that method moving ``data`` (a 1-D array or a list of 1-D
  arrays, held by the root) to every rank and returns a
  :class:`~.mpi_methods.Measurement` (``received``, ``samples``, ``median``, ``summary()``).
  Skipped, with the reason, when mpi4py is missing or pytest was not started with ``--with-mpi``
  (pytest-mpi) under ``mpiexec``.
* ``ragged_payload`` / ``contiguous_payload``: parametrized over :data:`PAYLOAD_CONFIGS`
  (seed 004's configurations up to Large); a :class:`SeedPayload` with the data built on every
  rank (the root sends it, the other ranks compare with it). They need no MPI themselves.

Benchmarking your own ragged data with the same methods::

    from mpi4py import MPI

    @pytest.mark.mpi(min_size=2)
    def test_my_rows(mpi_method):
        comm = MPI.COMM_WORLD
        rows = my_rows() if comm.rank == 0 else None
        m = mpi_method.run(comm, rows)
        assert len(m.received) == ...   # every rank holds the rows
        print(mpi_method.name, m.median)  # seconds per transfer, max over ranks
"""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass, field
from typing import Any

import pytest

from .mpi_methods import (
    FIXTURE_CONFIGS,
    METHOD_NAMES,
    METHODS,
    Data,
    Measurement,
    Plan,
    build_data,
    config_base,
    config_nbytes,
    measure,
    transfer_once,
)

#: Configurations the payload fixtures are parametrized over (the plugin may extend this).
PAYLOAD_CONFIGS: tuple[str, ...] = FIXTURE_CONFIGS


@dataclass(frozen=True)
class MethodRunner:
    """One MPI method, bound by name; every call is collective (every rank calls it)."""

    name: str

    @property
    def notes(self) -> dict[str, str]:
        """What the method does for each shape."""
        cls = METHODS[self.name]
        return {"1d": cls.notes_1d, "2d": cls.notes_2d}

    def run(
        self,
        comm: Any,
        data: Data | None,
        *,
        expected: Data | None = None,
        plan: Plan | None = None,
        root: int = 0,
    ) -> Measurement:
        """Time this method moving ``data`` (significant on ``root``) to every rank.

        With ``expected`` (on every rank), every rank checks what it received and every rank
        raises :class:`~.mpi_methods.VerificationError` on a mismatch anywhere.
        """
        return measure(comm, self.name, data, expected=expected, plan=plan, root=root)

    def transfer(self, comm: Any, data: Data | None, root: int = 0) -> Data:
        """Move ``data`` once, untimed; returns what this rank holds afterwards."""
        return transfer_once(comm, self.name, data, root=root)

    def __str__(self) -> str:
        return self.name


@dataclass
class SeedPayload:
    """Seed 004's data at one configuration: 1D (``base * 55`` int32) or ragged 2D (5 rows)."""

    config: str
    shape: str
    base: int
    nbytes: int
    data: Data = field(repr=False)

    @property
    def id(self) -> str:
        return f"{self.shape}-{self.config}"


def make_seed_payload(config: str, shape: str) -> SeedPayload:
    return SeedPayload(config, shape, config_base(config), config_nbytes(config), build_data(config, shape))


def mpi_unavailable_reason(config: pytest.Config) -> str | None:
    """Why MPI fixtures cannot run here, or None when they can."""
    if importlib.util.find_spec("mpi4py") is None:
        return "mpi_method needs mpi4py: pip install 'pytest-ipcbench[mpi]'"
    if not config.getoption("with_mpi", default=False):
        return "mpi_method needs MPI: run under mpiexec with `pytest --with-mpi` (pytest-mpi)"
    return None


@pytest.fixture(params=METHOD_NAMES, ids=list(METHOD_NAMES))
def mpi_method(request: pytest.FixtureRequest) -> MethodRunner:
    """One of the MPI methods (p2p, bcast, ibcast, pack, datatype, rma-fence, rma-lock, pickle, pkl5)."""
    reason = mpi_unavailable_reason(request.config)
    if reason:
        pytest.skip(reason)
    return MethodRunner(request.param)


@pytest.fixture(params=PAYLOAD_CONFIGS, ids=list(PAYLOAD_CONFIGS))
def ragged_payload(request: pytest.FixtureRequest) -> SeedPayload:
    """Seed 004's ragged 2D data: five int32 rows of ``base * (i + 1) ** 2`` elements."""
    return make_seed_payload(request.param, "2d")


@pytest.fixture(params=PAYLOAD_CONFIGS, ids=list(PAYLOAD_CONFIGS))
def contiguous_payload(request: pytest.FixtureRequest) -> SeedPayload:
    """Seed 004's contiguous 1D data: ``base * 55`` int32 elements."""
    return make_seed_payload(request.param, "1d")


__all__ = [
    "PAYLOAD_CONFIGS",
    "MethodRunner",
    "SeedPayload",
    "contiguous_payload",
    "make_seed_payload",
    "mpi_method",
    "mpi_unavailable_reason",
    "ragged_payload",
]
