"""The backend protocol and the registry every backend module adds itself to.

One cohesive thing: the backend protocol and its registry, the one import path a backend module
needs (docs/extending.md).

A backend moves one object from a writer (rank ``root``) to every other rank of a group: a
**store** (``delivery = "store"``) is written once and read by every reader (``read()`` waits for
a value newer than the last one read); a **channel** (``delivery = "channel"``) delivers one
message per reader per write. Two modes: ``bytes`` (pickle, move bytes, unpickle) and ``native``
(the backend's best path: buffers, pickle-5 out-of-band, zero-copy views). The built-ins are
entry points of ``pytest_ipcbench.backends``, as another distribution declares its own; a
conftest.py adds one with :func:`register_backend`. Life cycle, collective on every rank::

    with BackendSpec("shm", "bytes").open(group) as backend:   # setup(): root creates, bcasts names
        if group.rank == backend.root:
            backend.write(obj)
        else:
            got = backend.read()
"""

from __future__ import annotations

import pickle
import warnings
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar, Literal, get_args

from ..core import names
from ..core.errors import IpcbenchError
from ..core.names import check_patterns
from ..core.registry import ExtensionError, Registry

# the wait strategies live in core (the environment record reads them too); importable from here too
from ..core.wait import (  # noqa: F401
    WAIT_ENV,
    WAITS,
    Backoff,
    Spin,
    default_wait,
    pacer,
    parse_wait,
    resolve_wait,
    restore_wait_state,
    set_default_wait,
    wait_state,
)

if TYPE_CHECKING:
    from ..core.group import Group

MODES = ("bytes", "native")
#: how a backend delivers: a store is written once and read by every reader, a channel carries one
#: message per reader (the module docstring); not to be confused with a payload's kind
Delivery = Literal["store", "channel"]
DELIVERIES: tuple[str, ...] = get_args(Delivery)
DEFAULT_READ_TIMEOUT = 120.0


class BackendUnavailable(IpcbenchError, RuntimeError):
    """The backend cannot run here (missing package, not under MPI, ...); the text says why."""


class PayloadError(IpcbenchError, ValueError):
    """The object cannot be sent by this backend (unpicklable, too large, ...)."""


class ArrayDescriptions:
    """The pickled ``(dtype, shape)`` of plain arrays, cached per dtype and shape: a writer that
    sends arrays of one shape pickles their description once (the stores send it as a head)."""

    LIMIT = 64  # distinct shapes kept before the cache starts over

    def __init__(self) -> None:
        self._by_key: dict[tuple[str, tuple[int, ...]], bytes] = {}

    def of(self, arr: Any) -> bytes:
        key = (arr.dtype.str, arr.shape)
        desc = self._by_key.get(key)
        if desc is None:
            if len(self._by_key) > self.LIMIT:
                self._by_key.clear()
            desc = self._by_key[key] = pickle.dumps((arr.dtype, arr.shape), protocol=5)
        return desc


def dumps(obj: Any) -> bytes:
    """Serialize for bytes mode; an unpicklable object raises PayloadError on the caller."""
    try:
        return pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)
    except Exception as exc:
        raise PayloadError(f"cannot pickle {type(obj).__name__}: {exc}") from exc


def loads(data: Any) -> Any:
    return pickle.loads(data)


def dumps_oob(obj: Any) -> tuple[bytes, list[pickle.PickleBuffer]]:
    """Pickle protocol 5 with out-of-band buffers: (header, raw buffers) for native modes."""
    buffers: list[pickle.PickleBuffer] = []
    try:
        head = pickle.dumps(obj, protocol=5, buffer_callback=buffers.append)
    except Exception as exc:
        raise PayloadError(f"cannot pickle {type(obj).__name__}: {exc}") from exc
    return head, buffers


def loads_oob(head: Any, buffers: list[Any]) -> Any:
    return pickle.loads(head, buffers=buffers)


