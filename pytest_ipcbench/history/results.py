"""Result records and their JSON file.

One :class:`Result` per case (scenario, backend, mode, payload, size, ranks) with its raw
samples in seconds, keyed by metric (``completion`` = max over readers per iteration, ``write``,
``read_avg``, ``read_min``, ``read_max``, ...). Statistics are derived from the samples when
needed, never stored apart from them. A :class:`ResultSet` adds the environment record.
"""

from __future__ import annotations

import json
import math
import os
import stat
import tempfile
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Iterable

from ..core.errors import FileMissing, IpcbenchError
from ..core.counters import CounterAbsent, Counters
from .stats import Summary, summarize

SCHEMA = "pytest-ipcbench/2"
#: older schemas this version still reads (their untyped ``extra`` keys become fields)
READABLE_SCHEMAS = ("pytest-ipcbench/1", SCHEMA)
PRIMARY_METRIC = "completion"
#: fields that schema 1 kept in ``extra`` under these keys
_V1_EXTRA_FIELDS = {"kind": "kind", "readers": "readers", "group": "group", "oversubscribed": "oversubscribed",
                    "plan": "plan", "copy_bandwidth_Bps": "copy_bandwidth", "verified": "verified",
                    "wait": "wait"}
#: schema 1 stored these derived values apart from the samples; now they are computed
_V1_DERIVED = ("efficiency", "bandwidth_Bps", "bandwidth_metric")


@dataclass
class Verified:
    """How many received objects were compared with what was written, and how many differed."""

    checked: int = 0
    failed: int = 0


@dataclass
class Result:
    scenario: str
    backend: str
    mode: str
    payload: str
    size: int
    ranks: int
    samples: dict[str, list[float]]
    nbytes: int = 0  # bytes of data actually moved per message
    primary: str = PRIMARY_METRIC
    extra: dict[str, Any] = field(default_factory=dict)
    # a further case parameter that is not a size, e.g. ``work=1ms`` for the granularity
    # scenario; empty for most cases, and then absent from the key (older files stay valid)
    variant: str = ""
    verified: Verified | None = None
    kind: str = ""  # the backend's kind: "store" or "channel"
    readers: int = 0
    group: str = ""  # "mpi" or "local"
    oversubscribed: bool | None = None  # more ranks than cores
    nodes: int = 1  # nodes the ranks ran on (COMM_TYPE_SHARED; see core/nodes.py)
    plan: dict[str, Any] | None = None  # warm-up and iterations the harness chose
    # bytes/s of a plain numpy copy of ``nbytes``, measured in the same run: the reference of
    # :meth:`efficiency` (a measurement, so it is stored; the efficiency is derived)
    copy_bandwidth: float | None = None
    wait: str = ""  # how the readers waited: "block" or "backoff" (docs/method.md rule 18)
    # what a message cost each rank, in counts (harness/count.py); None when not counted, and
    # then extra["counting"] says why
    counters: Counters | None = None

    @property
    def key(self) -> str:
        """Identity of the case across runs (what compare matches on)."""
        key = f"{self.scenario}/{self.backend}/{self.mode}/{self.payload}/{self.size}/r{self.ranks}"
        return f"{key}/{self.variant}" if self.variant else key

    def summary(self, metric: str | None = None) -> Summary:
        metric = metric or self.primary
        if metric not in self.samples:
            raise KeyError(f"{self.key} has no samples for {metric!r} (has {sorted(self.samples)})")
        return summarize(self.samples[metric])

    def throughput(self, metric: str | None = None) -> float:
        """Bytes per second at the median of ``metric``."""
        med = self.summary(metric).median
        return self.nbytes / med if med > 0 else float("nan")

    def bandwidth_metric(self) -> str:
        """The metric a bandwidth is computed from: the time to a fully read (touched) object when
        the harness measured it (docs/method.md rule 10: a zero-copy view must not win for free), else
        the primary metric."""
        return "completion_touched" if self.samples.get("completion_touched") else self.primary

    def bandwidth(self) -> float | None:
        """Bytes per second one reader gets: payload bytes / median time (see bandwidth_metric)."""
        samples = self.samples.get(self.bandwidth_metric())
        if not samples or not self.nbytes:
            return None
        med = summarize(samples).median
        return self.nbytes / med if med > 0 else None

    def efficiency(self) -> float | None:
        """:meth:`bandwidth` as a fraction of :attr:`copy_bandwidth` (None without either)."""
        bw = self.bandwidth()
        return bw / self.copy_bandwidth if bw and self.copy_bandwidth else None

    def cost(self, role: str, counter: str) -> int | float:
        """Per message: ``result.cost("reader", "syscalls.data")``; the writer's, or the largest
        over the readers. Raises :class:`CounterAbsent` (with the reason) when not measured."""
        if self.counters is None:
            raise CounterAbsent(f"{self.key} has no counters: {self.extra.get('counting', 'not counted')}")
        return self.counters.cost(role, counter)

    def to_dict(self) -> dict[str, Any]:
        counters = self.counters
        self.counters = None  # asdict would flatten it; it has its own format
        try:
            d = asdict(self)
        finally:
            self.counters = counters
        d["counters"] = counters.to_dict() if counters is not None else None
        d["key"] = self.key
        d["stats"] = {m: summarize(s).as_dict() for m, s in self.samples.items() if s}
        d["derived"] = {"bandwidth_Bps": self.bandwidth(), "efficiency": self.efficiency()}  # for readers of the file
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "Result":
        """A result from its JSON form, schema 2 or 1 (whose ``extra`` keys become fields)."""
        fields = {k: d[k] for k in cls.__dataclass_fields__ if k in d}
        extra = dict(fields.get("extra") or {})
        for old, new in _V1_EXTRA_FIELDS.items():
            if old in extra and fields.get(new) is None:
                fields[new] = extra.pop(old)
        for key in _V1_DERIVED:
            extra.pop(key, None)
        fields["extra"] = extra
        if isinstance(fields.get("verified"), dict):
            fields["verified"] = Verified(**fields["verified"])
        if isinstance(fields.get("counters"), dict):
            fields["counters"] = Counters.from_dict(fields["counters"])
        return cls(**fields)


