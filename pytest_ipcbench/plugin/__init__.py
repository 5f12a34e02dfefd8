"""The pytest plugin (entry point ``ipcbench``): options, markers, fixtures and MPI hygiene hooks.

Hooks and fixtures only; the logic lives in :mod:`.session`, :mod:`.hygiene` (the hooks under
``--with-mpi``), :mod:`.verdict` and the watchdog. Tests that use the ipcbench fixtures run with
the same code over local workers under plain ``pytest`` and over MPI under ``mpiexec -n N python
-m pytest --with-mpi`` (marked ``mpi`` then). A test without the ``mpi`` marker runs on every
rank, or with ``--ipc-unmarked rank0`` on rank 0 while the others wait for its verdict.
"""

from __future__ import annotations

import os
import traceback
import types
import weakref
from pathlib import Path
from typing import Any

import pytest

from ..backends.base import BACKENDS, BackendSpec, backend_names, restore_wait_state, set_default_wait, wait_state
from ..core.group import Group
from ..core.local import LocalGroup
from ..core.payloads import PayloadSpec
from .hygiene import MpiHygiene, item_timeout, rank_temproot, refuse_ranks_without_mpi, timeout_hint
from .session import SESSION_KEY, IpcSession, backend_fixture_name, backend_fixtures, get_session
from .settings import MARKER_KEYS, add_pytest_options, describe, marker_kwargs, resolve_settings

# fixtures and hooks written in their own modules (one concern each), registered with this plugin
pytest_plugins = [
    "pytest_ipcbench.plugin.fixtures.shared",
    "pytest_ipcbench.plugin.fixtures.bench",
    "pytest_ipcbench.plugin.fixtures.mpi_methods",
    "pytest_ipcbench.plugin.fixtures.conformance",
    "pytest_ipcbench.plugin.terminate",  # SIGTERM and SIGHUP end a plain run like a Ctrl-C
]

IPC_FIXTURES = frozenset({"ipc_group", "ipc_ranks", "ipc_backend", "ipc_payload", "ipc_mode"})
MARKER_HELP = (f"ipcbench({', '.join(k + '=' for k in MARKER_KEYS)}): restrict (backends, modes, payloads) or set "
               "(sizes, ranks, timeout in s) what this test runs over, each checked as its --ipc-* option")


# ----------------------------------------------------------------------------------- options


_WAIT_BEFORE_KEY = pytest.StashKey[tuple]()
_REPORT_LOCK_KEY = pytest.StashKey[Any]()


def pytest_addoption(parser: pytest.Parser) -> None:
    add_pytest_options(parser)  # derived from settings.PYTEST_OPTIONS


# --------------------------------------------------------------------------------- configure


def pytest_addhooks(pluginmanager: pytest.PytestPluginManager) -> None:
    from . import hookspec

    pluginmanager.add_hookspecs(hookspec)


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", MARKER_HELP)
    comm = None
    if refuse_ranks_without_mpi(bool(config.getoption("with_mpi", default=False)
                                     or config.getoption("only_mpi", default=False))):
        try:
            from mpi4py import MPI
        except ImportError as exc:
            raise pytest.UsageError("--with-mpi: the ipcbench plugin needs mpi4py "
                                    "(pip install 'pytest-ipcbench[mpi]')") from exc
        comm = MPI.COMM_WORLD
    rank = comm.Get_rank() if comm is not None else 0
    if comm is not None:
        # every rank runs its own pytest: sharing /tmp/pytest-of-<user> they race on its
        # pytest-current link at session end (FileNotFoundError); each other rank gets a root of its own
        # (inside pytest's own per-user folder, so nothing new appears in the temp folder)
        refused = ""
        if rank > 0 and "PYTEST_DEBUG_TEMPROOT" not in os.environ:
            try:
                os.environ["PYTEST_DEBUG_TEMPROOT"] = str(rank_temproot(rank))
            except pytest.UsageError as exc:
                refused = str(exc)
        # every rank learns it and stops with a usage error (rank 0 says it): an MPI_Abort here lost
        # the rank's message under load, Hydra ending the job before it forwarded the rank's output
        refused = next((r for r in comm.allgather(refused) if r), "")
        if refused:
            raise pytest.UsageError(*([refused] if rank == 0 or _all_ranks_flag(config) else []))
    try:
        settings = resolve_settings(config, comm.Get_size() if comm is not None else None)
    except pytest.UsageError as exc:
        if rank > 0 and not _all_ranks_flag(config):
            # every rank has the same error: rank 0 prints it (pytest prints a UsageError's args)
            raise pytest.UsageError() from exc
        raise
    _admit_sizes(config, settings.sizes, settings.ranks, settings.sources.get("sizes", "default"), comm, rank,
                 settings.backends)
    if settings.report_dir is not None:
        _lock_report_dir(config, settings.report_dir, comm, rank)
    # every backend made from now on (here and in workers started later) waits this way;
    # pytest_unconfigure puts the process's earlier choice back (pytester runs in-process)
    config.stash[_WAIT_BEFORE_KEY] = wait_state()
    if settings.sources.get("wait", "default") != "default":
        set_default_wait(settings.wait)
    session = IpcSession(settings, comm, config)
    config.stash[SESSION_KEY] = session
    if comm is not None:
        quiet = rank > 0 and not settings.all_ranks_output
        config.pluginmanager.register(MpiHygiene(config, session, comm, quiet), MpiHygiene.NAME)