class Backend(ABC):
    """One backend bound to a group; see the module docstring for the protocol."""

    name: ClassVar[str]
    delivery: ClassVar[Delivery]
    needs_mpi: ClassVar[bool] = False
    # its resources live on one host (files, shared memory, ipc sockets); None: unless it needs MPI.
    # Across nodes a node-local store (or MPI channel) runs once per node, fed over MPI
    # (backends/hierarchy.py); another node-local channel is skipped.
    node_local: ClassVar[bool | None] = None
    # connects only processes started by one parent (a LocalWorld), never mpiexec ranks (mp-queue)
    local_only: ClassVar[bool] = False
    #: the payload is held in /dev/shm (a POSIX segment, an MPI shared window): a size is admitted
    #: against /dev/shm's free space too (core.units.admit_sizes)
    payload_in_shm: ClassVar[bool] = False
    #: where ``ipcbench run`` times a backend that needs neither: "local" (plain worker processes,
    #: no MPI runtime in them, the default) or "mpi" (among the ranks of its mpiexec job). Built-ins
    #: that have always been measured among MPI ranks (shm, lmdb, zmq) say "mpi"; see process_model()
    run_in: ClassVar[str | None] = None
    #: a classmethod ``before_ranks(cls, size) -> objects`` for transports that must exist before the
    #: ranks do (multiprocessing pipes and queues, faster-fifo queues: inherited at spawn, never sent
    #: later). It runs in the parent before a local world starts its ``size - 1`` workers; every rank
    #: finds its result as ``self.inherited``. Such a backend runs in local workers only.
    before_ranks: ClassVar[Callable[[int], Any] | None] = None
    #: a classmethod ``after_ranks(cls, made)``: releases what ``before_ranks`` made (a segment, a
    #: folder), in the parent, once the world's workers stopped (the session's end, before its leak
    #: check; a restart after a failure; the end of ``ipcbench run``'s local phase)
    after_ranks: ClassVar[Callable[[Any], None] | None] = None

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if cls.before_ranks is not None and isinstance(cls.__dict__.get("name"), str):
            from ..core.local import register_before_ranks

            register_before_ranks(cls.name, cls.before_ranks, cls.after_ranks)

    @property
    def inherited(self) -> Any:
        """What this backend's ``before_ranks`` made in the parent before the ranks started."""
        from ..core.local import inherited

        return inherited(self.name)
    # OS resources this backend creates under names of its own (not through core/names.py, whose
    # ipcb-<pid>-* names are found anyway): glob patterns with {pid} (the owner's pid, in the last
    # path component) and optionally {tmp} / {shm}, e.g. "{tmp}/myfifo-{pid}-*". The session-end
    # leak check and `ipcbench clean` look for them.
    resources: ClassVar[tuple[str, ...]] = ()
    # why read() cannot give up after `timeout` (e.g. it waits inside an MPI collective); empty if it can
    no_read_timeout: ClassVar[str] = ""
    #: counters (core/counters.COUNTERS names) that this backend's own background threads make depend on
    #: timing, so that two runs of the same code count them differently even where each run's repeats
    #: agree (a library's I/O thread that batches writes and signals its caller only when asleep):
    #: recorded with the counts and never compared across runs, like comparison.counters.TIMING_COUNTERS
    timing_counters: ClassVar[frozenset[str]] = frozenset()
    #: the name of this backend's reference: the plainest use of the same mechanism, timed
    #: against it by ``ipcbench selfcheck`` and the reference tests (backends/references.py)
    reference: ClassVar[str | None] = None
    #: True for references and other harness-internal backends: usable by name, never offered to users
    internal: ClassVar[bool] = False
    #: the largest message (payload bytes) this backend takes, or None for no limit of its own (e.g. a
    #: transport with a fixed slot): ``ipcbench selfcheck`` and ``ipcbench run`` skip larger cases
    #: with this reason instead of failing them (issue 39)
    max_message_bytes: ClassVar[int | None] = None
    #: True when a native value read is a view that the next write overwrites (mpi-shm-win's
    #: windows): the stream scenario, which keeps a window of values, runs it in bytes mode only.
    #: Not a ClassVar: a HierarchicalStore takes its inner backend's.
    native_views_until_next_write: bool = False

    @classmethod
    def process_model(cls) -> str:
        """``"mpi"`` or ``"local"``: the processes ``ipcbench run`` times this backend in. A backend
        that needs MPI runs among MPI ranks, a ``local_only`` one in local workers, any other where
        its ``run_in`` says (default local: an MPI runtime in the process disturbs what it does not use)."""
        if cls.needs_mpi:
            return "mpi"
        if cls.local_only or cls.before_ranks is not None:
            return "local"
        if cls.run_in not in (None, "mpi", "local"):
            raise ExtensionError(f"backend {cls.name}: run_in must be 'mpi' or 'local', not {cls.run_in!r}")
        return cls.run_in or "local"

    def __init__(self, group: Group, mode: str = "bytes", root: int = 0,
                 timeout: float = DEFAULT_READ_TIMEOUT, wait: str | None = None) -> None:
        if mode not in MODES:
            raise ValueError(f"unknown mode {mode!r} for backend {self.name}; choose bytes or native")
        if not 0 <= root < group.size:
            raise ValueError(f"root {root} is not a rank of a group of {group.size}")
        self.group = group
        self.mode = mode
        self.root = root
        self.timeout = timeout
        #: the resolved wait strategy, ``block`` or ``backoff`` (see WAITS)
        self.wait = resolve_wait(wait, group.size)

    def pacer(self) -> Spin | Backoff:
        """Pacing for one polling wait of a reader, by this backend's wait strategy: one object per
        backend, restarted for each wait (no allocation per message)."""
        pace = self.__dict__.get("_pace")
        if pace is None or pace.strategy != self.wait or pace.timeout != self.timeout:
            pace = self._pace = pacer(self.wait, self.timeout)
            return pace
        return pace.restart()

    @classmethod
    def unavailable(cls, group: Group | None = None) -> str | None:
        """Why this backend cannot run with ``group`` (None if it can)."""
        if cls.needs_mpi and group is not None and not group.is_mpi:
            return f"{cls.name} needs MPI: run under mpiexec with --with-mpi"
        if cls.before_ranks is not None and group is not None:
            if group.is_mpi:
                return (f"{cls.name} needs objects made before the ranks start (before_ranks), which mpiexec "
                        "ranks cannot inherit: it runs in local worker processes (plain pytest)")
        if (cls.delivery == "channel" and cls.is_node_local() and not cls.needs_mpi and group is not None
                and getattr(group, "nodes", 1) > 1):
            from ..core.nodes import layout_of

            return (f"{cls.name} connects ranks of one node only; this group spans {layout_of(group)} "
                    "(a backend that reaches other nodes declares node_local = False)")
        return None

    @classmethod
    def is_node_local(cls) -> bool:
        return (not cls.needs_mpi) if cls.node_local is None else cls.node_local

    @property
    def readers(self) -> list[int]:
        return [r for r in range(self.group.size) if r != self.root]

    def setup(self) -> None:  # noqa: B027 (an optional hook: not every backend has resources)
        """Collective: create (root) or attach (others) the resources."""

    def prepare(self, objs: Sequence[Any]) -> None:  # noqa: B027 (an optional hook)
        """Collective, untimed, optional: the objects the harness's broadcast will send.

        Iteration ``i`` writes ``objs[i % len(objs)]`` (on the readers, ``objs`` are the expected
        values, built locally). For a backend that must expose the writer's memory beforehand,
        e.g. an RMA window per object (the MPI methods); most backends ignore it.
        """

    @abstractmethod
    def write(self, obj: Any) -> None:
        """On the root: publish ``obj`` to every reader."""

    @abstractmethod
    def read(self) -> Any:
        """On a reader: the next object written (waits up to ``timeout``)."""

    def open_collectively(self, create: Callable[[], Any], attach: Callable[[Any], None], what: str) -> Any:
        """The setup every backend shares: the root creates, the others attach, all agree.

        ``create()`` runs on the root and returns what the readers need (a path, a name); it is
        broadcast, then ``attach(info)`` runs on every rank (the root too, for handshakes). A
        failure anywhere closes this rank's part and raises on every rank, naming the ranks.
        """
        group = self.group
        info: tuple[str, Any] | None = None
        error: BaseException | None = None
        if group.rank == self.root:
            try:
                info = ("ok", create())
            except Exception as exc:
                error = exc
                info = ("error", f"{type(exc).__name__}: {exc}")
                self.close()
        info = group.bcast(info, root=self.root)
        if error is not None:
            raise error
        if info[0] != "ok":
            raise RuntimeError(f"{self.name}: the writer (rank {self.root}) could not {what}: {info[1]}")
        status = None
        try:
            attach(info[1])
        except Exception as exc:
            status = f"{type(exc).__name__}: {exc}"
        failed = [(rank, s) for rank, s in enumerate(group.allgather(status)) if s]
        if failed:
            self.close()
            where = "; ".join(f"rank {rank}: {s}" for rank, s in failed)
            raise RuntimeError(f"{self.name}: setup failed after the writer could {what}: {where}")
        return info[1]

    def close(self) -> None:  # noqa: B027 (an optional hook: not every backend holds anything)
        """Collective: release everything this rank holds; the owner removes OS resources."""

    def timeout_error(self, what: str) -> TimeoutError:
        """The error a reader raises when ``what`` did not happen within ``timeout``."""
        return TimeoutError(
            f"{self.name} ({self.mode} mode): rank {self.group.rank} waited {self.timeout:g} s "
            f"for {what} from the writer (rank {self.root}) and gave up"
        )

    def writer_failed(self, message: str) -> PayloadError:
        """The error a reader raises when the writer announced that it could not send."""
        return PayloadError(
            f"{self.name}: the writer (rank {self.root}) could not send its object: {message}"
        )

    def __enter__(self) -> Backend:
        try:
            self.setup()
        except BaseException:  # Ctrl-C in the middle of a setup too: release what was made
            with names.interrupts_deferred():
                self.close()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        with names.interrupts_deferred():  # a Ctrl-C inside close() waits for its end
            self.close()


