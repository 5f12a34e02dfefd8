"""Registries of extensions (backends, payload kinds): entry points and run-time registrations.

A :class:`Registry` knows the entry points of its group (built-ins included: listed without
importing, loaded on first use, an import error naming the distribution) and ``register(name,
obj)`` calls made at run time (a conftest.py). Those are remembered by reference (module, file,
qualified name) so that *spawned* workers, which never ran the conftest, replay them
(:func:`snapshot`, :func:`replay`); an MPI rank runs the same program and needs no shipping.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import importlib.util
import os
import pickle
import re
import sys
import types
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, Generic, NoReturn, TypeVar

from .errors import IpcbenchError, UsageError

T = TypeVar("T")

OWN_DISTRIBUTION = "pytest-ipcbench"
# a name must survive comma lists, test ids and fixture names (``<name>_backend``)
_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
_RESERVED = frozenset({"all", "both"})  # words the option parsers give a meaning


class ExtensionError(IpcbenchError, RuntimeError):
    """An extension is broken: an entry point that does not import, a bad registration."""


@dataclass(frozen=True)
class Reference:
    """Where a run-time registration can be found again in another process."""

    name: str
    module: str
    file: str | None
    qualname: str | None  # of a module-level class or function; None: ``blob`` holds the object
    blob: bytes | None = None

    def describe(self) -> str:
        return f"{self.module}:{self.qualname}" if self.qualname else f"an object of module {self.module}"


_REGISTRIES: dict[str, Registry[Any]] = {}
_version = 0  # bumped by every run-time registration: workers are sent a new snapshot


class Registry(Generic[T]):
    """Names -> extensions of one kind (see the module docstring).

    ``check(name, obj, where)`` turns a loaded or registered object into the stored value (a
    Backend subclass, a payload Kind) or raises ExtensionError; ``unavailable`` is the exception
    raised when an entry point's module needs a package that is not installed (a skip, not an error).
    """

    def __init__(
        self,
        what: str,
        group: str,
        check: Callable[[str, Any, str], T],
        unavailable: type[Exception],
        owner: str,
    ) -> None:
        self.what = what
        self.group = group
        self.owner = owner  # the module that holds this registry (imported by replay())
        self._check = check
        self._unavailable_exc = unavailable
        self._entry_points: dict[str, importlib.metadata.EntryPoint] | None = None
        self._clashes: dict[str, str] = {}
        self._loaded: dict[str, T] = {}
        self._added: dict[str, T] = {}
        self._refs: dict[str, Reference] = {}
        self._unavailable: dict[str, str] = {}
        _REGISTRIES[group] = self

    # ----------------------------------------------------------------------------- names

    def entry_points(self) -> dict[str, importlib.metadata.EntryPoint]:
        """The entry points of this group, ours first (in declared order), then the others by name."""
        if self._entry_points is None:
            found: dict[str, importlib.metadata.EntryPoint] = {}
            for ep in importlib.metadata.entry_points(group=self.group):
                other = found.get(ep.name)
                if other is None:
                    found[ep.name] = ep
                elif other.value != ep.value:  # the same distribution seen twice is fine
                    self._clashes[ep.name] = (
                        f"{self.what} {ep.name!r} is declared by two entry points: "
                        f"{_describe_ep(other)} and {_describe_ep(ep)}; uninstall one of them"
                    )
            ours = [n for n, ep in found.items() if _dist_name(ep) == OWN_DISTRIBUTION]
            others = sorted(n for n in found if n not in ours)
            self._entry_points = {n: found[n] for n in ours + others}
        return self._entry_points

    def names(self) -> tuple[str, ...]:
        """Every name offered to users: entry points (ours first), then run-time registrations in
        their order, less the harness's internal ones (``internal = True``: references, the MPI methods'
        method adapters), which stay usable by name."""
        eps = self.entry_points()
        return tuple(eps) + tuple(
            n for n, obj in self._added.items() if n not in eps and not getattr(obj, "internal", False)
        )

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and (name in self._added or name in self.entry_points())

    def __iter__(self) -> Iterator[str]:
        return iter(self.names())

    def unknown(self, name: str) -> UsageError:
        """The error for a name nobody registered: it names the available ones."""
        return UsageError(f"unknown {self.what} {name!r}; choose from {', '.join(self.names()) or '(none)'}")

    def check_name(self, name: str) -> None:
        if name not in self:
            raise self.unknown(name)

    def builtin(self, name: str) -> bool:
        """True for the names pytest-ipcbench itself declares."""
        ep = self.entry_points().get(name)
        return name not in self._added and ep is not None and _dist_name(ep) == OWN_DISTRIBUTION

    def origin(self, name: str) -> str:
        """Where ``name`` comes from, for messages: an entry point or a registration."""
        if name in self._refs:
            return f"registered at run time from {self._refs[name].describe()}"
        ep = self.entry_points().get(name)
        return _describe_ep(ep) if ep is not None else "unknown"

    # ------------------------------------------------------------------------------ load

    def get(self, name: str) -> T:
        """The extension called ``name``, loading its entry point on first use.

        Raises ValueError (unknown name, listing the known ones), the registry's ``unavailable``
        exception (the entry point needs a package that is missing), or ExtensionError.
        """
        if name in self._added:
            return self._added[name]
        if name in self._loaded:
            return self._loaded[name]
        if name in self._clashes:
            raise ExtensionError(self._clashes[name])
        if name in self._unavailable:
            raise self._unavailable_exc(self._unavailable[name])
        ep = self.entry_points().get(name)
        if ep is None:
            raise self.unknown(name)
        where = _describe_ep(ep)
        try:
            obj = ep.load()
        except ImportError as exc:
            missing = exc.name or ""
            if not missing or ep.module == missing or ep.module.startswith(missing + "."):
                self._broken(name, ep, f"{self.what} {name!r}: {where} cannot be imported: {exc}", exc)
            reason = f"{name} needs the {missing} package ({where}): {exc}"
            self._unavailable[name] = reason
            raise self._unavailable_exc(reason) from exc
        except Exception as exc:
            self._broken(name, ep, f"{self.what} {name!r}: {where} failed to load: {type(exc).__name__}: {exc}", exc)
        try:
            value = self._check(name, obj, where)
        except ExtensionError as exc:
            self._broken(name, ep, str(exc), exc)
        self._loaded[name] = value
        return value

    def _broken(self, name: str, ep: importlib.metadata.EntryPoint, message: str, exc: BaseException) -> NoReturn:
        """A broken entry point: ours is a bug (ExtensionError); another distribution's is skipped
        like a backend whose package is missing, said once on stderr, and the rest runs."""
        if _dist_name(ep) == OWN_DISTRIBUTION:
            raise ExtensionError(message) from exc
        reason = f"skipped, broken: {message}"
        if name not in self._unavailable:
            print(f"ipcbench: {reason}", file=sys.stderr, flush=True)
        self._unavailable[name] = reason
        raise self._unavailable_exc(reason) from exc

    def loaded(self) -> dict[str, T]:
        """What was loaded or registered so far (no import happens)."""
        return {**self._loaded, **self._added}

    # -------------------------------------------------------------------------- register

    def register(self, name: str, obj: Any, origin: Any = None) -> T:
        """Make ``obj`` known as ``name`` in this process and in the workers it spawns.

        ``origin`` is the module-level object whose module must be imported to find ``obj``
        again (default: ``obj`` itself, a class or a function).
        """
        global _version
        check_name(name, self.what)
        if name in self.entry_points():
            raise ExtensionError(
                f"cannot register {self.what} {name!r}: the name is taken by {self.origin(name)}; choose another name"
            )
        ref = _reference(name, obj, origin if origin is not None else obj, self.what)
        old = self._refs.get(name)
        if old is not None and (old.file, old.qualname) != (ref.file, ref.qualname):
            raise ExtensionError(
                f"cannot register {self.what} {name!r} from {ref.describe()}: "
                f"it is already registered from {old.describe()}"
            )
        value = self._check(name, obj, f"register({name!r}) from {ref.describe()}")
        self._added[name] = value
        self._refs[name] = ref
        _version += 1
        return value

    def unregister(self, name: str) -> None:
        """Forget a run-time registration (tests); entry points stay."""
        global _version
        self._added.pop(name, None)
        self._refs.pop(name, None)
        _version += 1


def check_name(name: Any, what: str) -> None:
    if not isinstance(name, str) or not _NAME_RE.match(name) or name.lower() in _RESERVED:
        raise ExtensionError(
            f"bad {what} name {name!r}: letters, digits, '.', '_' and '-', starting with a letter or "
            f"digit, and not {' or '.join(sorted(_RESERVED))}"
        )


def _dist_name(ep: importlib.metadata.EntryPoint) -> str:
    dist = getattr(ep, "dist", None)
    return (dist.metadata["Name"] or "") if dist is not None else ""


def _describe_ep(ep: importlib.metadata.EntryPoint) -> str:
    dist = getattr(ep, "dist", None)
    owner = f"{dist.metadata['Name']} {dist.version}" if dist is not None else "an unknown distribution"
    return f"entry point '{ep.name} = {ep.value}' (group {ep.group}) of {owner}"


def _reference(name: str, obj: Any, origin: Any, what: str) -> Reference:
    module_name = origin.__name__ if isinstance(origin, types.ModuleType) else getattr(origin, "__module__", None)
    module = sys.modules.get(module_name or "")
    if module is None or not module_name:
        raise ExtensionError(f"cannot register {what} {name!r}: the module of {origin!r} is not known")
    file = getattr(module, "__file__", None)
    qualname = getattr(obj, "__qualname__", None) if isinstance(obj, (type, types.FunctionType)) else None
    if qualname is not None:
        if "<locals>" in qualname:
            raise ExtensionError(
                f"cannot register {what} {name!r}: {module_name}:{qualname} is defined inside a function; "
                "spawned worker processes can only find it at the top level of a module"
            )
        return Reference(name, module_name, file, qualname)
    try:
        blob = pickle.dumps(obj)
    except Exception as exc:
        raise ExtensionError(
            f"cannot register {what} {name!r}: spawned worker processes could not receive it "
            f"({type(exc).__name__}: {exc}); build it from functions at the top level of a module"
        ) from exc
    return Reference(name, module_name, file, None, blob)


# ------------------------------------------------------------------------ shipping to workers


def snapshot() -> tuple[int, list[tuple[str, str, list[Reference]]]]:
    """(version, [(owner module, group, references)]) of every run-time registration."""
    return _version, [(r.owner, r.group, list(r._refs.values())) for r in _REGISTRIES.values() if r._refs]


def replay(data: list[tuple[str, str, list[Reference]]]) -> None:
    """In a spawned worker: make the parent's run-time registrations again (missing ones only)."""
    for owner, group, refs in data:
        importlib.import_module(owner)
        registry = _REGISTRIES[group]
        for ref in refs:
            old = registry._refs.get(ref.name)
            if old is not None and (old.file, old.qualname) == (ref.file, ref.qualname):
                continue
            module = _import_module(ref)
            if ref.name in registry._added:  # importing the module registered it again
                continue
            if ref.qualname is not None:
                obj: Any = module
                for part in ref.qualname.split("."):
                    obj = getattr(obj, part)
            else:
                obj = pickle.loads(ref.blob or b"")
            registry.register(ref.name, obj, origin=module if ref.qualname is None else None)


