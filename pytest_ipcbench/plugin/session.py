"""One object per pytest run: resolved settings, the process group and the collected results.

Settings are resolved in layers, the first one set wins: ``@pytest.mark.ipcbench(...)`` on a test
(for that test only) > command line (``--ipc-*``) > environment (``IPCBENCH_*``) > ini file
(``ipc_*``) > defaults. Each value is checked by a small ``parse_*`` function that raises
:class:`pytest.UsageError` naming the bad value and where it came from.

The plugin builds one :class:`IpcSession` in ``pytest_configure`` and keeps it in
``config.stash``; other code gets it with :func:`get_session`.
"""

from __future__ import annotations

import itertools
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

import pytest

from ..backends.base import MODES, backend_names, declared_resources, parse_wait, unavailable_reason
from ..core.options import MAX_RANKS, Option
from ..core.group import DEFAULT_TIMEOUT, Group, MPIGroup
from ..core.local import LocalGroup, LocalWorld
from ..core.names import find_ours, remove
from ..core.units import SizeTooLarge, size_label
from ..core.payloads import PayloadSpec, get_kind, parse_size, payload_kinds
from ..history.record import RunRecord
from ..history.results import Result

DEFAULT_SIZES = "1KB,1MB"
DEFAULT_LOCAL_RANKS = "2,4"
DEFAULT_MPI_RANKS = 2  # and the world size
DEFAULT_TIMEOUT_S = DEFAULT_TIMEOUT



def backend_fixture_name(backend: str) -> str:
    """``mpi-pkl5`` -> ``mpi_pkl5_backend``: the per-backend fixture's name."""
    return f"{backend.replace('-', '_').replace('.', '_')}_backend"


def backend_fixtures() -> dict[str, str]:
    """Fixture name -> backend name, for every backend known now (built-ins and plugins)."""
    return {backend_fixture_name(name): name for name in backend_names()}

# keyword arguments @pytest.mark.ipcbench accepts
MARKER_KEYS = ("backends", "modes", "payloads", "sizes", "ranks", "timeout")


# ------------------------------------------------------------------------------------ parsing


def _items(value: Any) -> list[str]:
    """A comma list (``"a, b"``), one number, or a list/tuple of them, as stripped strings."""
    if isinstance(value, str):
        parts = value.split(",")
    elif isinstance(value, (int, float)):
        parts = [str(value)]
    elif isinstance(value, Iterable):
        parts = [str(v) for v in value]
    else:
        parts = [str(value)]
    return [p.strip() for p in parts if p.strip()]


def _choices(value: Any, source: str, allowed: Sequence[str], what: str, alls: Sequence[str]) -> tuple[str, ...]:
    items = _items(value)
    if not items:
        raise pytest.UsageError(f"{source}: no {what} given (choose from {', '.join(allowed)}, or all)")
    if len(items) == 1 and items[0].lower() in alls:
        return tuple(allowed)
    out: list[str] = []
    for item in items:
        if item not in allowed:
            hint = "" if what == "mode" else (
                "; a plugin's names come from its entry point or a register_"
                f"{'backend' if what == 'backend' else 'payload'}() call in a conftest.py loaded at start"
            )
            raise pytest.UsageError(
                f"{source}: unknown {what} {item!r} (choose from {', '.join(allowed)}, or all{hint})"
            )
        if item not in out:
            out.append(item)
    return tuple(out)


def parse_backends(value: Any, source: str) -> tuple[str, ...]:
    """``"shm,lmdb"`` or ``"all"`` -> backend names (checked against the registry), in the order given."""
    return _choices(value, source, backend_names(), "backend", ("all",))


def parse_modes(value: Any, source: str) -> tuple[str, ...]:
    """``"bytes,native"``, ``"both"`` or ``"all"``."""
    return _choices(value, source, MODES, "mode", ("all", "both"))


def parse_payloads(value: Any, source: str) -> tuple[str, ...]:
    """Payload kinds (``dict,ndarray,array1d,ragged2d,tiny`` and plugins' kinds) or ``"all"``."""
    return _choices(value, source, payload_kinds(), "payload kind", ("all",))


