"""The plugin's settings: one table of options (:data:`PYTEST_OPTIONS`), their checks, and how
they are resolved for a pytest run.

Settings are resolved in layers, the first one set wins: ``@pytest.mark.ipcbench(...)`` on a test
(for that test only) > command line (``--ipc-*``) > environment (``IPCBENCH_*``) > ini file
(``ipc_*``) > defaults. Each value is checked by a small ``parse_*`` function that raises
:class:`pytest.UsageError` naming the bad value and where it came from.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from ..backends.base import MODES, backend_names, parse_wait
from ..core.group import DEFAULT_TIMEOUT
from ..core.options import MAX_RANKS, Option
from ..core.payloads import parse_size, payload_kinds
from ..core.units import SizeTooLarge, size_label

DEFAULT_SIZES = "1KB,1MB"
DEFAULT_LOCAL_RANKS = "2,4"
DEFAULT_MPI_RANKS = 2  # and the world size
DEFAULT_TIMEOUT_S = DEFAULT_TIMEOUT

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
    parsers = {o.field: o.check for o in PYTEST_OPTIONS if o.check is not None}
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


def describe(settings: Settings) -> str:
    """One line for the pytest header."""
    return (
        f"ipcbench: backends={','.join(settings.backends)} sizes={','.join(size_label(s) for s in settings.sizes)} "
        f"ranks={','.join(map(str, settings.ranks))} modes={','.join(settings.modes)} "
        f"payloads={','.join(settings.payloads)} timeout={settings.timeout:g}s wait={settings.wait}"
    )