def _admit_sizes(config: pytest.Config, sizes: Any, ranks: Any, source: str, comm: Any, rank: int,
                 backends: Any = ()) -> None:
    """Refuse, before any test, sizes that do not fit in the memory available with every rank's
    copies (core.units.admit_sizes); rank 0 decides, every rank gets its verdict."""
    from ..backends import holds_payload_in_shm
    from ..core.units import SizeTooLarge, admit_sizes

    error = ""
    if rank == 0:
        try:
            admit_sizes(sizes, ranks, f"{source}: size", in_shm=holds_payload_in_shm(backends))
        except SizeTooLarge as exc:
            error = str(exc)
    _refuse_on_every_rank(config, comm, rank, error)


def _lock_report_dir(config: pytest.Config, folder: Path, comm: Any, rank: int) -> None:
    """``--ipc-report``'s folder checked and locked by rank 0 for the whole session, as ``ipcbench
    run`` locks its ``--out``: a second writer (a run, a report, another session) is refused at
    start instead of mixing or losing results at the end. Every rank gets the verdict."""
    from ..core.outdir import FolderLock, OutputFolderError, check_folder

    error = ""
    if rank == 0:
        try:
            checked = check_folder(folder)
        except OutputFolderError:
            checked = None  # a file in the way, another user's folder: the session's end says so
        try:
            if checked is not None:
                config.stash[_REPORT_LOCK_KEY] = FolderLock(checked)
        except OutputFolderError as exc:
            error = str(exc)
    _refuse_on_every_rank(config, comm, rank, error, "--ipc-report: ")


def _refuse_on_every_rank(config: pytest.Config, comm: Any, rank: int, error: str, prefix: str = "") -> None:
    """Rank 0's verdict on every rank: a usage error everywhere (its text printed once), or none."""
    if comm is not None:
        error = comm.bcast(error, root=0)
    if error:
        if rank > 0 and not _all_ranks_flag(config):
            raise pytest.UsageError()
        raise pytest.UsageError(prefix + error)


def _all_ranks_flag(config: pytest.Config) -> bool:
    return bool(config.getoption("ipc_all_ranks_output", default=None))


def pytest_unconfigure(config: pytest.Config) -> None:
    lock = config.stash.get(_REPORT_LOCK_KEY, None)
    if lock is not None:
        lock.release()
    before = config.stash.get(_WAIT_BEFORE_KEY, None)
    if before is not None:
        restore_wait_state(before)


def pytest_report_header(config: pytest.Config) -> list[str]:
    session = get_session(config)
    lines = [describe(session.settings)]
    if session.mpi:
        quiet = "every rank prints" if session.settings.all_ranks_output else "only rank 0 prints"
        unmarked = "rank 0 only" if session.settings.unmarked == "rank0" else "every rank"
        lines.append(f"ipcbench: MPI world of {session.world_size} ranks ({quiet}; tests without the mpi marker "
                     f"run on {unmarked})")
    return lines


# -------------------------------------------------------------------------------- collection