def _check_backend(name: str, obj: Any, where: str) -> type[Backend]:
    if not (isinstance(obj, type) and issubclass(obj, Backend)):
        raise ExtensionError(f"backend {name!r} from {where}: expected a subclass of Backend, got {obj!r}")
    kind = getattr(obj, "kind", None)
    if not hasattr(obj, "delivery") and kind in DELIVERIES:
        # a plugin written before 0.2 said ``kind = "store"``; its file keeps working
        warnings.warn(f"backend {name!r} ({obj.__qualname__}): `kind` is now `delivery` (a store or a channel)",
                      DeprecationWarning, stacklevel=2)
        obj.delivery = kind
    if getattr(obj, "delivery", None) not in DELIVERIES:
        raise ExtensionError(
            f"backend {name!r} ({obj.__qualname__}): delivery must be 'store' or 'channel', "
            f"not {getattr(obj, 'delivery', None)!r}"
        )
    if getattr(obj, "name", name) != name:
        raise ExtensionError(f"backend {name!r} from {where}: its class says name = {obj.name!r}; make them equal")
    if not hasattr(obj, "name"):
        obj.name = name
    try:
        check_patterns(obj.resources)
    except ValueError as exc:
        raise ExtensionError(f"backend {name!r} ({obj.__qualname__}).resources: {exc}") from None
    return obj


