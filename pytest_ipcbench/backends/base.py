"""The backend protocol and the registry every backend module adds itself to.

A backend moves one object from a writer (rank ``root``) to every other rank of a group:

* a **store** (``kind = "store"``, e.g. LMDB, shared memory) is written once and read by every
  reader; ``read()`` waits until a value newer than the last one read is there;
* a **channel** (``kind = "channel"``, e.g. ZeroMQ, mp.Queue, MPI) delivers one message per
  reader per round; ``write()`` sends to every reader.

Two modes: ``bytes`` (seed 000's fair protocol: pickle at write, move bytes, unpickle at read)
and ``native`` (the backend's best path: buffers, pickle-5 out-of-band, zero-copy views).

Backends are extensions: the built-in ones are entry points of the group
``pytest_ipcbench.backends`` (name -> ``module:BackendClass``) in our pyproject.toml, exactly as
another distribution declares its own; a conftest.py adds one with :func:`register_backend`.
Nothing checks names against a fixed list: :func:`backend_names` is whatever is known now.

Life cycle, collective on every rank of the group::

    with BackendSpec("shm", "bytes").open(group) as backend:   # setup(): root creates, bcasts names
        if group.rank == backend.root:
            backend.write(obj)
        else:
            got = backend.read()
"""

from __future__ import annotations

import os
import pickle
import time
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, ClassVar, Sequence

from ..core import names
from ..core.names import check_patterns
from ..core.registry import ExtensionError, Registry

if TYPE_CHECKING:
    from ..core.group import Group

MODES = ("bytes", "native")
DEFAULT_READ_TIMEOUT = 120.0


class BackendUnavailable(RuntimeError):
    """The backend cannot run here (missing package, not under MPI, ...); the text says why."""


class PayloadError(ValueError):
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


# ----------------------------------------------------------------------------- wait strategy

#: How a reader waits for the writer (METHOD rule 18). ``block``: the way its mechanism waits
#: best -- a blocking call (zmq, mp.Queue), or polling without sleeping (MPI Test, the shm
#: version word, an LMDB snapshot); right when every rank has a core. ``backoff``: spin briefly,
#: yield, then sleep in growing steps; right when ranks outnumber cores (a polling reader would
#: take the writer's core). ``auto``: ``block`` if the backend's ranks fit on the cores, else
#: ``backoff``.
WAITS = ("auto", "block", "backoff")
WAIT_ENV = "IPCBENCH_WAIT"
_default_wait: str | None = None


def parse_wait(value: str, source: str = "wait") -> str:
    """A valid wait strategy; ValueError naming ``source`` otherwise."""
    value = str(value).strip().lower()
    if value not in WAITS:
        raise ValueError(f"{source}: unknown wait strategy {value!r}; choose one of {', '.join(WAITS)}")
    return value


def default_wait() -> str:
    """The wait strategy asked for in this process: set_default_wait(), else $IPCBENCH_WAIT, else auto."""
    if _default_wait is not None:
        return _default_wait
    env = os.environ.get(WAIT_ENV)
    return parse_wait(env, f"environment variable {WAIT_ENV}") if env else "auto"


def set_default_wait(value: str | None) -> None:
    """Force the wait strategy of every backend made from now on (None: back to $IPCBENCH_WAIT).

    Also exported as $IPCBENCH_WAIT, so worker processes started later (LocalWorld, mpiexec)
    follow it.
    """
    global _default_wait
    if value is None:
        _default_wait = None
        os.environ.pop(WAIT_ENV, None)
        return
    _default_wait = parse_wait(value)
    os.environ[WAIT_ENV] = _default_wait


def wait_state() -> tuple[str | None, str | None]:
    """What set_default_wait() changes, to put back with restore_wait_state()."""
    return (_default_wait, os.environ.get(WAIT_ENV))


def restore_wait_state(state: tuple[str | None, str | None]) -> None:
    global _default_wait
    _default_wait, env = state
    if env is None:
        os.environ.pop(WAIT_ENV, None)
    else:
        os.environ[WAIT_ENV] = env


def resolve_wait(wait: str | None, ranks: int, cores: int | None = None) -> str:
    """``block`` or ``backoff`` for a backend of ``ranks`` ranks (``auto``/None: ranks vs cores)."""
    wait = parse_wait(wait) if wait else default_wait()
    if wait != "auto":
        return wait
    if cores is None:
        from ..core.envinfo import cores as _cores

        cores = _cores()
    return "block" if ranks <= cores else "backoff"


