"""The run record: what one run writes to ``results.json``, put together in one place.

A run (``ipcbench run``, a pytest session, the MPI methods' command) starts a :class:`RunRecord`
with the environment (:func:`~..core.envinfo.collect`, a run id, the load at the start), adds
each Result as it comes, and finishes it once: the in-run references, the notes each Result
gets from the whole run (its copy bandwidth, a harness error), the load at the end and the
run's own fields. Only :meth:`RunRecord.finish` builds the :class:`~.results.ResultSet`.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterable, Mapping
from dataclasses import replace
from datetime import datetime, timezone
from typing import Any

from ..core.envinfo import collect
from ..core.procs import cpu_mark, load_average, others_busy
from .results import Result, ResultSet


class RunRecord:
    """One run's environment and results, until :meth:`finish` makes them a ResultSet."""

    def __init__(self, env: Mapping[str, Any] | None = None) -> None:
        self.env: dict[str, Any] = dict(env or {})
        self._results: list[Result] = []
        self.created = datetime.now(timezone.utc).isoformat(timespec="seconds")  # the run's start
        self._cpu = cpu_mark()  # what other processes take from here on: others_cpu_share()

    @classmethod
    def start(cls, ranks: int | None, *, group_kind: str = "", mode: str = "", node_sizes: list[int] | None = None,
              extra: Mapping[str, Any] | None = None,
              update: Callable[[dict[str, Any]], None] | None = None) -> RunRecord:
        """The record at the start of a run: the environment (``collect``'s arguments), a run id
        (two files with different ids are not a paired experiment: ``ipcbench compare``), the load
        now; then ``update(env)`` (the pytest plugin's ``pytest_ipcbench_update_environment``)."""
        env = collect(ranks, group_kind=group_kind, mode=mode, node_sizes=node_sizes, extra=dict(extra or {}))
        env.update(run_id=uuid.uuid4().hex, load_start=load_average())
        if update is not None:
            update(env)
        return cls(env)

    def others_cpu_share(self) -> float | None:
        """The share of the machine's CPUs that processes other than this run's took since it
        started (``core.procs.others_busy``); None where /proc cannot tell."""
        return others_busy(self._cpu)

    @property
    def results(self) -> list[Result]:
        """The results so far, as built (what :meth:`finish` completes)."""
        return list(self._results)

    def add(self, result: Result, **extra: Any) -> Result:
        """Keep ``result``, with what the run knows of it added to its ``extra`` (a copy: the
        Result as the harness built it is not changed); the Result kept. A case measured again in
        the same run (a test calling ``ipc_bench`` twice on it) is kept as the variant ``callN``:
        a results file holds each case once, and the same test gives the same names next run."""
        kept = replace(result, extra={**result.extra, **extra}) if extra else result
        seen = sum(r.key == kept.key or r.extra.get("repeats") == kept.key for r in self._results)
        if seen:
            call = f"call{seen + 1}"
            kept = replace(kept, variant=f"{kept.variant}-{call}" if kept.variant else call,
                           extra={**kept.extra, "repeats": kept.key})
        self._results.append(kept)
        return kept

    def extend(self, results: Iterable[Result]) -> None:
        self._results.extend(results)

    def finish(self, *, references: Iterable[Result] = (),
               copy_bandwidth: Callable[[Result], float | None] | None = None,
               notes: Mapping[str, Mapping[str, Any]] | None = None,
               counters: Mapping[str, Any] | None = None, **env: Any) -> ResultSet:
        """The run's ResultSet: every result (with ``copy_bandwidth(result)`` when given, the
        ``extra`` of ``notes[result.key]`` and the counters of ``counters[result.key]``: deep
        mode's, merged in after the run), then each reference whose key is not there yet, and
        the environment with ``env`` and the load at the end."""
        notes, counters = notes or {}, counters or {}
        results = []
        for r in self._results:
            fields: dict[str, Any] = {}
            bw = copy_bandwidth(r) if copy_bandwidth is not None else None
            if bw:
                fields["copy_bandwidth"] = bw
            if r.key in notes:
                fields["extra"] = {**r.extra, **notes[r.key]}
            if r.key in counters:
                fields["counters"] = counters[r.key]
            results.append(replace(r, **fields) if fields else r)
        have = {r.key for r in results}
        for r in references:
            if r.key not in have:
                results.append(r)
                have.add(r.key)
        share = self.others_cpu_share()
        if share is not None:
            env.setdefault("others_cpu_share", round(share, 3))
        return ResultSet(env={**self.env, **env, "load_end": load_average()}, results=results, created=self.created)