def _admit_marker(session: IpcSession, marker: dict[str, Any], where: str) -> None:
    """A marker's sizes pass the same admission as the options' (core.units.admit_sizes), with the
    marker's ranks (else the session's) and backends: a usage error at collection, naming the test."""
    from ..backends import holds_payload_in_shm
    from ..core.units import admit_sizes

    if "sizes" not in marker:
        return
    s = session.settings
    backends = [b for b in s.backends if b in marker.get("backends", s.backends)]
    admit_sizes(marker["sizes"], marker.get("ranks", s.ranks), f"{where}: @pytest.mark.ipcbench(sizes=...): size",
                in_shm=holds_payload_in_shm(backends))


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    session = get_session(metafunc.config)
    marker = marker_kwargs(metafunc.definition.get_closest_marker("ipcbench"), metafunc.definition.nodeid)
    _admit_marker(session, marker, metafunc.definition.nodeid)
    matrix = session.matrix(metafunc.fixturenames, marker)
    if matrix is not None:
        metafunc.parametrize(matrix.argnames, matrix.values, ids=matrix.ids, indirect=True)


def is_ipc_test(item: pytest.Item) -> bool:
    """A test that uses an ipcbench fixture or carries the ipcbench marker."""
    names = set(getattr(item, "fixturenames", ()))
    return (
        bool(IPC_FIXTURES.intersection(names) or names.intersection(backend_fixtures()))
        or item.get_closest_marker("ipcbench") is not None
    )


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    # Before -m is applied: under MPI our tests are MPI tests (so `-m mpi` picks them); without
    # --with-mpi they are not, or pytest-mpi would skip them, and they run over local processes.
    if get_session(config).mpi:
        for item in items:
            if is_ipc_test(item) and item.get_closest_marker("mpi") is None:
                item.add_marker(pytest.mark.mpi)


# ---------------------------------------------------------------------------------- fixtures


@pytest.fixture
def ipc_ranks(request: pytest.FixtureRequest) -> int:
    """The number of ranks of this test's group (parametrized by --ipc-ranks)."""
    return int(getattr(request, "param", None) or get_session(request.config).settings.ranks[0])


@pytest.fixture
def ipc_mode(request: pytest.FixtureRequest) -> str:
    """``bytes`` or ``native`` (parametrized by --ipc-modes)."""
    return str(getattr(request, "param", None) or get_session(request.config).settings.modes[0])


@pytest.fixture
def ipc_payload(request: pytest.FixtureRequest) -> PayloadSpec:
    """What to send: a PayloadSpec over --ipc-payloads x --ipc-sizes (``tiny`` once)."""
    spec = getattr(request, "param", None)
    if spec is None:
        s = get_session(request.config).settings
        spec = PayloadSpec(s.payloads[0], s.sizes[0])
    return spec


@pytest.fixture
def ipc_backend(request: pytest.FixtureRequest, ipc_mode: str) -> BackendSpec:
    """A BackendSpec over every selected backend that can run here, in ``ipc_mode``."""
    name = getattr(request, "param", None) or get_session(request.config).settings.backends[0]
    return _backend_spec(request, name, ipc_mode)


def _backend_spec(request: pytest.FixtureRequest, name: str, mode: str) -> BackendSpec:
    reason = get_session(request.config).backend_unavailable(name)
    if reason:  # collection marks these skipped already; this covers getfixturevalue()
        pytest.skip(reason)
    return BackendSpec(name, mode)


def _backend_fixture(name: str) -> Any:
    def fixture(request: pytest.FixtureRequest, ipc_mode: str) -> BackendSpec:
        return _backend_spec(request, name, ipc_mode)

    fixture.__doc__ = (f"A BackendSpec of the {name} backend in ``ipc_mode`` "
                       "(skipped with the reason where it cannot run).")
    fixture.__name__ = backend_fixture_name(name)
    return pytest.fixture(name=fixture.__name__)(fixture)


# plugin manager -> backends that have their <name>_backend fixture there (pytester runs nest)
_FIXTURES_MADE: weakref.WeakKeyDictionary[Any, set[str]] = weakref.WeakKeyDictionary()


def pytest_plugin_registered(plugin: Any, plugin_name: str, manager: pytest.PytestPluginManager) -> None:
    """One ``<name>_backend`` fixture per backend, built-ins and plugins alike.

    Called for every plugin pytest registers, conftest.py files included (after their import, so
    after their ``register_backend`` calls): backends that have no fixture yet get one, in a
    small plugin module of their own.
    """
    made = _FIXTURES_MADE.setdefault(manager, set())
    taken = set(IPC_FIXTURES) | {backend_fixture_name(name) for name in made}
    new = []
    for name in backend_names():
        # a name whose fixture name is taken (backend "ipc", or "a-b" next to "a_b") gets none: ipc_backend serves it
        if name not in made and backend_fixture_name(name) not in taken:
            new.append(name)
            taken.add(backend_fixture_name(name))
    if not new:
        return
    made.update(new)
    holder = types.ModuleType(f"pytest_ipcbench.plugin.backend_fixtures_{len(made)}")
    holder.__doc__ = f"ipcbench: per-backend fixtures of {', '.join(new)}"
    for name in new:
        setattr(holder, backend_fixture_name(name), _backend_fixture(name))
    manager.register(holder, holder.__name__)


