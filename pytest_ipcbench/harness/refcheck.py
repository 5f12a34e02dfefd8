"""Every backend against its reference: what the mechanism costs and what our wrapper adds.

For each backend, mode, scenario and size, :func:`compare_on` times the backend and its
reference (:mod:`.references`) with the same harness, interleaved (``bench_interleaved``: A B A
B ..., docs/method.md rule 16 and 17), ping-pong on 2 ranks, stream on ``ranks`` (default 2), and keeps
the ratio of the medians with its bootstrap interval. Scenarios: ``pingpong`` (latency = round trip / 2; bandwidth = bytes / latency) and
``stream`` (time per delivered message, channels only).

**The target** (issue 11): ping-pong latency within ``1.25 x reference + 5 us`` (so bandwidth at
least 0.8x the reference's), stream at least 0.8x the reference's messages per second.

**Receive buffers.** The native MPI point-to-point and Bcast references receive into one reused
buffer (as mpi4py.bench and OSU do); their ``-fresh`` variants allocate an array per message, and
are timed beside them in the ping-pong cases, so ``alloc`` (fresh / reused) shows what allocating
(first-touching new pages) costs. The stream scenario keeps a window of received messages alive
to verify them, which a single reused buffer cannot hold, so it uses the ``-fresh`` variant as
the reference where one exists.

``ipcbench selfcheck`` runs :func:`run_refchecks`: the MPI backends in ``mpiexec -n 2`` (this
module's ``--worker``), the others in two local processes.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from ..backends.base import MODES, BackendSpec, BackendUnavailable, backend_names, get_backend
from ..core import launcher
from ..core.csvfile import write_csv
from ..core.errors import UsageError
from ..core.group import Group, MPIGroup, in_mpi_job
from ..core.local import LocalWorld
from ..core.units import format_time, size_label
from ..history.stats import ratio_interval
from .measure import BenchSettings, BufferPayload, bench_interleaved
from .physics import FAST_END_PERCENTILE, PHYSICS_SHARE, SMALL_BYTES
from ..backends.references import reference_of

SIZES = (1, 1024, 64 * 1024, 10**6, 16 * 2**20)
SCENARIOS = ("pingpong", "stream", "broadcast")
TARGET_FACTOR = 1.25  # at most this many times the reference's time ...
TARGET_SLACK = 5e-6  # ... plus this (ping-pong latency only)
DEFAULT_TIME_BUDGET = 0.3
DEFAULT_ROUNDS = 10
_MARK = "@@ipcbench-refcheck "


@dataclass
class RefRow:
    """One case: the backend's and its reference's median seconds per message, and their ratio."""

    backend: str
    mode: str
    scenario: str
    size: int
    reference: str
    ours: float  # median seconds (latency for pingpong, per delivered message for stream)
    ref: float
    ratio: float  # median(ours) / median(ref)
    low: float
    high: float
    wait: str = ""
    fresh: float | None = None  # the -fresh reference variant's median, if timed
    samples: int = 0
    ranks: int = 2
    extra: dict[str, Any] = field(default_factory=dict)
    fast_end: float = float("nan")  # the 5th percentile of ours: the bound of the physics check
    below_physics: str = ""  # broadcast: why its completion reads faster than one crossing (physics.py)

    @property
    def target(self) -> float:
        """The longest time per message that meets the target (NaN without a reference)."""
        return TARGET_FACTOR * self.ref + (TARGET_SLACK if self.scenario == "pingpong" else 0.0)

    @property
    def has_reference(self) -> bool:
        return bool(self.reference)

    @property
    def ok(self) -> bool:
        """Within the target; a backend without a reference has no target to miss; a broadcast
        has physics to respect."""
        if self.scenario == "broadcast":
            return not self.below_physics
        return not self.has_reference or self.ours <= self.target

    @property
    def verdict(self) -> str:
        if self.scenario == "broadcast":  # checked against physics, not a reference
            return "BELOW PHYSICS" if self.below_physics else "physics ok"
        return "no ref" if not self.has_reference else "ok" if self.ok else "OUTSIDE"

    @property
    def overhead(self) -> float:
        """Seconds per message our wrapper adds to the mechanism (negative: faster)."""
        return self.ours - self.ref

    @property
    def alloc(self) -> float | None:
        """fresh / reused receive buffer: what allocating a receive array per message costs."""
        return self.fresh / self.ref if self.fresh and self.ref > 0 else None

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "target": self.target, "ok": self.ok, "overhead": self.overhead, "alloc": self.alloc}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "RefRow":
        return cls(**{k: d[k] for k in cls.__dataclass_fields__ if k in d})


def _fresh_variant(ref: str) -> str | None:
    try:
        get_backend(ref + "-fresh")
    except (ValueError, BackendUnavailable):  # no such variant
        return None
    return ref + "-fresh"


HOW_TO_ADD_A_REFERENCE = ("add one: a Backend subclass with internal = True doing the plainest use of the "
                          "same mechanism, registered next to the backend, and named in the backend's "
                          "reference = '...' (docs/extending.md, 'A reference for ipcbench selfcheck')")


def missing_reference(name: str) -> str | None:
    """Why backend ``name`` cannot be timed against a reference (``None`` when it can): what is
    missing and how to add it. Its own figures are still measured, alone."""
    try:
        cls = get_backend(name)
    except BackendUnavailable:
        return None  # cannot run here at all: reported as such
    if not cls.reference:
        return f"{name} names no reference (its class attribute reference is not set): {HOW_TO_ADD_A_REFERENCE}"
    try:
        get_backend(cls.reference)
    except ValueError:
        return f"{name} names the reference {cls.reference!r}, which is not registered: {HOW_TO_ADD_A_REFERENCE}"
    except BackendUnavailable:
        return None
    return None


def stream_modes(cls: type, modes: Sequence[str]) -> list[str]:
    """The modes the stream scenario checks ``cls`` in: a backend whose native values are views that
    the next write overwrites (``native_views_until_next_write``, mpi-shm-win) cannot keep the
    scenario's window of values, so its native stream case is timed in bytes mode instead (once)."""
    if not getattr(cls, "native_views_until_next_write", False):
        return list(modes)
    return list(dict.fromkeys("bytes" if m == "native" else m for m in modes))


