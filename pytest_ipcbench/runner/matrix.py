"""The standard matrix of ``ipcbench run``: levels (quick, default, full) and their cases.

A :class:`Case` is one backend x mode x payload x size x scenario at a rank count; a
:class:`Level` says which sizes each scenario runs and with which settings.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ..backends.base import MODES, BackendUnavailable, backend_names, get_backend
from ..core.payloads import PAYLOADS, PayloadSpec, get_kind, payload_kinds
from ..core.units import duration_label, size_label
from ..harness.measure import PAIR_SCENARIOS, SCENARIOS, BenchSettings, BufferPayload
from ..mpi_methods.configs import CONFIG_NAMES, config_nbytes

BUFFER = "buffer"  # the pseudo-kind of ping-pong and stream: exactly ``size`` bytes
MB = 10**6
KB = 10**3
MEMORY_COPY_BYTES = 64 * MB  # the copy bandwidth shown in the environment: larger than a usual L3, so memory


@dataclass(frozen=True)
class Case:
    scenario: str
    backend: str
    mode: str
    payload_kind: str  # a payload kind (core/payloads.py), or BUFFER (exactly ``size`` bytes)
    size: int
    ranks: int
    work: float = 0.0

    @property
    def label(self) -> str:
        size = size_label(self.size)
        work = f" work={duration_label(self.work)}" if self.scenario == "granularity" else ""
        ranks = 2 if self.scenario in PAIR_SCENARIOS else self.ranks
        return f"{self.scenario} {self.backend}/{self.mode} {self.payload_kind}-{size} r{ranks}{work}"

    def payload(self) -> Any:
        return BufferPayload(self.size) if self.payload_kind == BUFFER else PayloadSpec(self.payload_kind, self.size)

    @property
    def phase(self) -> str:
        """The process model its backend declares (``Backend.process_model``): mpi or local."""
        try:
            return get_backend(self.backend).process_model()
        except BackendUnavailable:  # cannot load here: its case says why, in the MPI job as before
            return "mpi"


def _backend_flag(name: str, flag: str) -> Any:
    """A class attribute of a backend (False when its entry point cannot load here)."""
    try:
        return getattr(get_backend(name), flag, False)
    except BackendUnavailable:
        return False


def load_problem(name: str) -> str | None:
    """Why backend ``name`` does not load here (a missing package, a broken plugin), or None."""
    try:
        get_backend(name)
    except BackendUnavailable as exc:
        return str(exc)
    return None


def needs_mpi(name: str) -> bool:
    """Only over MPI ranks (False too for a backend that does not load here: its case says why)."""
    return bool(_backend_flag(name, "needs_mpi"))


def is_channel(name: str) -> bool:
    return _backend_flag(name, "delivery") == "channel"


def plugin_kinds() -> tuple[str, ...]:
    """Payload kinds that other distributions (or registrations) add: the broadcast cases run them
    too, at the level's ``ndarray`` sizes (or at their fixed size)."""
    return tuple(k for k in payload_kinds() if not PAYLOADS.builtin(k))


@dataclass(frozen=True)
class Level:
    """What one level runs: payload sizes by kind per scenario, settings, extras."""

    broadcast: dict[str, tuple[int, ...]]
    pingpong: tuple[int, ...]
    stream: tuple[int, ...]
    granularity: tuple[float, ...]
    granularity_modes: tuple[str, ...]
    stream_modes: tuple[str, ...]
    settings: BenchSettings
    mpi_method_configs: tuple[str, ...]
    mpi_method_case_time: float
    case_timeout: float


METHOD_SIZES = {name: config_nbytes(name) for name in CONFIG_NAMES}  # the MPI methods' sizes, 11 KB .. 440 MB

