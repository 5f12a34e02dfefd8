"""The MPI method matrix: every method x shape x configuration up to Large.

The MPI tests are marked ``mpi`` (pytest-mpi) and skipped by plain pytest; run them with::

    mpiexec -n 4 python -m pytest -p no:cacheprovider --with-mpi -m mpi tests/mpi_methods/test_mpi_methods.py
    mpiexec -n 2 python -m pytest -p no:cacheprovider --with-mpi -m mpi tests/mpi_methods/test_mpi_methods.py

The unmarked tests at the end need no MPI.
"""

from __future__ import annotations

import numpy as np
import pytest

from pytest_ipcbench import mpi_methods as mm
from pytest_ipcbench.harness.measure import BenchSettings, VerificationError
from pytest_ipcbench.harness.plan import static_plan
from pytest_ipcbench.mpi_methods.methods import Bcast

# the fixtures mpi_method, ragged_payload and contiguous_payload come from the plugin
from pytest_ipcbench.plugin.fixtures.mpi_methods import MethodPayload, MethodRunner, mpi_unavailable_reason

QUICK = mm.QUICK_SETTINGS


def _comm():
    from mpi4py import MPI

    if MPI.COMM_WORLD.Get_size() < 2:  # pytest-mpi's min_size does this when it is loaded
        pytest.skip("needs at least 2 MPI ranks")
    return MPI.COMM_WORLD


# ------------------------------------------------------------------------------------ MPI


@pytest.mark.mpi(min_size=2)
def test_ragged_every_method(mpi_method: MethodRunner, ragged_payload: MethodPayload) -> None:
    comm = _comm()
    data = ragged_payload.data
    m = mpi_method.run(comm, data if comm.rank == 0 else None, expected=data, settings=QUICK)
    assert m.verified is True
    assert m.result.verified.checked > 0 and m.result.verified.failed == 0
    assert m.shape == "2d" and m.nbytes == ragged_payload.nbytes == ragged_payload.base * 55 * 4
    assert [r.size for r in m.received] == [ragged_payload.base * (i + 1) ** 2 for i in range(5)]
    assert len(m.samples) == 1 and m.samples[0] > 0
    assert m.ranks == comm.size


@pytest.mark.mpi(min_size=2)
def test_contiguous_every_method(mpi_method: MethodRunner, contiguous_payload: MethodPayload) -> None:
    comm = _comm()
    data = contiguous_payload.data
    m = mpi_method.run(comm, data if comm.rank == 0 else None, expected=data, settings=QUICK)
    assert m.verified is True
    assert m.shape == "1d" and m.received.dtype == np.int32
    assert m.received.size == contiguous_payload.base * 55
    assert m.samples[0] > 0


def _own_rows(rank: int) -> list[np.ndarray]:
    # not the MPI methods' own data: float64, three rows of unrelated lengths, root-dependent values
    return [np.linspace(rank, rank + 1, n) for n in (7, 1, 4099)]


@pytest.mark.mpi(min_size=2)
@pytest.mark.parametrize("name", mm.METHOD_NAMES)
def test_own_ragged_data_from_last_rank(name: str) -> None:
    """Any dtype, any row count; the root need not be rank 0; transfer() is one untimed move."""
    comm = _comm()
    root = comm.size - 1
    expected = _own_rows(root)
    got = MethodRunner(name).transfer(comm, expected if comm.rank == root else None, root=root)
    assert mm.data_equal(got, expected)
    one = np.arange(10_001, dtype=np.float32) * (root + 1)
    got1 = MethodRunner(name).transfer(comm, one if comm.rank == root else None, root=root)
    assert mm.data_equal(got1, one)


@pytest.mark.mpi(min_size=2)
def test_timing_loop_and_repeated_lengths() -> None:
    """The harness's plan: warm-up then timed transfers; the method reused for every transfer."""
    comm = _comm()
    data = mm.build_data("Small", "2d")
    settings = BenchSettings(warmup=2, min_iterations=3, max_iterations=3, touch=False)
    m = mm.bench_method(comm, "datatype", data if comm.rank == 0 else None, expected=data, settings=settings)
    assert (m.result.plan["iterations"], len(m.samples)) == (3, 3) and m.warmup == 2
    assert all(s > 0 for s in m.samples)
    # samples are the max over readers: the same list on every rank
    assert comm.allgather(m.samples) == [m.samples] * comm.size
    assert m.result.scenario == "broadcast" and m.result.readers == comm.size - 1


