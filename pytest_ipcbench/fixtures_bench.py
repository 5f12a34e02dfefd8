"""The ``ipc_bench`` fixture: run the harness in a test, record the result, feed pytest-benchmark.

::

    def test_shm_broadcast(ipc_bench, ipc_backend, ipc_payload, ipc_group):
        result = ipc_bench(ipc_backend, ipc_payload)            # scenario="broadcast"
        assert result.extra["verified"]["failed"] == 0

``ipc_bench(backend, payload, scenario="broadcast", group=None, *, settings=None, **overrides)``
is collective (every rank of the group calls it under MPI; rank 0 alone locally) and returns the
:class:`~.results.Result` on every calling rank. ``overrides`` are :class:`~.measure.BenchSettings`
fields (``time_budget=0.2``, ``verify="every"``, ...). It

* records the result in the ipcbench session (rank 0; ``--ipc-report DIR`` reports it);
* adds this machine's copy bandwidth at the payload's size and the result's fraction of it
  (``extra["efficiency"]``);
* feeds pytest-benchmark, when that plugin is active, so that ``--benchmark-json``,
  ``--benchmark-autosave`` and ``--benchmark-compare`` see our numbers: on rank 0, one
  ``benchmark.pedantic`` with as many rounds as the harness's plan has samples, timed by a replay
  clock (given through pytest-benchmark's own ``@pytest.mark.benchmark(timer=...)``) that returns
  the harness's samples of the primary metric; never calibrated, on no rank. Our fields go into
  ``benchmark.extra_info["ipcbench"]``. The first call of a test feeds it (pytest-benchmark keeps
  one benchmark per test); later calls are recorded in the session only.
"""

from __future__ import annotations

from dataclasses import fields, replace
from typing import Any, Callable

import pytest

from .backends.base import BackendSpec
from .group import Group
from .measure import PAIR_SCENARIOS, BenchSettings, CopyReference, annotate_efficiency, quiet_barrier, run_bench
from .payloads import PayloadSpec, parse_size
from .results import Result

_SETTING_NAMES = {f.name for f in fields(BenchSettings)}
_COPY_REFERENCE = CopyReference()


class ReplayClock:
    """A clock for pytest-benchmark that makes round ``i`` last exactly ``samples[i]`` seconds.

    pytest-benchmark's pedantic runner reads the timer once before and once after each round;
    this clock answers the running total before, and the total plus the next sample after.
    """

    __name__ = "ipcbench_replay_clock"

    def __init__(self) -> None:
        self.samples: list[float] = []
        self._i = 0
        self._now = 0.0
        self._open = False

    def load(self, samples: list[float]) -> None:
        self.samples, self._i, self._now, self._open = list(samples), 0, 0.0, False

    def __call__(self) -> float:
        if not self._open:
            self._open = True
            return self._now
        self._open = False
        if self._i < len(self.samples):
            self._now += self.samples[self._i]
            self._i += 1
        return self._now

    def tick(self) -> None:
        """The benchmarked 'function': nothing; the time comes from the clock."""


def _as_backend(backend: Any, mode: str | None) -> BackendSpec:
    if isinstance(backend, BackendSpec):
        return replace(backend, mode=mode) if mode else backend
    if isinstance(backend, str):
        return BackendSpec(backend, mode or "bytes")
    raise TypeError(f"backend must be a BackendSpec or a backend name, got {type(backend).__name__}")


def _as_payload(payload: Any) -> Any:
    if isinstance(payload, tuple) and len(payload) == 2:
        kind, size = payload
        return PayloadSpec(kind, parse_size(size))
    if hasattr(payload, "build") and hasattr(payload, "equal"):
        return payload
    raise TypeError(f"payload must be a PayloadSpec, a BufferPayload or (kind, size), got {type(payload).__name__}")


def benchmark_info(result: Result) -> dict[str, Any]:
    """Our fields for pytest-benchmark's ``extra_info``."""
    summary = result.summary()
    info = {
        "key": result.key,
        "scenario": result.scenario,
        "backend": result.backend,
        "mode": result.mode,
        "payload": result.payload,
        "size": result.size,
        "nbytes": result.nbytes,
        "ranks": result.ranks,
        "metric": result.primary,
        "median_s": summary.median,
        "samples": summary.n,
        "plan": result.extra.get("plan"),
        "group": result.extra.get("group"),
    }
    if result.variant:
        info["variant"] = result.variant
    if result.nbytes and summary.median > 0:
        info["throughput_MBps"] = result.nbytes / summary.median / 1e6
    for key in ("efficiency", "copy_bandwidth_Bps", "verified"):
        if key in result.extra:
            info[key] = result.extra[key]
    return info