def parse_sizes(value: Any, source: str) -> tuple[int, ...]:
    """``"1KB,1MB"`` -> byte counts (MB = 10**6, MiB = 2**20), in the order given."""
    items = _items(value)
    if not items:
        raise pytest.UsageError(f"{source}: no size given (e.g. 1KB,1MB)")
    out: list[int] = []
    for item in items:
        try:
            size = parse_size(item)
        except SizeTooLarge as exc:
            raise pytest.UsageError(f"{source}: {exc}") from None
        except ValueError:
            raise pytest.UsageError(
                f"{source}: bad size {item!r} (a number with an optional unit B, KB, MB, GB, KiB, MiB, GiB; "
                "e.g. 1MB)"
            ) from None
        if size <= 0:
            raise pytest.UsageError(f"{source}: bad size {item!r} (must be more than 0 bytes)")
        if size not in out:
            out.append(size)
    return tuple(out)


def parse_ranks(value: Any, source: str) -> tuple[int, ...]:
    """``"2,4"`` -> rank counts (each at least 1), in the order given."""
    items = _items(value)
    if not items:
        raise pytest.UsageError(f"{source}: no rank count given (e.g. 2,4)")
    out: list[int] = []
    for item in items:
        try:
            n = int(item)
        except ValueError:
            raise pytest.UsageError(f"{source}: bad rank count {item!r} (a whole number, e.g. 2,4)") from None
        if n < 1:
            raise pytest.UsageError(f"{source}: bad rank count {item!r} (at least 1)")
        if n > MAX_RANKS:  # more is a typo on one machine (and runs out of file descriptors)
            raise pytest.UsageError(f"{source}: bad rank count {item!r} (at most {MAX_RANKS})")
        if n not in out:
            out.append(n)
    return tuple(out)


MAX_TIMEOUT_S = 7 * 86400.0  # a week: longer is a typo, and an infinite one overflows the OS waits


def parse_timeout(value: Any, source: str) -> float:
    """Seconds per test before the watchdog ends the run; ``0`` turns the watchdog off."""
    try:
        seconds = float(str(value).strip().lower().removesuffix("s"))
    except ValueError:
        raise pytest.UsageError(f"{source}: bad timeout {value!r} (seconds, e.g. 300)") from None
    if seconds < 0 or seconds != seconds:
        raise pytest.UsageError(f"{source}: bad timeout {value!r} (seconds >= 0; 0 turns the watchdog off)")
    if seconds > MAX_TIMEOUT_S:
        raise pytest.UsageError(
            f"{source}: bad timeout {value!r} (at most {MAX_TIMEOUT_S:g} s, a week; 0 turns the watchdog off)"
        )
    return seconds


def parse_wait_setting(value: Any, source: str) -> str:
    """How readers wait: auto (block when ranks <= cores, else backoff), block or backoff."""
    try:
        return parse_wait(str(value), source)
    except ValueError as exc:
        raise pytest.UsageError(str(exc)) from None
UNMARKED_CHOICES = ("all", "rank0")


def parse_unmarked(value: Any, source: str) -> str:
    """Where a test without the ``mpi`` marker runs under MPI: ``all`` ranks or ``rank0`` only."""
    text = str(value).strip().lower()
    if text not in UNMARKED_CHOICES:
        raise pytest.UsageError(f"{source}: bad value {value!r} (all or rank0)")
    return text


def parse_bool(value: Any, source: str) -> bool:
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in ("1", "true", "yes", "on"):
        return True
    if text in ("0", "false", "no", "off", ""):
        return False
    raise pytest.UsageError(f"{source}: bad boolean {value!r} (true or false)")


# ------------------------------------------------------------------------------------ settings

def _report_dir(value: Any, source: str) -> Path:
    return Path(str(value)).expanduser()


