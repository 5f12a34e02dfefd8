"""The plugin's settings: one table of options (:data:`PYTEST_OPTIONS`) and how they are resolved
for a pytest run.

Settings are resolved in layers, the first one set wins: ``@pytest.mark.ipcbench(...)`` on a test
(for that test only) > command line (``--ipc-*``) > environment (``IPCBENCH_*``) > ini file
(``ipc_*``) > defaults. Each value is checked by its option's check (core/options.py, the same for
every source and every command), and a bad one is a :class:`pytest.UsageError` naming the value and
where it came from.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from ..backends.base import MODES, backend_names
from ..core.checks import MAX_RANKS, OptionError, boolean, choice, listed, one_of, path, seconds, size, whole
from ..core.envinfo import INJECT_ENV
from ..core.errors import UsageError
from ..core.group import DEFAULT_TIMEOUT
from ..core.injection import injected
from ..core.nodes import check_node_env
from ..core.options import Option
from ..core.payloads import payload_kinds
from ..core.units import size_label
from ..core.wait import WAITS

DEFAULT_SIZES = "1KB,1MB"
DEFAULT_MPI_RANKS = 2  # and the world size

UNMARKED_CHOICES = ("all", "rank0")
_PLUGIN_HINT = "; a plugin's names come from its entry point or a register_{}() call in a conftest.py loaded at start"


def default_ranks(mpi_world_size: int | None) -> tuple[int, ...]:
    """Local: 2 and 4; under MPI: 2 and the world size, without values above the world size."""
    if mpi_world_size is None:
        return (2, 4)
    if mpi_world_size < DEFAULT_MPI_RANKS:  # a world of 1: the tests are skipped, saying why
        return (DEFAULT_MPI_RANKS,)
    return tuple(sorted({DEFAULT_MPI_RANKS, mpi_world_size}))


# ------------------------------------------------------------------------------------ settings

#: The plugin's options, said once each: the layers' names (flag, ini key, environment variable),
#: the help, the marker's keywords and the check of every source are derived from here. To add
#: one: an Option here (its default too) and the Settings field it fills.
PYTEST_OPTIONS: tuple[Option, ...] = (
    Option("backends", one_of(backend_names, "backend", hint=_PLUGIN_HINT.format("backend")),
           "backends to test, comma-separated, or 'all' (default)",
           flag="--ipc-backends", ini="ipc_backends", env="IPCBENCH_BACKENDS", metavar="LIST", marker=True),
    Option("sizes", listed(size, "size"), f"payload sizes (default {DEFAULT_SIZES})", flag="--ipc-sizes",
           ini="ipc_sizes", env="IPCBENCH_SIZES", metavar="LIST", marker=True, default=(10**3, 10**6)),
    Option("ranks", listed(whole(1, MAX_RANKS), "rank count"),
           "rank counts (default: 2,4 locally; 2 and the world size under MPI)",
           flag="--ipc-ranks", ini="ipc_ranks", env="IPCBENCH_RANKS", metavar="LIST", marker=True),
    Option("modes", one_of(MODES, "mode", ("all", "both")), f"modes (default {','.join(MODES)})", flag="--ipc-modes",
           ini="ipc_modes", env="IPCBENCH_MODES", metavar="LIST", default=MODES, marker=True),
    Option("payloads", one_of(payload_kinds, "payload kind", hint=_PLUGIN_HINT.format("payload")),
           "payload kinds, or 'all' (default)", flag="--ipc-payloads",
           ini="ipc_payloads", env="IPCBENCH_PAYLOADS", metavar="LIST", marker=True),
    Option("timeout", seconds(), "seconds a test may take before the run is ended as hung (default 300, at most "
                                 "a week)", flag="--ipc-timeout", ini="ipc_timeout",
           env="IPCBENCH_TIMEOUT", metavar="SECONDS", default=DEFAULT_TIMEOUT, marker=True),
    Option("report_dir", path, "write the results report into DIR", flag="--ipc-report", ini="ipc_report",
           env="IPCBENCH_REPORT", metavar="DIR"),
    Option("wait", choice(*WAITS), "how readers wait: auto (default: block when ranks <= cores, else "
                                   "backoff), block or backoff", flag="--ipc-wait", ini="ipc_wait",
           env="IPCBENCH_WAIT", metavar="STRATEGY", default="auto"),
    Option("all_ranks_output", boolean, "under MPI, let every rank print its pytest output (default: rank 0 "
                                        "only)", flag="--ipc-all-ranks-output", ini="ipc_all_ranks_output",
           env="IPCBENCH_ALL_RANKS_OUTPUT", action="store_true", default=False),
    Option("unmarked", choice(*UNMARKED_CHOICES), "under MPI, run tests without the mpi marker on all ranks "
                                                  "(default, as pytest-mpi) or once on rank 0 (the other ranks wait "
                                                  "for its verdict)",
           flag="--ipc-unmarked", ini="ipc_unmarked", env="IPCBENCH_UNMARKED", metavar="all|rank0", default="all"),
    Option("count", boolean, "count what each message costs in a pass after the timed rounds: system calls, "
                             "faults, bytes, pickles, allocation (default yes; no: results carry no counters)",
           flag="--ipc-count", ini="ipc_count", env="IPCBENCH_COUNT", metavar="yes|no", default=True),
)

#: keyword arguments @pytest.mark.ipcbench accepts: derived from the table
MARKER_KEYS = tuple(o.field for o in PYTEST_OPTIONS if o.marker)
OPTIONS = {o.field: o for o in PYTEST_OPTIONS}


def add_pytest_options(parser: pytest.Parser) -> None:
    """Every option of PYTEST_OPTIONS as a ``--ipc-*`` flag and an ini key."""
    group = parser.getgroup("ipcbench", "IPC benchmarks (pytest-ipcbench)")
    for o in PYTEST_OPTIONS:
        assert o.flag and o.ini, o.field
        known = {"backends": backend_names, "payloads": payload_kinds}.get(o.field)  # at start, plugins' too
        help_text = o.help + (f": {', '.join(known())}" if known else "")
        if o.action:
            group.addoption(o.flag, dest=o.ini, action=o.action, default=None, help=help_text)
        else:
            group.addoption(o.flag, dest=o.ini, metavar=o.metavar, help=help_text)
        parser.addini(o.ini, f"ipcbench: {o.help}", default="")


@dataclass(frozen=True)
class Settings:
    """What the ipcbench fixtures run over, after every layer was applied."""

    backends: tuple[str, ...] = field(default_factory=backend_names)  # every one known at start
    sizes: tuple[int, ...] = (10**3, 10**6)
    ranks: tuple[int, ...] = (2, 4)
    modes: tuple[str, ...] = MODES
    payloads: tuple[str, ...] = field(default_factory=payload_kinds)
    timeout: float = DEFAULT_TIMEOUT
    report_dir: Path | None = None
    all_ranks_output: bool = False
    wait: str = "auto"  # the readers' wait strategy (backends.base.WAITS)
    unmarked: str = "all"  # under MPI, tests without the mpi marker run on "all" ranks or "rank0"
    count: bool = True  # the counting pass after the timed rounds (harness/count.py)
    sources: Mapping[str, str] = field(default_factory=dict)  # setting -> where its value came from


def _lookup(config: pytest.Config, o: Option) -> tuple[Any, str] | None:
    """The first layer that sets option ``o``: (raw value, source), or None."""
    assert o.flag and o.ini and o.env
    value = config.getoption(o.ini, default=None)
    if value not in (None, False):
        return value, o.flag
    if os.environ.get(o.env, "").strip():
        return os.environ[o.env], f"env {o.env}"
    try:
        raw = config.getini(o.ini)
    except ValueError:
        raw = None
    if raw not in (None, "", [], False):
        return raw, f"ini {o.ini}"
    return None


def resolve_settings(config: pytest.Config, mpi_world_size: int | None = None) -> Settings:
    """Apply the layers command line > environment > ini > default; raise UsageError on bad input."""
    # the defaults known only now (the registries, the MPI world); the others are the table's
    defaults: dict[str, Any] = {o.field: o.default for o in PYTEST_OPTIONS}
    defaults.update(backends=backend_names(), ranks=default_ranks(mpi_world_size), payloads=payload_kinds())
    values: dict[str, Any] = {}
    sources: dict[str, str] = {}
    try:
        check_node_env()
        for o in PYTEST_OPTIONS:
            found = _lookup(config, o)
            if found is None:
                values[o.field], sources[o.field] = defaults[o.field], "default"
            else:
                raw, sources[o.field] = found
                values[o.field] = o.checked(raw, sources[o.field])
        unknown = [b for b in injected() if b not in backend_names()]  # $IPCBENCH_INJECT names backends too
        if unknown:
            raise OptionError(f"env {INJECT_ENV}", f"unknown backend {unknown[0]!r} (choose from "
                                                   f"{', '.join(backend_names())})")
    except UsageError as exc:  # pytest prints its own usage errors without a traceback
        raise pytest.UsageError(str(exc)) from None
    return Settings(**values, sources=sources)


def marker_kwargs(marker: Any, where: str) -> dict[str, Any]:
    """The keywords of an ``ipcbench`` marker, checked by their options (the same checks)."""
    if marker is None:
        return {}
    if marker.args:
        raise pytest.UsageError(f"{where}: @pytest.mark.ipcbench takes keywords only ({', '.join(MARKER_KEYS)})")
    unknown = [key for key in marker.kwargs if key not in MARKER_KEYS]
    if unknown:
        raise pytest.UsageError(
            f"{where}: @pytest.mark.ipcbench got unknown keyword {unknown[0]!r} (allowed: {', '.join(MARKER_KEYS)})")
    try:
        return {key: OPTIONS[key].checked(value, f"{where}: @pytest.mark.ipcbench({key}=...)")
                for key, value in marker.kwargs.items()}
    except UsageError as exc:
        raise pytest.UsageError(str(exc)) from None


def describe(settings: Settings) -> str:
    """One line for the pytest header."""
    return (
        f"ipcbench: backends={','.join(settings.backends)} sizes={','.join(size_label(s) for s in settings.sizes)} "
        f"ranks={','.join(map(str, settings.ranks))} modes={','.join(settings.modes)} "
        f"payloads={','.join(settings.payloads)} timeout={settings.timeout:g}s wait={settings.wait}"
    )