class Spin:
    """Pacing for a reader that polls with a core of its own (wait strategy ``block``).

    Polls back to back for ``SPIN`` seconds, then with ``sched_yield`` between polls (free when
    nothing else wants the core, polite when something does) up to ``YIELD`` seconds, then
    sleeps ``SLEEP`` between polls: never the growing sleeps of :class:`Backoff`, so a reader
    wakes within a poll of the writer while it is fast, and within ~0.1 ms while the writer
    computes for long. ``wait()`` returns False once ``timeout`` seconds have passed.
    """

    SPIN = 20e-6
    YIELD = 2e-3
    SLEEP = 20e-6
    CHECK = 16  # look at the clock every this many polls

    def __init__(self, timeout: float) -> None:
        self.timeout = timeout
        self.start = time.monotonic()
        self.deadline = self.start + timeout
        self.polls = 0
        self._phase = 0  # 0 spin, 1 yield, 2 sleep

    @property
    def waited(self) -> float:
        return time.monotonic() - self.start

    def wait(self) -> bool:
        self.polls += 1
        if self.polls % self.CHECK == 0 or self._phase == 2:
            now = time.monotonic()
            if now >= self.deadline:
                return False
            waited = now - self.start
            self._phase = 0 if waited < self.SPIN else 1 if waited < self.YIELD else 2
        if self._phase == 1:
            os.sched_yield()
        elif self._phase == 2:
            time.sleep(self.SLEEP)
        return True


def pacer(wait: str, timeout: float) -> "Spin | Backoff":
    """A fresh pacing object for one wait under a resolved strategy (``block`` or ``backoff``)."""
    return Spin(timeout) if wait == "block" else Backoff(timeout)


class Backoff:
    """Pacing for a reader that polls for a new value: spin briefly, then yield, then sleep.

    Never a pure busy loop: ranks are often oversubscribed (``mpiexec -n 4`` on 2 cores), where a
    spinning reader would steal the writer's core. ``wait()`` returns False once ``timeout``
    seconds have passed since the Backoff was made.
    """

    SPINS = 32  # polls without a pause (a value that is already there costs nothing more)
    YIELDS = 256  # then polls separated by sched_yield (lets another runnable rank go first)
    MIN_SLEEP = 20e-6
    MAX_SLEEP = 2e-3

    def __init__(self, timeout: float) -> None:
        self.timeout = timeout
        self.start = time.monotonic()
        self.deadline = self.start + timeout
        self.polls = 0
        self._sleep = self.MIN_SLEEP

    @property
    def waited(self) -> float:
        return time.monotonic() - self.start

    def wait(self) -> bool:
        """Pause before the next poll; False when the time is up."""
        self.polls += 1
        if self.polls <= self.SPINS:
            return True
        now = time.monotonic()
        if now >= self.deadline:
            return False
        if self.polls <= self.SPINS + self.YIELDS:
            os.sched_yield()
            return True
        time.sleep(min(self._sleep, max(0.0, self.deadline - now)))
        self._sleep = min(self._sleep * 2, self.MAX_SLEEP)
        return True