BACKENDS: Registry[type[Backend]] = Registry(
    "backend", "pytest_ipcbench.backends", _check_backend, BackendUnavailable, owner=__name__
)


def backend_names() -> tuple[str, ...]:
    """Every backend known now: entry points (the built-ins first) and run-time registrations."""
    return BACKENDS.names()


def register_backend(cls: type[Backend], name: str | None = None) -> type[Backend]:
    """Make a Backend subclass known (from a conftest.py); usable as a class decorator.

    The class must be at the top level of a module: spawned local workers import it from there.
    Another distribution declares an entry point instead (``[project.entry-points."pytest_ipcbench.backends"]``).
    """
    name = name or getattr(cls, "name", None)
    if not name:
        raise ExtensionError(f"register_backend({cls.__qualname__}): give the class a name (name = \"...\")")
    BACKENDS.register(name, cls)
    return cls


register = register_backend  # the class decorator's older name


def get_backend(name: str) -> type[Backend]:
    """The backend class for ``name``: ValueError if unknown (naming the known ones),
    BackendUnavailable (with the reason) if its entry point needs a missing package."""
    return BACKENDS.get(name)


def mailboxes_of(group: Any) -> Sequence[Any]:
    """A local group's queues, one per rank (:class:`~.core.local.LocalGroup`): not part of :class:`Group`, so the
    backends that use them (mp-queue, its reference) refuse the groups without them in ``unavailable()``."""
    return group.mailboxes