def _same_file(module: types.ModuleType, file: str | None) -> bool:
    mine = getattr(module, "__file__", None)
    if file is None or mine is None:
        return file is None
    try:
        return os.path.samefile(mine, file)
    except OSError:
        return False


def _import_module(ref: Reference) -> types.ModuleType:
    """The module of a reference: by name when that finds the same file, else from the file itself.

    A conftest.py is often not importable by its module name in another process (pytest's
    ``importlib`` import mode, or another conftest.py earlier on sys.path).
    """
    module = sys.modules.get(ref.module)
    if module is None:
        try:
            module = importlib.import_module(ref.module)
        except ImportError:
            module = None
    if module is not None and _same_file(module, ref.file):
        return module
    if ref.file is None:
        raise ExtensionError(f"cannot find {ref.describe()} (registered as {ref.name!r}) in this worker process")
    # not importable by name: load the file; under its own name if that name is free
    alias = ref.module if module is None else f"_ipcbench_replay_{abs(hash(ref.file))}_{ref.module}"
    if alias in sys.modules:
        return sys.modules[alias]
    spec = importlib.util.spec_from_file_location(alias, ref.file)
    if spec is None or spec.loader is None:
        raise ExtensionError(f"cannot load {ref.file} (where {ref.name!r} was registered) in this worker process")
    module = importlib.util.module_from_spec(spec)
    sys.modules[alias] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        sys.modules.pop(alias, None)
        raise
    return module


__all__ = ["ExtensionError", "Reference", "Registry", "check_name", "replay", "snapshot"]