LEVEL_SPECS: dict[str, Level] = {
    "quick": Level(
        broadcast={"dict": (10 * KB, 1 * MB), "ndarray": (10 * KB, 1 * MB)},
        pingpong=(1, 1 * MB),
        stream=(1 * KB,),
        granularity=(0.0, 1e-3),
        granularity_modes=("bytes",),
        stream_modes=("native",),
        # 15, not 5: a bimodal slow case flips a median of 5 with one sample (docs/method.md rule 8)
        settings=BenchSettings(time_budget=0.12, min_iterations=15, max_iterations=2000),
        mpi_method_configs=("Small", "Medium"),
        mpi_method_case_time=0.05,
        case_timeout=90.0,
    ),
    "default": Level(
        broadcast={
            "dict": (1 * KB, 10 * KB, 100 * KB, 1 * MB),  # 10 .. 10000 entries
            "ndarray": (10 * KB, 1 * MB, 10 * MB, 100 * MB),
            "array1d": (METHOD_SIZES["Small"], METHOD_SIZES["Large"], METHOD_SIZES["XLarge"]),
            "ragged2d": (METHOD_SIZES["Small"], METHOD_SIZES["Large"], METHOD_SIZES["XLarge"]),
        },
        pingpong=(1, 1 * KB, 64 * 1024, 1 * MB, 16 * 1024 * 1024),
        stream=(1 * KB, 64 * 1024, 1 * MB),
        granularity=(0.0, 1e-4, 1e-3, 1e-2),
        granularity_modes=("bytes",),
        stream_modes=MODES,
        settings=BenchSettings(time_budget=0.4, min_iterations=5),
        mpi_method_configs=("Small", "Medium", "Large", "XLarge"),
        mpi_method_case_time=0.6,
        case_timeout=240.0,
    ),
    "full": Level(
        broadcast={
            "dict": (1 * KB, 10 * KB, 100 * KB, 1 * MB, 10 * MB),  # up to 100000 entries
            "ndarray": (10 * KB, 1 * MB, 10 * MB, 100 * MB, 602 * MB),  # 250000 x 602 float32, a GNN batch
            "array1d": tuple(METHOD_SIZES.values()),  # 11 KB .. 440 MB (the MPI methods)
            "ragged2d": tuple(METHOD_SIZES.values()),
        },
        pingpong=(1, 64, 1 * KB, 16 * 1024, 64 * 1024, 1 * MB, 16 * 1024 * 1024, 256 * 1024 * 1024),
        stream=(64, 1 * KB, 64 * 1024, 1 * MB, 16 * MB),
        granularity=(0.0, 1e-5, 1e-4, 1e-3, 1e-2, 1e-1),
        granularity_modes=MODES,
        stream_modes=MODES,
        # the default level's precision at more sizes (docs/performance-history.md, "The full run")
        settings=BenchSettings(time_budget=0.5, min_iterations=3),
        mpi_method_configs=tuple(METHOD_SIZES),
        mpi_method_case_time=0.6,
        case_timeout=1200.0,
    ),
}


def build_matrix(
    level: str = "default",
    ranks: int = 4,
    backends: Sequence[str] | None = None,
    modes: Sequence[str] = MODES,
    kinds: Sequence[str] | None = None,
    scenarios: Sequence[str] = SCENARIOS,
    sizes: Sequence[int] | None = None,
    only: Sequence[str] = (),
) -> list[Case]:
    """Every case of a level, filtered; MPI-phase cases first, in a stable order. Broadcast runs the
    level's kinds and every plugin payload kind (``kinds`` narrows that); ``backends`` None: all."""
    spec = LEVEL_SPECS[level]
    backends = backend_names() if backends is None else backends
    broadcast = dict(spec.broadcast)
    for kind in (plugin_kinds() if kinds is None else [k for k in kinds if k not in broadcast and k != BUFFER]):
        fixed = get_kind(kind).fixed_size
        broadcast[kind] = (fixed,) if fixed is not None else spec.broadcast["ndarray"]
    cases: list[Case] = []
    for backend in backends:
        for mode in modes:
            if "broadcast" in scenarios:
                for kind, kind_sizes in broadcast.items():
                    if kinds is not None and kind not in kinds:
                        continue
                    fixed = get_kind(kind).fixed_size
                    for size in ((fixed,) if fixed is not None and kind not in spec.broadcast else sizes or kind_sizes):
                        cases.append(Case("broadcast", backend, mode, kind, size, ranks))
            if "pingpong" in scenarios and (kinds is None or "buffer" in kinds):
                for size in sizes or spec.pingpong:
                    cases.append(Case("pingpong", backend, mode, "buffer", size, ranks))
            # a channel whose native values are views of one slot cannot keep a window of them
            if "stream" in scenarios and is_channel(backend) and mode in spec.stream_modes \
                    and (kinds is None or "buffer" in kinds) \
                    and not (mode == "native" and _backend_flag(backend, "native_views_until_next_write")):
                for size in sizes or spec.stream:
                    cases.append(Case("stream", backend, mode, "buffer", size, ranks))
            if "granularity" in scenarios and mode in spec.granularity_modes and (kinds is None or "tiny" in kinds):
                for work in spec.granularity:
                    cases.append(Case("granularity", backend, mode, "tiny", 64, ranks, work))
    if only:
        cases = [c for c in cases if any(fnmatch.fnmatchcase(c.label, pat) or pat in c.label for pat in only)]
    order = {s: i for i, s in enumerate(SCENARIOS)}
    known = {name: i for i, name in enumerate(backend_names())}
    return sorted(cases, key=lambda c: (c.phase != "mpi", order[c.scenario], c.payload_kind, c.size, c.work,
                                        known.get(c.backend, len(known)), c.mode))
