"""The MPI methods on the one harness: each method is a harness backend, ``mpi-method-<method>``.

In the ``broadcast`` scenario the root's ``write(obj)`` and every reader's ``read()`` are the two
halves of one collective ``Method.transfer``, so the harness times a method like any other backend.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any, ClassVar

from ..backends.base import Backend, BackendSpec, register
from ..core.group import MPIGroup, comm_of
from ..harness.measure import BenchSettings, VerificationError, bench
from ..results.results import Result
from ..results.stats import Summary
from .configs import PAYLOAD_KINDS, Data, ShapeInfo, data_equal, data_nbytes, flipped
from .methods import METHODS, Method, get_method

BACKEND_PREFIX = "mpi-method-"
#: A method's settings when none are given: no touch (every method delivers into real buffers,
#: docs/method.md rule 10), barriers busy in MPI (a passive-target ``Get`` progresses only while the
#: root is inside MPI, rule 18), no counting pass (the figure is a transfer time).
DEFAULT_SETTINGS = BenchSettings(time_budget=0.5, touch=False, quiet_waits=False, count=False)
#: One warm-up and one timed transfer: correctness runs.
QUICK_SETTINGS = replace(DEFAULT_SETTINGS, time_budget=1e-3, warmup=1, min_iterations=1, max_iterations=1)
#: The MPI methods' figure: one transfer, the max over every rank, the root included.
METRIC = "transfer"


class MethodBackend(Backend):
    """An MPI method as a backend: ``write`` (root) and ``read`` (readers) make one transfer."""

    internal = True  # an adapter for the harness, not a backend users pick

    delivery = "channel"
    needs_mpi = True
    method_class: ClassVar[type[Method]]

    def setup(self) -> None:
        self.method: Method | None = None
        self._sources: list[Any] = []
        self._reads = 0

    def prepare(self, objs: Sequence[Any]) -> None:
        """Collective, untimed: prepare the method with the distinct payloads as its sources."""
        sources = [o for k, o in enumerate(objs) if all(o is not p for p in objs[:k])]
        info = ShapeInfo.of(sources[0])  # what the receivers know beforehand (configs.ShapeInfo)
        method = self.method_class()
        data = (sources[0] if len(sources) == 1 else sources) if self.group.rank == self.root else None
        method.prepare(comm_of(self.group), data, info, self.root, slots=len(sources))
        self.method, self._sources, self._reads = method, sources, 0

    def _prepared(self) -> Method:
        if self.method is None:
            raise RuntimeError(
                f"{self.name}: the MPI methods run in the harness's broadcast scenario (prepare() first)"
            )
        return self.method

    def write(self, obj: Any) -> None:
        method = self._prepared()
        slot = next((k for k, o in enumerate(self._sources) if o is obj), None)
        if slot is None:
            raise ValueError(f"{self.name}: write() takes one of the objects given to prepare()")
        method.transfer(slot)

    def read(self) -> Any:
        method = self._prepared()
        slot = self._reads % len(self._sources)  # the writer sends the sources in turn
        self._reads += 1
        method.transfer(slot)
        return method.result()

    def close(self) -> None:
        method = getattr(self, "method", None)
        if method is not None:
            method.free()
            self.method = None


def backend_name(method: str | type[Method]) -> str:
    """The registered backend name of a method (``mpi-method-bcast``)."""
    return BACKEND_PREFIX + (method if isinstance(method, str) else method.name)


_ADAPTERS: dict[type[Method], str] = {}  # method class -> its registered backend name


def method_backend(cls: type[Method]) -> str:
    """Register a backend for method class ``cls`` (once per class); return its name."""
    if cls not in _ADAPTERS:
        name = backend_name(cls)
        qualname = f"{cls.__name__}Backend"
        adapter = type(qualname, (MethodBackend,),
                       {"name": name, "method_class": cls, "__module__": __name__, "__qualname__": qualname})
        # reachable as module:qualname, so spawned workers can make the same registration
        globals()[qualname] = adapter
        register(adapter)
        _ADAPTERS[cls] = name
    return _ADAPTERS[cls]


for _cls in METHODS.values():
    method_backend(_cls)


def _method_class(method: str | type[Method] | Method) -> type[Method]:
    if isinstance(method, str):
        return type(get_method(method))
    return method if isinstance(method, type) else type(method)


def group_of(group_or_comm: Any) -> MPIGroup:
    """An :class:`MPIGroup` from itself or an mpi4py communicator."""
    if isinstance(group_or_comm, MPIGroup):
        return group_or_comm
    if group_or_comm is None or not hasattr(group_or_comm, "Get_rank") or not hasattr(group_or_comm, "Bcast"):
        raise TypeError("expected an MPIGroup or an mpi4py communicator (the MPI methods need MPI)")
    return MPIGroup(group_or_comm)


def with_transfer_metric(result: Result) -> Result:
    """A harness broadcast Result with the MPI methods' metric added, as its primary one:
    ``transfer``, per transfer the max of the root's ``write`` and the slowest reader's
    ``completion`` (one barrier), the max over every rank as the original benchmark's allreduce MAX."""
    write, completion = result.samples.get("write", []), result.samples.get("completion", [])
    if len(write) != len(completion):
        raise ValueError(f"{result.key}: {len(write)} write and {len(completion)} completion samples")
    return replace(result, samples={**result.samples, METRIC: [max(w, c) for w, c in zip(write, completion)]},
                   primary=METRIC)


