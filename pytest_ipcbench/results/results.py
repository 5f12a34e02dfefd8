"""Result records and their JSON file.

One :class:`Result` per case (scenario, backend, mode, payload, size, ranks) with its raw
samples in seconds, keyed by metric (``completion`` = max over readers per iteration, ``write``,
``read_avg``, ``read_min``, ``read_max``, ...). Statistics are derived from the samples when
needed, never stored apart from them. A :class:`ResultSet` adds the environment record.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from ..core.counters import CounterAbsent, Counters
from ..core.errors import FileMissing
from ..core.outdir import atomic_output
from .stats import Summary, summarize
from .validation import MalformedResults, check_env, check_record, describe_value, read_regular_file

SCHEMA = "pytest-ipcbench/2"
#: older schemas this version still reads (their untyped ``extra`` keys become fields)
READABLE_SCHEMAS = ("pytest-ipcbench/1", SCHEMA)
PRIMARY_METRIC = "completion"
#: fields that schema 1 kept in ``extra`` under these keys
_V1_EXTRA_FIELDS = {"kind": "delivery", "readers": "readers", "group": "group", "oversubscribed": "oversubscribed",
                    "plan": "plan", "copy_bandwidth_Bps": "copy_bandwidth", "verified": "verified",
                    "wait": "wait"}
#: schema 1 stored these derived values apart from the samples; now they are computed
_V1_DERIVED = ("efficiency", "bandwidth_Bps", "bandwidth_metric")
#: names of before 0.2 that results files already written hold: field ``kind`` is now ``delivery``,
#: the shared-array experiment's scenarios were named after the seed paper that proposed it
OLD_FIELDS = {"kind": "delivery"}
OLD_SCENARIOS = {"seed002": "shared-array", "seed002-handle": "shared-array-handle"}


def current_key(key: str) -> str:
    """A case key of a file written before 0.2, as this version names the case."""
    scenario, sep, rest = key.partition("/")
    return OLD_SCENARIOS.get(scenario, scenario) + sep + rest


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
    delivery: str = ""  # the backend's delivery (Backend.delivery): "store" or "channel"
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
    def from_dict(cls, d: dict[str, Any]) -> Result:
        """A result from its JSON form, schema 2 or 1 (whose ``extra`` keys become fields)."""
        d = {OLD_FIELDS.get(k, k): v for k, v in d.items()}
        fields = {k: d[k] for k in cls.__dataclass_fields__ if k in d}
        if fields.get("scenario") in OLD_SCENARIOS:
            fields["scenario"] = OLD_SCENARIOS[fields["scenario"]]
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
        """Write atomically (a reader never sees half a file; on an error, no file and no temporary
        one: :func:`~..core.outdir.atomic_output`)."""
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        data = self.to_dict()
        results = data.pop("results")
        with atomic_output(path, "results") as tmp, open(tmp, "w") as f:
            # the header indented for a reader; one compact line per result: a gate's merged file
            # holds millions of samples, one per line made it 2x larger and slower to write
            head = json.dumps(data, indent=1)
            f.write(head[:-2] + ',\n "results": [')
            for i, r in enumerate(results):
                f.write(("\n  " if i == 0 else ",\n  ") + json.dumps(r, separators=(",", ":")))
            f.write("\n ]\n}\n")
        return path

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> ResultSet:
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
        except ValueError as exc:  # not JSON, not UTF-8, or an integer of more digits than Python reads
            raise MalformedResults(f"{path} is not a results JSON file: {exc}") from None
        if not isinstance(data, dict) or not isinstance(data.get("schema"), str) \
                or data["schema"] not in READABLE_SCHEMAS:
            raise MalformedResults(f"{path} is not a pytest-ipcbench results file (schema {SCHEMA!r} expected)")
        # everything is checked here, at load: a bad record is an error naming the file, the
        # record and the field, never a crash half-way through a comparison or a report
        check_env(data.get("env", {}), str(path))
        if not isinstance(data.get("created", ""), str):
            raise MalformedResults(f"{path}: field 'created' must be a string, got {describe_value(data['created'])}")
        records = data.get("results", [])
        if not isinstance(records, list):
            raise MalformedResults(f"{path}: field 'results' must be a list, got {describe_value(records)}")
        for i, record in enumerate(records):
            where = f"{path}: results[{i}]"
            if isinstance(record, dict) and isinstance(record.get("key"), str):
                where += f" ({record['key'][:100]})"
            check_record(record, where, PRIMARY_METRIC)
        results = [Result.from_dict(r) for r in records]
        first: dict[str, int] = {}
        for i, r in enumerate(results):  # one case twice: which one would a verdict be on?
            if first.setdefault(r.key, i) != i:
                raise MalformedResults(f"{path}: results[{i}] repeats the case {r.key[:100]} of "
                                       f"results[{first[r.key]}]; a case may be recorded once")
        return cls(env=data.get("env", {}), results=results, created=data.get("created", ""))
