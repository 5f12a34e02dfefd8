"""The fifo backend and the records payload kind through pytest-ipcbench's fixtures.

``pytest`` runs these over local worker processes (2 and 4 ranks); ``mpiexec -n 2 python -m
pytest --with-mpi -m mpi`` runs them over MPI ranks.
"""

from __future__ import annotations

import numpy as np
import pytest
from pytest_ipcbench import PayloadSpec, assert_delivered, backend_names, deliver, payload_kinds


def test_the_entry_points_are_seen() -> None:
    assert "fifo" in backend_names() and "records" in payload_kinds()


# the conformance suite checks fifo's delivery at every size (test_conformance.py): here the matrix
# a project's own test gets, narrowed by the marker to the largest size
@pytest.mark.ipcbench(payloads="records,ndarray", sizes="1MB")
def test_every_reader_gets_the_payload(ipc_group, ipc_backend, ipc_payload) -> None:
    # ipc_backend: fifo and shm (ini ipc_backends); ipc_payload: records and ndarray at 1MB
    assert_delivered(ipc_group.run(deliver, ipc_backend, ipc_payload))


def test_the_fifo_fixture(ipc_group, fifo_backend) -> None:
    assert fifo_backend.name == "fifo"
    assert_delivered(ipc_group.run(deliver, fifo_backend, PayloadSpec("records", 64_000), 5))


@pytest.mark.ipcbench(payloads="records", sizes="1MB", ranks=2)
def test_fifo_is_benchmarked(ipc_bench, ipc_group, fifo_backend, ipc_payload) -> None:
    result = ipc_bench(fifo_backend, ipc_payload, time_budget=0.2)
    assert result.verified.failed == 0
    assert result.backend == "fifo" and result.payload == "records"


def test_records_are_what_they_say() -> None:
    spec = PayloadSpec("records", 32_000)
    records = spec.build(seed=3)
    assert records.dtype.itemsize == 32 and len(records) == 1000 and spec.nbytes == 32_000
    assert records["id"][0] == 3 and spec.equal(records, spec.build(3)) and not spec.equal(records, spec.build(4))
    assert not spec.equal(records, np.zeros_like(records))