@pytest.fixture
def ipc_group(request: pytest.FixtureRequest, ipc_ranks: int) -> Group:
    """A group of ``ipc_ranks`` ranks: an MPI sub-communicator under --with-mpi, else local processes.

    ``ipc_group.run(fn, *args)`` runs ``fn(group, *args)`` on every rank and returns the results by rank.
    """
    session = get_session(request.config)
    group = session.world_group(ipc_ranks, timeout=item_timeout(request.node))
    if group is None:  # an MPI rank outside the group: the plugin skips its setup, so only by misuse
        pytest.skip(f"rank {session.rank} is not in this test's group of {ipc_ranks}")
    if isinstance(group, LocalGroup):
        group.hint = timeout_hint(request.node)  # said with a hang, beside the rank, backend and step
        eps = BACKENDS.entry_points()  # another distribution's entry point: third-party code
        foreign = [n for n in _backends_of(request) if n in eps and not BACKENDS.builtin(n)]
        if foreign:  # rank 0 is this pytest process: a crash in their code must not end the session
            group.isolate = f"backend {foreign[0]!r}"
    return group


def _backends_of(request: pytest.FixtureRequest) -> list[str]:
    """The backends a test uses: ``ipc_backend``'s parameter and ``<name>_backend`` fixtures."""
    used = []
    if "ipc_backend" in request.fixturenames:
        callspec = getattr(request.node, "callspec", None)
        name = callspec.params.get("ipc_backend") if callspec is not None else None
        used.append(name or get_session(request.config).settings.backends[0])
    by_fixture = backend_fixtures()
    used += [by_fixture[f] for f in request.fixturenames if f in by_fixture]
    used += [getattr(request.cls, "backend", "")] if "conformance_backend" in request.fixturenames else []  # the kit
    return used


# ------------------------------------------------------------------------------- session end


@pytest.hookimpl(trylast=True)
def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """Stop the local workers, check that nothing of ours was left, write the report."""
    config = session.config
    ipc = get_session(config)
    ipc.close()
    leftovers = ipc.sweep()
    hygiene = config.pluginmanager.get_plugin(MpiHygiene.NAME)
    if isinstance(hygiene, MpiHygiene):
        leftovers = hygiene.finish(session, leftovers)
    notes = config.stash.setdefault(NOTES_KEY, [])
    if leftovers:
        notes.append(("red", "ipcbench: resources left behind (removed now; the run fails)", leftovers))
        if session.exitstatus in (pytest.ExitCode.OK, pytest.ExitCode.NO_TESTS_COLLECTED):
            session.exitstatus = pytest.ExitCode.TESTS_FAILED
    if ipc.rank == 0 and ipc.settings.report_dir is not None and ipc.run_record is not None:
        try:
            from ..core.outdir import OutputFolderError, check_folder
            from ..report import write_report
            from .fixtures.bench import run_references

            check_folder(ipc.settings.report_dir)  # a folder, the caller's own, writable
            results = ipc.run_record.finish(references=run_references())
            # results.json first: two pytest runs are compared with `ipcbench compare`
            results.save(Path(ipc.settings.report_dir) / "results.json")
            written = write_report(results, ipc.settings.report_dir)
            notes.append(("green", "ipcbench: report", [f"written to {written or ipc.settings.report_dir}"]))
        except Exception as exc:  # a folder's problem in words, any other with its traceback
            lines = [str(exc)] if isinstance(exc, OutputFolderError) else traceback.format_exc().splitlines()
            notes.append(("red", "ipcbench: could not write the report", lines))
            if session.exitstatus == pytest.ExitCode.OK:
                session.exitstatus = pytest.ExitCode.TESTS_FAILED


NOTES_KEY = pytest.StashKey[list]()


def pytest_terminal_summary(terminalreporter: Any, exitstatus: int, config: pytest.Config) -> None:
    for color, title, lines in config.stash.get(NOTES_KEY, []):
        terminalreporter.section(title, sep="-", **{color: True})
        for line in lines:
            terminalreporter.line(line)


__all__ = ["MpiHygiene", "get_session", "is_ipc_test"]