class MalformedResults(IpcbenchError, ValueError):
    """A results file with the right schema whose content is not what this version writes."""


#: A results file larger than this is refused unread (ours hold a few MB; parsing JSON takes
#: several times the file's size in memory).
MAX_FILE_BYTES = 100 * 10**6
#: Samples of one metric in one case: the harness takes at most ``max_iterations`` (10,000) and a
#: gate merges a few rounds of them. The bootstrap of a comparison costs resamples x samples.
MAX_SAMPLES = 100_000
#: Nesting of an ``extra``, ``plan`` or ``env`` value (ours are 2-3 levels deep): deeper ones made
#: the recursive code that copies and prints them raise RecursionError.
MAX_DEPTH = 16
_MAX_INT = 2**63 - 1


def _describe(value: Any) -> str:
    try:
        text = json.dumps(value) if not isinstance(value, float) else repr(value)
    except (RecursionError, ValueError):
        text = f"a {type(value).__name__} nested too deep to show"
    return text if len(text) <= 60 else text[:57] + "..."


def _number(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and (
        math.isfinite(x) if isinstance(x, float) else abs(x) <= _MAX_INT)


def _whole(lo: int, hi: int = _MAX_INT) -> Any:
    return lambda v: isinstance(v, int) and not isinstance(v, bool) and lo <= v <= hi


def _opt(check: Any) -> Any:
    return lambda v: v is None or check(v)


def _str(v: Any) -> bool:
    return isinstance(v, str)


def _obj(v: Any) -> bool:
    return isinstance(v, dict)


def _depth(value: Any, limit: int) -> int:
    """How deep ``value`` nests (objects and lists), counted without recursion up to ``limit + 1``."""
    deepest, stack = 0, [(value, 0)]
    while stack:
        v, d = stack.pop()
        if isinstance(v, (dict, list)):
            d += 1
            deepest = max(deepest, d)
            if deepest > limit:
                return deepest
            stack.extend((x, d) for x in (v.values() if isinstance(v, dict) else v))
    return deepest


def _samples(v: Any) -> bool:
    return isinstance(v, dict) and all(
        isinstance(k, str) and isinstance(xs, list) and len(xs) <= MAX_SAMPLES
        and all(_number(x) and x >= 0 for x in xs) for k, xs in v.items())


def _known(checks: dict[str, tuple[Any, str]]) -> Any:
    """An object whose keys named in ``checks`` (when present) pass them; other keys are free."""
    def ok(v: Any) -> bool:
        return isinstance(v, dict) and all(k not in v or check(v[k]) for k, (check, _) in checks.items())
    return ok


def _which(checks: dict[str, tuple[Any, str]], v: Any) -> str:
    return "; ".join(f"{k!r} must be {what}" for k, (check, what) in checks.items()
                     if isinstance(v, dict) and k in v and not check(v[k]))


_NUMBER = (_number, "a finite number")
_OPT_NUMBER = (_opt(_number), "null or a finite number")
#: ``extra`` keys that our code reads back (what each must be); the rest is free-form
_EXTRA_KEYS: dict[str, tuple[Any, str]] = {
    "gate_rounds": (lambda v: isinstance(v, dict) and all(
        isinstance(c, list) and all(_whole(1)(n) for n in c) for c in v.values()),
        "an object of metric -> list of whole numbers >= 1"),
    "work_s": _NUMBER, "window": (_opt(_whole(0)), "null or a whole number >= 0"),
    "release": _OPT_NUMBER, "wall_s": _OPT_NUMBER, "passes": (_whole(0), "a whole number >= 0"),
    "test": (_str, "a string"), "case": (_str, "a string"), "config": (_opt(_str), "null or a string"),
}
#: ``env`` keys that our code reads back (report header, compare's warnings, the gate)
_ENV_KEYS: dict[str, tuple[Any, str]] = {
    "load_start": _OPT_NUMBER, "load_end": _OPT_NUMBER, "copy_bandwidth_MBps": _OPT_NUMBER,
    "cores": (_opt(_whole(0)), "null or a whole number >= 0"),
    "failures": (lambda v: v is None or (isinstance(v, list) and all(isinstance(x, str) for x in v)),
                 "null or a list of strings"),
    "mpi": (_opt(_known({"packages": (_opt(_obj), "")})), "null or an object (its 'packages' an object)"),
    "packages": (_opt(_obj), "null or an object"), "wait": (_opt(_obj), "null or an object"),
    "git": (_opt(_known({"commit": (_opt(_str), "")})), "null or an object (its 'commit' a string)"),
    "ranks_per_node": (_opt(lambda v: isinstance(v, list)), "null or a list"),
}

# field -> (check, what it must be); a field absent from a record takes its default
_CHECKS: dict[str, tuple[Any, str]] = {
    "scenario": (lambda v: isinstance(v, str) and v != "", "a non-empty string"),
    "backend": (lambda v: isinstance(v, str) and v != "", "a non-empty string"),
    "mode": (_str, "a string"),
    "payload": (_str, "a string"),
    "size": (_whole(0), "a whole number >= 0"),
    "ranks": (_whole(1, 2**31), "a whole number >= 1"),
    "nbytes": (_whole(0), "a whole number >= 0"),
    "samples": (_samples, f"an object of metric -> list of finite seconds >= 0 (at most {MAX_SAMPLES} a metric)"),
    "primary": (_str, "a string"),
    "extra": (_known(_EXTRA_KEYS), "an object"),
    "variant": (_str, "a string"),
    "verified": (lambda v: v is None or (isinstance(v, dict) and set(v) <= {"checked", "failed"} and all(
        _whole(0)(x) for x in v.values())),
        "null or {checked, failed} whole numbers"),
    "kind": (_str, "a string"),
    "readers": (_whole(0, 2**31), "a whole number >= 0"),
    "group": (_str, "a string"),
    "oversubscribed": (lambda v: v is None or isinstance(v, bool), "null, true or false"),
    "nodes": (_whole(1, 2**31), "a whole number >= 1"),
    "plan": (_opt(_known({"warmup": (_whole(0), ""), "iterations": (_whole(0), ""), "estimate": (_number, ""),
                          "verify": (_str, ""), "limited_by": (_str, "")})),
             "null or an object (warmup, iterations whole numbers; estimate a number; verify, limited_by strings)"),
    "copy_bandwidth": (_opt(lambda v: _number(v) and v > 0), "null or a finite number > 0"),
    "wait": (_str, "a string"),
    "counters": (lambda v: v is None or (isinstance(v, dict) and isinstance(v.get("ranks"), list) and all(
        isinstance(r, dict) and isinstance(r.get("totals"), dict) for r in v["ranks"])),
        "null or an object with ranks of totals"),
}
_REQUIRED = ("scenario", "backend", "mode", "payload", "size", "ranks", "samples")
_NESTED = ("extra", "plan", "samples", "verified")


def _why(name: str, value: Any, what: str) -> str:
    """What is wrong with a field: the sub-key for ``extra``/``env``, the count for ``samples``."""
    if name == "extra":
        detail = _which(_EXTRA_KEYS, value)
        return f"an object ({detail})" if detail else what
    if isinstance(value, int) and not isinstance(value, bool) and value > 0:
        return f"{what} (at most {2**31 if name in ('ranks', 'readers', 'nodes') else '2**63 - 1'})"
    if name == "samples" and isinstance(value, dict):
        big = {k: len(xs) for k, xs in value.items() if isinstance(xs, list) and len(xs) > MAX_SAMPLES}
        if big:
            metric, n = next(iter(big.items()))
            return f"{what}; {metric!r} has {n} samples (more than any run takes: refused, not loaded)"
    return what


def check_record(d: Any, where: str) -> None:
    """Raise MalformedResults naming ``where`` (file and record) and the field that is wrong."""
    if not isinstance(d, dict):
        raise MalformedResults(f"{where}: expected an object, got {_describe(d)}")
    for name in _REQUIRED:
        if name not in d:
            raise MalformedResults(f"{where}: field {name!r} is missing")
    for name in _NESTED:
        if name in d and _depth(d[name], MAX_DEPTH) > MAX_DEPTH:
            raise MalformedResults(f"{where}: field {name!r} is nested more than {MAX_DEPTH} levels deep")
    for name, (ok, what) in _CHECKS.items():
        if name in d and not ok(d[name]):
            raise MalformedResults(f"{where}: field {name!r} must be {_why(name, d[name], what)}, "
                                   f"got {_describe(d[name])}")
    samples = d["samples"]
    primary = d.get("primary", PRIMARY_METRIC)
    if samples and primary not in samples:
        raise MalformedResults(f"{where}: field 'primary' names {_describe(primary)}, a metric without samples "
                               f"(has {_describe(sorted(samples))})")
    if samples and not samples.get(primary):
        raise MalformedResults(f"{where}: field 'samples' has no samples of the primary metric {primary!r}")
    if samples.get(primary) and not any(x > 0 for x in samples[primary]):
        raise MalformedResults(f"{where}: field 'samples': every {primary!r} sample is 0 (no time measured)")


def check_env(env: Any, where: str) -> None:
    """Raise MalformedResults unless ``env`` is an object whose known keys have their types."""
    if not isinstance(env, dict):
        raise MalformedResults(f"{where}: field 'env' must be an object, got {_describe(env)}")
    if _depth(env, MAX_DEPTH) > MAX_DEPTH:
        raise MalformedResults(f"{where}: field 'env' is nested more than {MAX_DEPTH} levels deep")
    wrong = _which(_ENV_KEYS, env)
    if wrong:
        raise MalformedResults(f"{where}: field 'env': {wrong}")


def read_regular_file(path: Path, limit: int = MAX_FILE_BYTES) -> bytes:
    """The bytes of ``path`` if it is a regular file of at most ``limit`` bytes; never blocks on a
    FIFO, never reads a device or an endless file (MalformedResults otherwise)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)
    except FileNotFoundError:
        raise FileNotFoundError(f"no results file at {path}") from None
    except OSError as exc:
        raise MalformedResults(f"{path}: cannot open it: {exc.strerror or exc}") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            kind = ("a FIFO" if stat.S_ISFIFO(st.st_mode) else "a folder" if stat.S_ISDIR(st.st_mode)
                    else "a device" if stat.S_ISCHR(st.st_mode) or stat.S_ISBLK(st.st_mode)
                    else "a socket" if stat.S_ISSOCK(st.st_mode) else "not a file")
            raise MalformedResults(f"{path} is not a regular file ({kind}): refusing to read it as results")
        if st.st_size > limit:
            raise MalformedResults(f"{path} is larger than a results file may be ({st.st_size} bytes; at most "
                                   f"{limit}): refusing to read it")
        chunks, total = [], 0
        while True:
            chunk = os.read(fd, min(1 << 20, limit + 1 - total))
            if not chunk:
                break
            chunks.append(chunk)
            total += len(chunk)
            if total > limit:
                raise MalformedResults(f"{path} is larger than a results file may be (more than {limit} bytes): "
                                       "refusing to read it")
        return b"".join(chunks)
    except OSError as exc:
        raise MalformedResults(f"{path}: cannot read it: {exc.strerror or exc}") from None
    finally:
        os.close(fd)


@dataclass
class ResultSet:
    env: dict[str, Any] = field(default_factory=dict)
    results: list[Result] = field(default_factory=list)
    created: str = field(default_factory=lambda: datetime.now(timezone.utc).isoformat(timespec="seconds"))

    def add(self, result: Result) -> None:
        self.results.append(result)

    def extend(self, results: Iterable[Result]) -> None:
        self.results.extend(results)

    def by_key(self) -> dict[str, Result]:
        return {r.key: r for r in self.results}

    def to_dict(self) -> dict[str, Any]:
        return {
            "schema": SCHEMA,
            "created": self.created,
            "env": self.env,
            "results": [r.to_dict() for r in self.results],
        }

    def save(self, path: str | os.PathLike[str]) -> Path:
        """Write atomically (a reader never sees half a file)."""
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=".ipcbench-", suffix=".json", dir=path.parent)
        with os.fdopen(fd, "w") as f:
            json.dump(self.to_dict(), f, indent=1)
            f.write("\n")
        os.replace(tmp, path)
        return path

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> "ResultSet":
        """Read and check a results file: every problem is MalformedResults (a ValueError) naming
        the file, the record and the field; memory and time stay bounded (MAX_FILE_BYTES,
        MAX_SAMPLES, MAX_DEPTH) and a FIFO, folder or device is refused, never read."""
        path = Path(path)
        try:
            raw = read_regular_file(path)
        except FileNotFoundError:
            raise FileMissing(f"no results file at {path}") from None
        try:
            data = json.loads(raw)
        except RecursionError:
            raise MalformedResults(f"{path}: nested deeper than a results file can be (JSON parser's limit)") from None
        except json.JSONDecodeError as exc:
            raise MalformedResults(f"{path} is not a results JSON file: {exc}") from None
        except ValueError as exc:  # not UTF-8, or an integer of more digits than Python reads
            raise MalformedResults(f"{path} is not a results JSON file: {exc}") from None
        if not isinstance(data, dict) or not isinstance(data.get("schema"), str) \
                or data["schema"] not in READABLE_SCHEMAS:
            raise MalformedResults(f"{path} is not a pytest-ipcbench results file (schema {SCHEMA!r} expected)")
        # everything is checked here, at load: a bad record is an error naming the file, the
        # record and the field, never a crash half-way through a comparison or a report
        check_env(data.get("env", {}), str(path))
        if not isinstance(data.get("created", ""), str):
            raise MalformedResults(f"{path}: field 'created' must be a string, got {_describe(data['created'])}")
        records = data.get("results", [])
        if not isinstance(records, list):
            raise MalformedResults(f"{path}: field 'results' must be a list, got {_describe(records)}")
        for i, record in enumerate(records):
            where = f"{path}: results[{i}]"
            if isinstance(record, dict) and isinstance(record.get("key"), str):
                where += f" ({record['key'][:100]})"
            check_record(record, where)
        return cls(
            env=data.get("env", {}),
            results=[Result.from_dict(r) for r in data.get("results", [])],
            created=data.get("created", ""),
        )