class BenchRunner:
    """What ``ipc_bench`` returns; usable without pytest (give it callables)."""

    def __init__(
        self,
        default_group: Callable[[], Group],
        record: Callable[[Result], None] | None = None,
        benchmark: Any = None,
        clock: ReplayClock | None = None,
        copy_reference: CopyReference | None = _COPY_REFERENCE,
        skip: Callable[[str], None] | None = None,
    ) -> None:
        self._default_group = default_group
        self._record = record
        self._benchmark = benchmark
        self._clock = clock
        self._copy = copy_reference
        self._skip = skip
        self.results: list[Result] = []
        self.fed = False

    def __call__(
        self,
        backend: Any,
        payload: Any,
        scenario: str = "broadcast",
        group: Group | None = None,
        *,
        mode: str | None = None,
        settings: BenchSettings | None = None,
        **overrides: Any,
    ) -> Result:
        unknown = set(overrides) - _SETTING_NAMES
        if unknown:
            raise TypeError(f"ipc_bench got unknown settings {sorted(unknown)}; BenchSettings has {sorted(_SETTING_NAMES)}")
        spec = _as_backend(backend, mode)
        load = _as_payload(payload)
        settings = replace(settings or BenchSettings(), **overrides)
        group = group if group is not None else self._default_group()
        if scenario in PAIR_SCENARIOS and not group.is_mpi and group.size != 2:
            reason = f"{scenario} needs a local group of 2 ranks, this one has {group.size} (ranks=2)"
            if self._skip is not None:
                self._skip(reason)
            raise ValueError(reason)
        result = run_bench(group, spec, load, scenario, settings)
        if self._copy is not None and scenario != "granularity":
            if group.rank == 0:
                annotate_efficiency(result, self._copy.bandwidth(result.nbytes))
            if group.is_mpi:
                quiet_barrier(group)  # the others wait, asleep, while rank 0 measures its copy
        self.results.append(result)
        if group.rank == 0:
            if self._record is not None:
                self._record(result)
            self._feed(result)
        return result

    def _feed(self, result: Result) -> None:
        bm, clock = self._benchmark, self._clock
        if bm is None or clock is None or self.fed:
            return
        self.fed = True
        samples = result.samples.get(result.primary) or []
        bm.extra_info["ipcbench"] = benchmark_info(result)
        if not samples:
            return
        clock.load(samples)
        bm.pedantic(clock.tick, rounds=len(samples), iterations=1, warmup_rounds=0)


def _benchmark_fixture(request: pytest.FixtureRequest, clock: ReplayClock, rank0: bool) -> Any:
    """pytest-benchmark's fixture for this test, timed by ``clock`` (None without the plugin)."""
    if not request.config.pluginmanager.hasplugin("pytest_benchmark.plugin") and not \
            request.config.pluginmanager.hasplugin("benchmark"):
        return None
    node = request.node
    existing = node.get_closest_marker("benchmark")
    kwargs = dict(existing.kwargs) if existing is not None else {}
    kwargs["timer"] = clock
    node.add_marker(pytest.mark.benchmark(**kwargs), append=False)
    try:
        bm = request.getfixturevalue("benchmark")
    except pytest.FixtureLookupError:
        return None
    if not rank0:
        bm.skipped = True  # only rank 0 reports; the others' fixture stays unused on purpose
        return None
    return bm


def _session(config: pytest.Config) -> Any:
    try:
        from .session import get_session
    except ImportError:
        return None
    try:
        return get_session(config)
    except RuntimeError:
        return None


@pytest.fixture
def ipc_bench(request: pytest.FixtureRequest, ipc_ranks: int) -> BenchRunner:
    """Measure ``(backend, payload, scenario)`` with the harness; returns the Result.

    ``ipc_bench(backend, payload, scenario="broadcast", group=None, *, mode=None, settings=None,
    **BenchSettings fields)``. Records into the ipcbench session and pytest-benchmark (see module).
    It takes ``ipc_ranks`` so that a test is parametrized by rank count (and MPI ranks outside the
    group are idle, not skipped) even when it does not name ``ipc_group`` itself.
    """
    session = _session(request.config)
    rank0 = session is None or getattr(session, "rank", 0) == 0
    clock = ReplayClock()
    bm = _benchmark_fixture(request, clock, rank0)

    def default_group() -> Group:
        return request.getfixturevalue("ipc_group")

    record = None
    if session is not None:

        def record(result: Result) -> None:
            results = getattr(session, "results", None)
            if results is not None and not results.env:  # the report's header: this machine, MPI, ...
                from .envinfo import collect

                world = getattr(session, "world_size", None)  # MPI world size (None: local groups)
                results.env = collect(world, group_kind=result.extra.get("group", ""))
            session.record(result)

    return BenchRunner(default_group, record, bm, clock, skip=pytest.skip)


@pytest.fixture
def ipc_copy_bandwidth() -> Callable[[int], float]:
    """``ipc_copy_bandwidth(nbytes)``: this machine's numpy copy bandwidth (B/s) at that size."""
    return _COPY_REFERENCE.bandwidth