def holds_payload_in_shm(backends: str | Sequence[str]) -> bool:
    """Does one of ``backends`` hold its payload in /dev/shm? (unknown or unloadable ones: no)"""
    for name in [backends] if isinstance(backends, str) else backends:
        try:
            if BACKENDS.get(name).payload_in_shm:
                return True
        except (BackendUnavailable, ExtensionError, ValueError):
            continue
    return False


REFERENCE_PREFIX = "ref-"  # the built-in references' names (backends/references.py, loaded with the package)


def declared_resources(load_all: bool = False) -> list[str]:
    """The ``resources`` patterns of the backends loaded so far (or of every one: ``load_all``)."""
    if load_all:
        for name in backend_names():
            try:
                BACKENDS.get(name)
            except (BackendUnavailable, ExtensionError, ValueError):
                continue  # a backend that does not load created nothing here
    found: list[str] = []
    for cls in BACKENDS.loaded().values():
        found.extend(p for p in cls.resources if p not in found)
    return found


def unavailable_reason(name: str, group: Group | None = None) -> str | None:
    """Why backend ``name`` cannot run here, or None."""
    try:
        return get_backend(name).unavailable(group)
    except BackendUnavailable as exc:
        return str(exc)


@dataclass(frozen=True)
class BackendSpec:
    """A picklable choice of backend and mode; ``open(group)`` makes the live backend."""

    name: str
    mode: str = "bytes"
    root: int = 0
    timeout: float = DEFAULT_READ_TIMEOUT
    wait: str | None = None  # auto | block | backoff; None: default_wait() where it is opened

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise ValueError(f"unknown mode {self.mode!r}; choose bytes or native")
        if self.wait is not None:
            parse_wait(self.wait, f"backend {self.name}")
        BACKENDS.check_name(self.name)

    @property
    def id(self) -> str:
        return f"{self.name}-{self.mode}"

    @property
    def cls(self) -> type[Backend]:
        return get_backend(self.name)

    def open(self, group: Group) -> Backend:
        """Not yet set up: use as a context manager (``with spec.open(group) as b``)."""
        cls = self.cls
        reason = cls.unavailable(group)
        if reason:
            raise BackendUnavailable(reason)
        if _across_nodes is not None:  # one store per node, fed over MPI (hierarchy.py)
            wrapped = _across_nodes(cls, group, self.mode, self.root, self.timeout, self.wait)
            if wrapped is not None:
                return wrapped
        return cls(group, self.mode, self.root, self.timeout, wait=self.wait)


#: How a node-local backend opens on a group that spans nodes, or None where it opens as itself.
#: hierarchy.py sets it when the backends package loads: it subclasses Backend, so this module
#: cannot import it without a cycle.
_across_nodes: Callable[[type[Backend], Group, str, int, float, str | None], Backend | None] | None = None


def set_across_nodes(opener: Callable[[type[Backend], Group, str, int, float, str | None], Backend | None]) -> None:
    global _across_nodes
    _across_nodes = opener