def stream_notes(backends: Sequence[str], modes: Sequence[str], scenarios: Sequence[str]) -> list[str]:
    """What :func:`stream_modes` changed, in words for the report (empty when nothing)."""
    if "stream" not in scenarios or "native" not in modes:
        return []
    notes = []
    for name in backends:
        try:
            cls = get_backend(name)
        except (ValueError, BackendUnavailable):
            continue
        if cls.kind == "channel" and getattr(cls, "native_views_until_next_write", False):
            notes.append(f"{name}: stream timed in bytes mode (its native values are views that the next write "
                         "overwrites, so the scenario's window of them cannot be kept)")
    return notes


def compare_on(
    group: Group,
    backends: Sequence[str],
    modes: Sequence[str] = ("native",),
    sizes: Sequence[int] = SIZES,
    scenarios: Sequence[str] = SCENARIOS,
    time_budget: float = DEFAULT_TIME_BUDGET,
    rounds: int = DEFAULT_ROUNDS,
    wait: str | None = None,
    say: Any = None,
) -> list[RefRow]:
    """Collective on a 2-rank group: every case, backend against reference; rows on rank 0."""
    settings = BenchSettings(time_budget=time_budget)
    rows: list[RefRow] = []
    for name in backends:
        cls = get_backend(name)
        ref = "" if missing_reference(name) else reference_of(name)  # none: the backend's figures alone
        fresh = _fresh_variant(ref) if ref else None
        for scenario in scenarios:
            if scenario in ("stream", "broadcast") and cls.kind != "channel":
                continue
            for mode in stream_modes(cls, modes) if scenario == "stream" else modes:
                for size in sizes:
                    if scenario == "broadcast" and size > SMALL_BYTES:
                        continue  # the physics check: 1 B - 1 KB, against the same run's ping-pong
                    specs = [BackendSpec(name, mode, wait=wait)]
                    reference = ref if scenario != "broadcast" else ""
                    if scenario == "stream" and fresh and mode == "native":
                        reference = fresh  # a window of kept messages needs a buffer each
                    if reference:
                        specs.append(BackendSpec(reference, mode, wait=wait))
                    if scenario == "pingpong" and fresh and mode == "native":
                        specs.append(BackendSpec(fresh, mode, wait=wait))
                    results = bench_interleaved(group, specs, BufferPayload(size), scenario, settings, rounds)
                    if group.rank != 0:
                        continue
                    ours = results[0]
                    assert ours is not None
                    metric = ours.primary
                    fast_end = float(np.percentile(ours.samples[metric], FAST_END_PERCENTILE))
                    if not reference:
                        med = float(np.median(ours.samples[metric]))
                        nan = float("nan")
                        rows.append(RefRow(backend=name, mode=mode, scenario=scenario, size=size, reference="",
                                           ours=med, ref=nan, ratio=nan, low=nan, high=nan, wait=ours.wait,
                                           samples=len(ours.samples[metric]), ranks=ours.ranks, fast_end=fast_end))
                        if say is not None:
                            say(rows[-1])
                        continue
                    theirs = results[1]
                    assert theirs is not None
                    iv = ratio_interval(ours.samples[metric], theirs.samples[metric])
                    row = RefRow(
                        backend=name, mode=mode, scenario=scenario, size=size, reference=reference,
                        ours=iv.median_a, ref=iv.median_b, ratio=iv.ratio, low=iv.low, high=iv.high,
                        wait=ours.wait, samples=len(ours.samples[metric]),
                        ranks=ours.ranks, fast_end=fast_end,
                    )
                    if len(results) > 2 and results[2] is not None:
                        row.fresh = float(sorted(results[2].samples[metric])[len(results[2].samples[metric]) // 2])
                    rows.append(row)
                    if say is not None:
                        say(row)
    return rows


# ----------------------------------------------------------------------------------- running


def _split(backends: Sequence[str]) -> tuple[list[str], list[str]]:
    """(backends that need MPI, the others): the first run under mpiexec, the others locally."""
    mpi, local = [], []
    for name in backends:
        (mpi if get_backend(name).needs_mpi else local).append(name)
    return mpi, local


def _local_rank0(group: Group, kwargs: dict[str, Any]) -> list[RefRow]:
    return compare_on(group, **kwargs)


def run_refchecks(
    backends: Sequence[str] | None = None,
    modes: Sequence[str] = ("native",),
    sizes: Sequence[int] = SIZES,
    scenarios: Sequence[str] = SCENARIOS,
    time_budget: float = DEFAULT_TIME_BUDGET,
    rounds: int = DEFAULT_ROUNDS,
    wait: str | None = None,
    mpiexec: str | None = None,
    timeout: float = 1800.0,
    ranks: int = 2,
) -> tuple[list[RefRow], list[str]]:
    """Every backend against its reference; (rows, problems). Rank 0's rows under MPI.

    ``ranks``: the stream scenario's ranks (1 writer, ranks - 1 readers); ping-pong always uses 2.
    """
    if ranks < 2:
        raise UsageError(f"the reference checks need at least 2 ranks, got {ranks}")
    backends = list(backend_names()) if backends is None else list(backends)
    # a backend without a reference is timed alone; missing_reference() says what to add
    for mode in modes:
        if mode not in MODES:
            raise UsageError(f"unknown mode {mode!r}; choose from {', '.join(MODES)}")
    for s in scenarios:
        if s not in SCENARIOS:
            raise UsageError(f"unknown scenario {s!r} for the reference checks; choose from {', '.join(SCENARIOS)}")
    kwargs = dict(modes=list(modes), sizes=list(sizes), scenarios=list(scenarios), time_budget=time_budget,
                  rounds=rounds, wait=wait)
    mpi, local = _split(backends)
    rows: list[RefRow] = []
    problems: list[str] = []
    if in_mpi_job():
        world = MPIGroup.world()  # pingpong uses its first 2 ranks, stream all of them
        usable = [b for b in backends if get_backend(b).unavailable(world) is None]
        problems += [f"{b}: {get_backend(b).unavailable(world)}" for b in backends if b not in usable]
        rows.extend(compare_on(world, usable, **kwargs))
        check_physics(rows)
        return rows, problems
    if mpi:
        spec = json.dumps({"backends": mpi, **kwargs})
        try:
            job = launcher.run(ranks, "pytest_ipcbench.harness.refcheck", ["--worker", spec], mark=_MARK,
                               timeout=timeout, mpiexec=mpiexec)
        except launcher.MPIExecNotFound:
            problems.append(f"{launcher.NO_MPIEXEC}: {', '.join(mpi)} not checked")
        else:
            if job.timed_out:
                problems.append(f"the MPI reference checks did not finish within {timeout:g} s")
            else:
                rows.extend(RefRow.from_dict(d) for d in job.records)
                if job.returncode:
                    problems.append(f"the MPI reference checks failed (exit {job.returncode}): "
                                    f"{job.stderr.strip()[-2000:]}")
    if local:
        try:
            with LocalWorld(ranks) as world:
                for scenario in scenarios:  # a local group is exactly the ranks a scenario runs on
                    n = 2 if scenario == "pingpong" else ranks
                    args = {**kwargs, "backends": local, "scenarios": [scenario]}
                    rows.extend(world.run(_local_rank0, args, ranks=n)[0])
        except Exception as exc:  # noqa: BLE001 (reported, the MPI rows still count)
            problems.append(f"the local reference checks failed: {type(exc).__name__}: {exc}")
    check_physics(rows)
    order = {name: i for i, name in enumerate(backends)}
    rows.sort(key=lambda r: (SCENARIOS.index(r.scenario), order.get(r.backend, 99), MODES.index(r.mode), r.size))
    return rows, problems


def check_physics(rows: Sequence[RefRow]) -> list[RefRow]:
    """Mark the broadcast rows that complete faster than the fast end of the same backend's (and
    mode's) smallest ping-pong: a harness error (physics.py). Returns the marked rows."""
    pongs: dict[tuple[str, str], RefRow] = {}
    for r in rows:
        key = (r.backend, r.mode)
        if r.scenario == "pingpong" and (key not in pongs or r.size < pongs[key].size):
            pongs[key] = r
    marked = []
    for r in rows:
        pong = pongs.get((r.backend, r.mode))
        if r.scenario == "broadcast" and pong is not None and r.ours < PHYSICS_SHARE * pong.fast_end:
            r.below_physics = (f"harness error: broadcast {r.backend} {r.mode} {size_label(r.size)} to {r.ranks - 1} "
                               f"reader(s) completes in {format_time(r.ours)} (median), below {PHYSICS_SHARE:g}x the fast end of "
                               f"its one-way ping-pong crossings ({format_time(pong.fast_end)} at the 5th percentile)")
            marked.append(r)
    return marked


def _worker(spec: str) -> int:
    world = MPIGroup.world()  # pingpong uses its first 2 ranks, stream all of them

    def say(row: RefRow) -> None:
        launcher.emit(_MARK, row.as_dict())

    compare_on(world, say=say, **json.loads(spec))
    world.barrier()
    return 0


# ---------------------------------------------------------------------------------- reporting


def _bw(row: RefRow, t: float) -> str:
    return f"{row.size / t / 1e6:,.0f}" if t > 0 and row.size >= 1024 else ""


def _ratio_cells(r: RefRow) -> str:
    if not r.has_reference:
        return f"{'-':>6} {'-':>13}"
    return f"{r.ratio:>5.2f}x {r.low:>5.2f}-{r.high:<5.2f}x"


def table(rows: Sequence[RefRow]) -> str:
    """The rows for a terminal: one line per case."""
    head = (f"{'scenario':<8} {'r':>1} {'backend':<10} {'mode':<6} {'size':>7} {'ours':>9} {'reference':>9} "
            f"{'ratio':>6} {'95% CI':>13} {'MB/s ours':>10} {'ref':>7} {'alloc':>6}  {'target':<7} reference")
    lines = [head, "-" * len(head)]
    for r in rows:
        alloc = f"{r.alloc:.2f}x" if r.alloc is not None else ""
        lines.append(
            f"{r.scenario:<8} {r.ranks:>1} {r.backend:<10} {r.mode:<6} {size_label(r.size):>7} {format_time(r.ours):>9} "
            f"{format_time(r.ref):>9} {_ratio_cells(r)} "
            f"{_bw(r, r.ours):>10} {_bw(r, r.ref):>7} {alloc:>6}  {r.verdict:<7} {r.reference or '(none)'}"
        )
    lines.append(
        f"ours / reference: the same harness, interleaved; r: ranks; pingpong: latency (round trip / 2), "
        f"stream: per delivered message; broadcast: completion (delivery to the last reader), checked against the "
        f"fast end of its own ping-pong (physics); target: ours <= {TARGET_FACTOR:g} x reference (+ "
        f"{TARGET_SLACK * 1e6:g} us for pingpong); alloc: the reference with a fresh receive array per "
        f"message / with one reused buffer; MB = 10^6 bytes"
    )
    return "\n".join(lines)


def markdown(rows: Sequence[RefRow], env: dict[str, Any] | None = None) -> str:
    out = ["# Every backend against its reference", ""]
    if env:
        out += [", ".join(f"{k}: {v}" for k, v in env.items()), ""]
    out += [
        "| scenario | backend | mode | size | ours | reference | overhead | ratio (95% CI) | alloc | target | reference |",
        "|---|---|---|---:|---:|---:|---:|---|---:|---|---|",
    ]
    for r in rows:
        alloc = f"{r.alloc:.2f}x" if r.alloc is not None else ""
        out.append(
            f"| {r.scenario} | {r.backend} | {r.mode} | {size_label(r.size)} | {format_time(r.ours)} | "
            f"{format_time(r.ref)} | {format_time(r.overhead) if r.overhead >= 0 else '-' + format_time(-r.overhead)} | "
            f"{f'{r.ratio:.2f}x ({r.low:.2f}-{r.high:.2f})' if r.has_reference else '-'} | {alloc} | {r.verdict} | "
            f"{r.reference or '(none)'} |"
        )
    out += ["", f"Target: ours <= {TARGET_FACTOR:g} x reference (+ {TARGET_SLACK * 1e6:g} us for pingpong). "
            "overhead = what our wrapper adds per message; alloc = the reference with a fresh receive array "
            "per message / with one reused buffer (the cost of allocation). See docs/references.md.", ""]
    return "\n".join(out)


def plot(rows: Sequence[RefRow], path: Path) -> Path | None:
    """ours / reference against size, a panel per scenario, a line per backend and mode."""
    rows = [r for r in rows if r.has_reference]  # a backend timed alone has no ratio to draw
    if not rows:
        return None
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    scenarios = [s for s in SCENARIOS if any(r.scenario == s for r in rows)]
    fig = Figure(figsize=(6 * len(scenarios), 4.5))
    for i, scenario in enumerate(scenarios):
        ax = fig.add_subplot(1, len(scenarios), i + 1)
        lines: dict[tuple[str, str], list[RefRow]] = {}
        for r in rows:
            if r.scenario == scenario:
                lines.setdefault((r.backend, r.mode), []).append(r)
        for (backend, mode), rs in lines.items():
            rs.sort(key=lambda r: r.size)
            x = [max(r.size, 1) for r in rs]
            y = [r.ratio for r in rs]
            err = [[max(0.0, r.ratio - r.low) for r in rs], [max(0.0, r.high - r.ratio) for r in rs]]
            ax.errorbar(x, y, yerr=err, marker="o", capsize=3, linestyle="-" if mode == "native" else "--",
                        label=f"{backend} {mode}")
        ax.axhline(1.0, color="grey", linewidth=0.8)
        ax.axhline(TARGET_FACTOR, color="red", linewidth=0.8, linestyle=":", label=f"{TARGET_FACTOR:g}x")
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("message size (bytes)")
        ax.set_ylabel("backend / reference (time)")
        ax.set_title(f"{scenario}: our backend against its mechanism")
        ax.legend(fontsize=7)
    FigureCanvasAgg(fig)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    return path


def write_report(rows: Sequence[RefRow], out: Path, env: dict[str, Any] | None = None) -> list[Path]:
    """summary.md, references.csv, references.png and references.json in ``out``."""
    out.mkdir(parents=True, exist_ok=True)
    files = [out / "summary.md"]
    files[0].write_text(markdown(rows, env))
    csv_rows = [{k: v for k, v in r.as_dict().items() if k != "extra"} for r in rows]
    got = write_csv(out / "references.csv", csv_rows)
    if got:
        files.append(got)
    (out / "references.json").write_text(json.dumps({"env": env or {}, "rows": [r.as_dict() for r in rows]}, indent=1))
    files.append(out / "references.json")
    try:
        png = plot(rows, out / "references.png")
        if png:
            files.append(png)
    except ImportError:
        pass
    return files


def main(argv: Sequence[str] | None = None) -> int:
    """The MPI part, under ``mpiexec -n 2`` (launched by :func:`run_refchecks`)."""
    parser = argparse.ArgumentParser(prog="python -m pytest_ipcbench.harness.refcheck")
    parser.add_argument("--worker", action="store_true", help="required: run the MPI part on every rank")
    parser.add_argument("spec", help="JSON: the keyword arguments of compare_on")
    args = parser.parse_args(argv)
    if not args.worker:
        parser.error("this module is the MPI part of `ipcbench selfcheck`: run that instead")
    return _worker(args.spec)


if __name__ == "__main__":
    sys.exit(main())


__all__ = ["RefRow", "SIZES", "missing_reference", "stream_modes", "stream_notes", "TARGET_FACTOR", "TARGET_SLACK", "compare_on", "markdown", "plot", "run_refchecks",
           "table", "write_report"]