@pytest.mark.mpi(min_size=2)
def test_own_data_is_verified_without_expected() -> None:
    """Without ``expected``, the readers check against the root's data (broadcast untimed)."""
    comm = _comm()
    rows = _own_rows(0)
    m = mm.bench_method(comm, "bcast", rows if comm.rank == 0 else None, settings=QUICK)
    assert m.verified is True and mm.data_equal(m.received, rows)


class _Corrupting(Bcast):
    """A Bcast whose last receiver damages what it got."""

    name = "corrupting"

    def _transfer_1d(self) -> None:
        super()._transfer_1d()
        if self.comm.Get_rank() == self.comm.Get_size() - 1:
            self._rows[0][-1] += 1


@pytest.mark.mpi(min_size=2)
def test_verification_fails_on_every_rank() -> None:
    comm = _comm()
    data = mm.build_data("Small", "1d")
    with pytest.raises(VerificationError, match=rf"rank {comm.size - 1} failed"):
        mm.bench_method(comm, _Corrupting, data if comm.rank == 0 else None, expected=data, settings=QUICK)


@pytest.mark.mpi(min_size=2)
def test_free_releases_mpi_objects() -> None:
    comm = _comm()
    for shape in mm.SHAPES:
        data = mm.build_data("Small", shape)
        info = mm.ShapeInfo.of(data)
        other = mm.build_data("Small", shape, seed=7)
        for name in mm.METHOD_NAMES:
            m = mm.get_method(name)
            m.prepare(comm, data if comm.rank == 0 else None, info)
            m.transfer()
            m.free()
            assert m.comm is None
            assert getattr(m, "win", None) is None
            assert getattr(m, "_attached", []) == []
            # two sources (what the harness alternates): slot k sends source k
            m = mm.get_method(name)
            m.prepare(comm, [data, other] if comm.rank == 0 else None, info, slots=2)
            for slot, want in ((1, other), (0, data), (1, other)):
                m.transfer(slot)
                assert mm.data_equal(m.result(), want)
            m.free()
            assert m.comm is None and getattr(m, "_wins", []) == []


@pytest.mark.mpi(min_size=2)
def test_run_matrix_results() -> None:
    from pytest_ipcbench.core.group import MPIGroup

    comm = _comm()
    lines: list[str] = []
    results = mm.run_matrix(
        MPIGroup(comm), configs=("Small",), methods=("bcast", "pkl5"), settings=QUICK, progress=lines.append
    )
    if comm.rank != 0:
        assert results == [] and lines == []
        return
    assert [(r.backend, r.payload) for r in results] == [
        ("bcast", "array1d"),
        ("pkl5", "array1d"),
        ("bcast", "ragged2d"),
        ("pkl5", "ragged2d"),
    ]
    for r in results:
        assert (r.scenario, r.mode, r.size, r.nbytes, r.ranks) == ("mpi-method", "native", 11_000, 11_000, comm.size)
        assert r.extra["config"] == "Small" and r.extra["base"] == 50
        assert r.verified.checked > 0 and r.verified.failed == 0
        assert r.primary == "transfer" and r.samples["transfer"][0] > 0
        assert len(r.samples["transfer"]) == mm.DEFAULT_ROUNDS  # one transfer per round, pooled
        # the max over every rank: the root's time and the slowest reader's, per transfer
        assert r.samples["transfer"] == [max(w, c) for w, c in zip(r.samples["write"], r.samples["completion"])]
        assert r.extra["waits"] == "busy"
    assert len(lines) == 4


@pytest.mark.mpi(min_size=2)
def test_methods_run_in_the_broadcast_scenario_only() -> None:
    """A method is one collective transfer: the harness's pair scenarios get a clear error."""
    from pytest_ipcbench.backends.base import BackendSpec
    from pytest_ipcbench.core.group import MPIGroup
    from pytest_ipcbench.harness.measure import bench

    comm = _comm()
    spec = BackendSpec(mm.backend_name("bcast"), "native")
    pair = MPIGroup(comm).split(2)  # the ranks of a pingpong (the others have no part)
    if pair is not None:
        with pytest.raises(RuntimeError, match="broadcast scenario"):
            bench(pair, spec, mm.payload_spec("Small", "1d"), "pingpong", QUICK)
    comm.Barrier()