#: The plugin's options, said once each: the layers' names (flag, ini key, environment variable)
#: and help are derived from here (pytest_addoption), and one parse_* function checks the value
#: from every layer (and from the marker). To add one: an Option here (its default too) and the
#: Settings field it fills.
PYTEST_OPTIONS: tuple[Option, ...] = (
    Option("backends", parse_backends, "backends to test, comma-separated, or 'all' (default)",
           flag="--ipc-backends", ini="ipc_backends", env="IPCBENCH_BACKENDS", metavar="LIST"),
    Option("sizes", parse_sizes, f"payload sizes (default {DEFAULT_SIZES})", flag="--ipc-sizes", ini="ipc_sizes",
           env="IPCBENCH_SIZES", metavar="LIST"),
    Option("ranks", parse_ranks, "rank counts (default: 2,4 locally; 2 and the world size under MPI)",
           flag="--ipc-ranks", ini="ipc_ranks", env="IPCBENCH_RANKS", metavar="LIST"),
    Option("modes", parse_modes, f"modes (default {','.join(MODES)})", flag="--ipc-modes", ini="ipc_modes",
           env="IPCBENCH_MODES", metavar="LIST", default=MODES),
    Option("payloads", parse_payloads, "payload kinds, or 'all' (default)", flag="--ipc-payloads",
           ini="ipc_payloads", env="IPCBENCH_PAYLOADS", metavar="LIST"),
    Option("timeout", parse_timeout, "seconds a test may take before the run is ended as hung (default 300; "
                                     "0 = no watchdog)", flag="--ipc-timeout", ini="ipc_timeout",
           env="IPCBENCH_TIMEOUT", metavar="SECONDS", default=DEFAULT_TIMEOUT_S),
    Option("report", _report_dir, "write the results report into DIR", flag="--ipc-report", ini="ipc_report",
           env="IPCBENCH_REPORT", metavar="DIR"),
    Option("wait", parse_wait_setting, "how readers wait: auto (default: block when ranks <= cores, else "
                                       "backoff), block or backoff", flag="--ipc-wait", ini="ipc_wait",
           env="IPCBENCH_WAIT", metavar="STRATEGY", default="auto"),
    Option("all_ranks_output", parse_bool, "under MPI, let every rank print its pytest output (default: rank 0 "
                                           "only)", flag="--ipc-all-ranks-output", ini="ipc_all_ranks_output",
           env="IPCBENCH_ALL_RANKS_OUTPUT", action="store_true", default=False),
    Option("unmarked", parse_unmarked, "under MPI, run tests without the mpi marker on all ranks (default, as "
                                       "pytest-mpi) or once on rank 0 (the other ranks wait for its verdict)",
           flag="--ipc-unmarked", ini="ipc_unmarked", env="IPCBENCH_UNMARKED", metavar="all|rank0", default="all"),
    Option("count", parse_bool, "count what each message costs in a pass after the timed rounds: system calls, "
                                "faults, bytes, pickles, allocation (default yes; no: results carry no counters)",
           flag="--ipc-count", ini="ipc_count", env="IPCBENCH_COUNT", metavar="yes|no", default=True),
)

#: an option whose Settings field has another name
_SETTINGS_FIELD = {"report": "report_dir"}

# setting -> (command-line flag, option dest, ini key, environment variable): derived from the table
OPTIONS: dict[str, tuple[str, str, str, str]] = {
    o.field: (o.flag or "", o.ini or "", o.ini or "", o.env or "") for o in PYTEST_OPTIONS
}


def add_pytest_options(parser: pytest.Parser) -> None:
    """Every option of PYTEST_OPTIONS as a ``--ipc-*`` flag and an ini key."""
    group = parser.getgroup("ipcbench", "IPC benchmarks (pytest-ipcbench)")
    for o in PYTEST_OPTIONS:
        assert o.flag and o.ini, o.field
        help_text = o.help
        if o.field == "backends":  # what is known at start (plugins' entry points too)
            help_text += f": {', '.join(backend_names())}"
        elif o.field == "payloads":
            help_text += f": {', '.join(payload_kinds())}"
        if o.action:
            group.addoption(o.flag, dest=o.ini, action=o.action, default=None, help=help_text)
        else:
            group.addoption(o.flag, dest=o.ini, metavar=o.metavar, help=help_text)
    for o in PYTEST_OPTIONS:
        parser.addini(o.ini or "", f"ipcbench: {o.help}", default="")