class Backend(ABC):
    """One backend bound to a group; see the module docstring for the protocol."""

    name: ClassVar[str]
    kind: ClassVar[str]  # "store" or "channel"
    needs_mpi: ClassVar[bool] = False
    # its resources live on one host (files, shared memory, ipc sockets); None: unless it needs MPI.
    # Across nodes a node-local store (or MPI channel) runs once per node, fed over MPI
    # (backends/hierarchy.py); another node-local channel is skipped.
    node_local: ClassVar[bool | None] = None
    # connects only processes started by one parent (a LocalWorld), never mpiexec ranks (mp-queue)
    local_only: ClassVar[bool] = False
    #: where ``ipcbench run`` times a backend that needs neither: "local" (plain worker processes,
    #: no MPI runtime in them, the default) or "mpi" (among the ranks of its mpiexec job). Built-ins
    #: that have always been measured among MPI ranks (shm, lmdb, zmq) say "mpi"; see process_model()
    run_in: ClassVar[str | None] = None
    #: a classmethod ``before_ranks(cls, size) -> objects`` for transports that must exist before the
    #: ranks do (multiprocessing pipes and queues, faster-fifo queues: inherited at spawn, never sent
    #: later). It runs in the parent before a local world starts its ``size - 1`` workers; every rank
    #: finds its result as ``self.inherited``. Such a backend runs in local workers only.
    before_ranks: ClassVar[Callable[[int], Any] | None] = None

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if cls.before_ranks is not None and isinstance(cls.__dict__.get("name"), str):
            from ..core.group import register_before_ranks

            register_before_ranks(cls.name, cls.before_ranks)

    @property
    def inherited(self) -> Any:
        """What this backend's ``before_ranks`` made in the parent before the ranks started."""
        from ..core.group import inherited

        return inherited(self.name)
    # OS resources this backend creates under names of its own (not through core/names.py, whose
    # ipcb-<pid>-* names are found anyway): glob patterns with {pid} (the owner's pid, in the last
    # path component) and optionally {tmp} / {shm}, e.g. "{tmp}/myfifo-{pid}-*". The session-end
    # leak check and `ipcbench clean` look for them.
    resources: ClassVar[tuple[str, ...]] = ()
    # why read() cannot give up after `timeout` (e.g. it waits inside an MPI collective); empty if it can
    no_read_timeout: ClassVar[str] = ""
    #: the name of this backend's reference: the plainest use of the same mechanism, timed
    #: against it by ``ipcbench selfcheck`` and the reference tests (harness/references.py)
    reference: ClassVar[str | None] = None
    #: True for references and other harness-internal backends: usable by name, never offered to users
    internal: ClassVar[bool] = False

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

    def __init__(self, group: "Group", mode: str = "bytes", root: int = 0,
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

    def pacer(self) -> "Spin | Backoff":
        """Pacing for one polling wait of a reader, by this backend's wait strategy."""
        return pacer(self.wait, self.timeout)

    @classmethod
    def unavailable(cls, group: "Group | None" = None) -> str | None:
        """Why this backend cannot run with ``group`` (None if it can)."""
        if cls.needs_mpi and group is not None and not group.is_mpi:
            return f"{cls.name} needs MPI: run under mpiexec with --with-mpi"
        if cls.before_ranks is not None and group is not None:
            if group.is_mpi:
                return (f"{cls.name} needs objects made before the ranks start (before_ranks), which mpiexec "
                        "ranks cannot inherit: it runs in local worker processes (plain pytest)")
        if cls.kind == "channel" and cls.is_node_local() and not cls.needs_mpi and group is not None and getattr(group, "nodes", 1) > 1:
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

    def setup(self) -> None:
        """Collective: create (root) or attach (others) the resources."""

    def prepare(self, objs: Sequence[Any]) -> None:
        """Collective, untimed, optional: the objects the harness's broadcast will send.

        Iteration ``i`` writes ``objs[i % len(objs)]`` (on the readers, ``objs`` are the expected
        values, built locally). For a backend that must expose the writer's memory beforehand,
        e.g. an RMA window per object (seed 004's methods); most backends ignore it.
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

    def close(self) -> None:
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

    def __enter__(self) -> "Backend":
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
    if getattr(obj, "kind", None) not in ("store", "channel"):
        raise ExtensionError(
            f"backend {name!r} ({obj.__qualname__}): kind must be 'store' or 'channel', not {getattr(obj, 'kind', None)!r}"
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
    _load_references(name)
    return BACKENDS.get(name)


REFERENCE_PREFIX = "ref-"  # the built-in references' names: ref-<backend>[-variant]


def _load_references(name: str) -> None:
    """The built-in references (harness/references.py) register when first asked for by name."""
    if name.startswith(REFERENCE_PREFIX) and name not in BACKENDS:
        import importlib

        importlib.import_module("pytest_ipcbench.harness.references")


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


def unavailable_reason(name: str, group: "Group | None" = None) -> str | None:
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
        _load_references(self.name)
        BACKENDS.check_name(self.name)

    @property
    def id(self) -> str:
        return f"{self.name}-{self.mode}"

    @property
    def cls(self) -> type[Backend]:
        return get_backend(self.name)

    def open(self, group: "Group") -> Backend:
        """Not yet set up: use as a context manager (``with spec.open(group) as b``)."""
        cls = self.cls
        reason = cls.unavailable(group)
        if reason:
            raise BackendUnavailable(reason)
        from .hierarchy import HierarchicalStore, needs_hierarchy

        if needs_hierarchy(cls, group):  # one store per node, fed over MPI
            return HierarchicalStore(cls, group, self.mode, self.root, self.timeout, wait=self.wait)
        return cls(group, self.mode, self.root, self.timeout, wait=self.wait)