# -------------------------------------------------------------------------------- no MPI


def test_configurations_follow_the_seed() -> None:
    assert mm.CONFIGS == {
        "Small": 50, "Medium": 500, "Large": 5000, "XLarge": 50000, "XXLarge": 500000, "XXXLarge": 2000000,
    }
    assert mm.config_nbytes("Small") == 11_000
    assert mm.config_nbytes("XXXLarge") == 440_000_000  # the seed's "420 MB" (MiB)
    rows = mm.build_data("Medium", "2d")
    assert [r.size for r in rows] == [500, 2000, 4500, 8000, 12500]
    assert max(r.size for r in rows) // min(r.size for r in rows) == 25
    flat = mm.build_data("Medium", "1d")
    assert flat.dtype == np.int32 and flat.size == 27_500
    assert mm.parse_configs("small,XLARGE") == ("Small", "XLarge")
    assert mm.parse_configs("all") == mm.CONFIG_NAMES
    with pytest.raises(ValueError, match="unknown configuration"):
        mm.parse_configs("Huge")
    with pytest.raises(ValueError, match="unknown MPI method"):
        mm.parse_methods("bcast,carrier-pigeon")


def test_shape_info_rejects_what_mpi_cannot_send() -> None:
    assert mm.ShapeInfo.of(np.zeros(3, np.int32)) == mm.ShapeInfo("1d", "<i4", 3)
    assert mm.ShapeInfo.of([np.zeros(3), np.ones(5)]) == mm.ShapeInfo("2d", "<f8", 2)
    with pytest.raises(ValueError, match="one dtype"):
        mm.ShapeInfo.of([np.zeros(3), np.ones(5, np.int32)])
    with pytest.raises(ValueError, match="1-D C-contiguous"):
        mm.ShapeInfo.of(np.zeros((3, 3))[:, 0])
    with pytest.raises(ValueError, match="at least one row"):
        mm.ShapeInfo.of([])
    with pytest.raises(TypeError):
        mm.ShapeInfo.of({"a": 1})


def test_plan_scales_iterations_down_with_size() -> None:
    """The harness's plan for the MPI methods' sizes: fewer iterations as the size grows."""
    settings = mm.matrix_settings()
    counts = [static_plan(mm.config_nbytes(c), settings).iterations for c in mm.CONFIG_NAMES]
    assert counts == sorted(counts, reverse=True) and counts[0] > counts[-1]
    assert counts[0] == settings.max_iterations == 1000  # a round stays bounded on a loaded machine
    assert all(n >= settings.min_iterations for n in counts)
    assert mm.matrix_settings(case_time=3.0, rounds=3).time_budget == pytest.approx(1.0)
    assert mm.matrix_settings().touch is False  # methods deliver into real buffers
    assert mm.matrix_settings().quiet_waits is False  # ranks wait in MPI, as in the original C++ loop
    with pytest.raises(ValueError, match="case_time"):
        mm.matrix_settings(case_time=0)


def test_own_data_payload_alternates() -> None:
    rows = _own_rows(0)
    payload = mm.DataPayload(rows)
    first, second = payload.build(1), payload.build(2)
    assert first is rows and not payload.equal(first, second)
    assert payload.equal(second, mm.DataPayload(rows).build(2))
    assert (payload.kind, payload.nbytes) == ("ragged2d", sum(r.nbytes for r in rows))
    nan = np.array([np.nan, 1.0])
    assert mm.data_equal(nan, nan.copy())  # bytes compared: a delivered NaN is equal


def test_fixtures_skip_without_mpi(pytestconfig: pytest.Config) -> None:
    reason = mpi_unavailable_reason(pytestconfig)
    if not pytestconfig.getoption("with_mpi", default=False):
        assert reason is not None and ("--with-mpi" in reason or "mpi4py" in reason)