@dataclass(frozen=True)
class Settings:
    """What the ipcbench fixtures run over, after every layer was applied."""

    backends: tuple[str, ...] = field(default_factory=backend_names)  # every one known at start
    sizes: tuple[int, ...] = (10**3, 10**6)
    ranks: tuple[int, ...] = (2, 4)
    modes: tuple[str, ...] = MODES
    payloads: tuple[str, ...] = field(default_factory=payload_kinds)
    timeout: float = DEFAULT_TIMEOUT_S
    report_dir: Path | None = None
    all_ranks_output: bool = False
    wait: str = "auto"  # the readers' wait strategy (backends.base.WAITS)
    unmarked: str = "all"  # under MPI, tests without the mpi marker run on "all" ranks or "rank0"
    count: bool = True  # the counting pass after the timed rounds (harness/count.py)
    sources: Mapping[str, str] = field(default_factory=dict)  # setting -> where its value came from


def _lookup(config: pytest.Config, setting: str) -> tuple[Any, str] | None:
    """The first layer that sets ``setting``: (raw value, source), or None."""
    flag, dest, ini, env = OPTIONS[setting]
    value = config.getoption(dest, default=None)
    if value not in (None, False):
        return value, flag
    if os.environ.get(env, "").strip():
        return os.environ[env], f"env {env}"
    try:
        raw = config.getini(ini)
    except ValueError:
        raw = None
    if raw not in (None, "", [], False):
        return raw, f"ini {ini}"
    return None


def default_ranks(mpi_world_size: int | None) -> tuple[int, ...]:
    """Local: 2 and 4; under MPI: 2 and the world size, without values above the world size."""
    if mpi_world_size is None:
        return parse_ranks(DEFAULT_LOCAL_RANKS, "default")
    if mpi_world_size < DEFAULT_MPI_RANKS:  # a world of 1: the tests are skipped, saying why
        return (DEFAULT_MPI_RANKS,)
    return tuple(sorted({DEFAULT_MPI_RANKS, mpi_world_size}))


def resolve_settings(config: pytest.Config, mpi_world_size: int | None = None) -> Settings:
    """Apply the layers command line > environment > ini > default; raise UsageError on bad input."""
    parsers = {o.field: o.check for o in PYTEST_OPTIONS}
    # the defaults known only now (the registries, the MPI world); the others are the table's
    defaults: dict[str, Any] = {o.field: o.default for o in PYTEST_OPTIONS}
    defaults.update(backends=backend_names(), sizes=parse_sizes(DEFAULT_SIZES, "default"),
                    ranks=default_ranks(mpi_world_size), payloads=payload_kinds())
    values: dict[str, Any] = {}
    sources: dict[str, str] = {}
    for setting in OPTIONS:
        found = _lookup(config, setting)
        if found is None:
            values[setting], sources[setting] = defaults[setting], "default"
            continue
        raw, source = found
        sources[setting] = source
        values[setting] = parsers[setting](raw, source)
    return Settings(**{_SETTINGS_FIELD.get(k, k): v for k, v in values.items()}, sources=sources)