# ------------------------------------------------------------------------------ your own data


@dataclass(frozen=True)
class DataPayload:
    """A harness payload of given data (a 1-D array or a list of them), held by every rank; an even
    seed builds it with every byte inverted, so the harness's two alternating payloads differ."""

    data: Data = field(repr=False)

    @property
    def kind(self) -> str:
        return PAYLOAD_KINDS[ShapeInfo.of(self.data).shape]

    @property
    def size(self) -> int:
        return data_nbytes(self.data)

    nbytes = size

    @property
    def id(self) -> str:
        return f"{self.kind}-{self.size}B"

    def build(self, seed: int = 0) -> Data:
        return flipped(self.data) if seed % 2 == 0 else self.data

    def equal(self, a: Any, b: Any) -> bool:
        return data_equal(a, b)


@dataclass
class Measurement:
    """One method timed by the harness on one payload; the same on every rank but ``received``."""

    method: str
    shape: str
    result: Result  # the harness's Result (scenario broadcast), with the MPI methods' metric added
    received: Data = field(default=None, repr=False)  # what this rank holds after one more transfer

    @property
    def samples(self) -> list[float]:
        """Seconds per transfer, max over every rank (:data:`METRIC`), one per timed iteration."""
        return self.result.samples[METRIC]

    @property
    def median(self) -> float:
        return self.summary().median

    def summary(self) -> Summary:
        return self.result.summary(METRIC)

    @property
    def nbytes(self) -> int:
        return self.result.nbytes

    @property
    def ranks(self) -> int:
        return self.result.ranks

    @property
    def verified(self) -> bool:
        """Every reader's checks passed (the harness raised otherwise)."""
        v = self.result.verified
        return v is not None and v.checked > 0 and v.failed == 0

    @property
    def warmup(self) -> int:
        return int((self.result.plan or {}).get("warmup", 0))


def bench_method(
    group: Any,
    method: str | type[Method] | Method,
    data: Data | None,
    *,
    expected: Data | None = None,
    settings: BenchSettings | None = None,
    root: int = 0,
) -> Measurement:
    """Collective: the harness times ``method`` moving ``data`` (held by ``root``) to every rank.

    Each reader checks against ``expected`` (default: the root's data, broadcast untimed);
    VerificationError on every rank otherwise. ``received``: this rank's after one more transfer.
    """
    group = group_of(group)
    cls = _method_class(method)
    if expected is None:
        expected = group.bcast(data if group.rank == root else None, root=root)
    mine = data if group.rank == root and data is not None else expected
    spec = BackendSpec(method_backend(cls), "native", root=root)
    result = bench(group, spec, DataPayload(mine), "broadcast", settings or DEFAULT_SETTINGS)
    result = group.bcast(with_transfer_metric(result) if result is not None else None)
    received = transfer_once(group, cls(), mine if group.rank == root else None, root=root)
    bad = [r for r, ok in enumerate(group.allgather(data_equal(received, expected))) if not ok]
    if bad:
        raise VerificationError(f"{cls.name}: ranks {bad} did not receive the root's data")
    return Measurement(cls.name, ShapeInfo.of(mine).shape, result, received)


def transfer_once(group: Any, method: str | Method, data: Data | None, root: int = 0) -> Data:
    """Collective: move ``data`` from ``root`` once with ``method``; every rank gets the data."""
    comm = group_of(group).comm
    method = get_method(method) if isinstance(method, str) else method
    info = comm.bcast(ShapeInfo.of(data) if comm.Get_rank() == root else None, root=root)
    method.prepare(comm, data if comm.Get_rank() == root else None, info, root)
    try:
        method.transfer()
        return method.result()
    finally:
        method.free()