def marker_kwargs(marker: Any, where: str) -> dict[str, Any]:
    """The keywords of an ``ipcbench`` marker, checked against the allow-list and parsed."""
    if marker is None:
        return {}
    if marker.args:
        raise pytest.UsageError(f"{where}: @pytest.mark.ipcbench takes keywords only ({', '.join(MARKER_KEYS)})")
    parsers = {
        "backends": parse_backends,
        "modes": parse_modes,
        "payloads": parse_payloads,
        "sizes": parse_sizes,
        "ranks": parse_ranks,
        "timeout": parse_timeout,
    }
    out: dict[str, Any] = {}
    for key, value in marker.kwargs.items():
        if key not in parsers:
            raise pytest.UsageError(
                f"{where}: @pytest.mark.ipcbench got unknown keyword {key!r} (allowed: {', '.join(MARKER_KEYS)})"
            )
        out[key] = parsers[key](value, f"{where}: @pytest.mark.ipcbench({key}=...)")
    return out


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
        self._reasons: dict[str, str | None] = {}
        # what was there before this run (e.g. an outer pytest run in the same process): not ours
        self._before = {str(item.path) for item in find_ours(os.getpid(), declared_resources())}

    # --------------------------------------------------------------------------- groups

    def need_ranks(self, n: int) -> None:
        """Collection tells the session the largest group a test needs (local mode sizes its world)."""
        self._local_size = max(self._local_size, n)

    def is_idle(self, ranks: int | None) -> bool:
        """True on an MPI rank outside a test's group of ``ranks`` (it waits while the others run)."""
        return self.mpi and ranks is not None and self.rank >= ranks

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
        return self._local_world(ranks).group(ranks, timeout=timeout)

    def _local_world(self, ranks: int) -> LocalWorld:
        size = max(self._local_size, ranks)
        if self._local is not None and self._local.size < size:
            self._forget_local()
        if self._local is None:
            self._local = LocalWorld(size, timeout=self.settings.timeout or DEFAULT_TIMEOUT)
        return self._local

    def probe_group(self, ranks: int | None = None) -> Group:
        """A group object to ask a backend whether it can run here; starts no process."""
        if self._mpi_world is not None:
            return self._mpi_world
        n = ranks or max(self.settings.ranks)
        # stands for a running local group, which has one mailbox per rank (mp-queue checks them)
        return LocalGroup(0, n, {}, mailboxes=[None] * n)

    def backend_unavailable(self, name: str, ranks: int | None = None) -> str | None:
        """Why backend ``name`` cannot run in this mode (cached), or None."""
        if name not in self._reasons:
            self._reasons[name] = unavailable_reason(name, self.probe_group(ranks))
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
        found = []
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
            self._local.close()
            self._local = None

    # -------------------------------------------------------------------------- results

    def record(self, result: Result) -> None:
        """Keep a result for the report (rank 0 keeps them; other ranks drop theirs). The first
        one starts the run record: the environment (``history/record.RunRecord.start``), then every
        ``pytest_ipcbench_update_environment`` hook (another plugin's additions)."""
        if self.rank != 0:
            return
        if self.run_record is None:
            world = self._mpi_world
            config = self.config
            self.run_record = RunRecord.start(
                self.world_size, group_kind=result.group, node_sizes=world.node_sizes if world is not None else None,
                update=(lambda env: config.hook.pytest_ipcbench_update_environment(config=config, env=env))
                if config is not None else None)
        self.run_record.add(result)

    # ---------------------------------------------------------------------- parametrize

    def timeout_for(self, marker_timeout: float | None) -> float:
        return self.settings.timeout if marker_timeout is None else marker_timeout

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
                self.need_ranks(ranks)
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
            try:
                self._mpi_world.free()  # the sub-groups; the world itself stays
            except Exception:  # freeing is a courtesy; MPI_Finalize cleans up anyway
                pass
            self._mpi_world = None


SESSION_KEY = pytest.StashKey[IpcSession]()


def get_session(config: pytest.Config) -> IpcSession:
    """The ipcbench session of this pytest run (built in ``pytest_configure``)."""
    try:
        return config.stash[SESSION_KEY]
    except KeyError:
        raise RuntimeError("the ipcbench plugin is not active in this pytest run (-p no:ipcbench?)") from None


def describe(settings: Settings) -> str:
    """One line for the pytest header."""
    return (
        f"ipcbench: backends={','.join(settings.backends)} sizes={','.join(size_label(s) for s in settings.sizes)} "
        f"ranks={','.join(map(str, settings.ranks))} modes={','.join(settings.modes)} "
        f"payloads={','.join(settings.payloads)} timeout={settings.timeout:g}s wait={settings.wait}"
    )
