"""Print a Markdown table of per-message counters of every built-in backend (docs/measurements/2026-11-counters.md keeps one).

    .venv/bin/python tools/counter_table.py                      # local backends, 2 local ranks
    .venv/bin/mpiexec -n 2 .venv/bin/python tools/counter_table.py   # MPI backends (and the rest)
    .venv/bin/python tools/counter_table.py --results DIR/results.json  # from an `ipcbench run --count`

With ``--results`` the table is made from a run's results (every counted case, its writer and
the largest over its readers, as the report's cost table); deep mode's columns (copied bytes,
copy calls, instructions) are added when some case has them (``ipcbench run --deep``).

One broadcast case per backend, mode and size (1 writer, 1 reader), counted as the harness counts
(harness/count.py). A value is per message; ``~a..b`` marks a statistical counter (the repeats
differed: its spread), a plain number an exact one (every repeat the same).
"""

from __future__ import annotations

import argparse
import sys

from pytest_ipcbench.backends.base import BackendSpec, backend_names, unavailable_reason
from pytest_ipcbench.core.counters import DEEP_COUNTERS, CounterAbsent, Counters
from pytest_ipcbench.core.group import Group, MPIGroup, in_mpi_job
from pytest_ipcbench.core.local import LocalWorld
from pytest_ipcbench.core.payloads import PayloadSpec
from pytest_ipcbench.core.units import size_label
from pytest_ipcbench.harness.measure import BenchSettings, bench, run_bench
from pytest_ipcbench.harness.payload import BufferPayload

SHOWN = ("syscalls.total", "syscalls.data", "syscalls.sync", "syscalls.mapping", "syscalls.waiting",
         "io.rchar", "io.wchar", "faults.minor", "pickle.dumps", "pickle.loads", "alloc.bytes", "alloc.peak_bytes")
HEAD = ("syscalls", "data", "sync", "mapping", "waiting", "rchar B", "wchar B", "minor faults", "dumps", "loads",
        "alloc B", "alloc peak B")


def role_cell(c: Counters, role: str, name: str) -> str:
    """A role's value (the writer's, or the largest over the readers): plain if exact, else ~min..max."""
    try:
        value = c.cost(role, name)
    except CounterAbsent:
        return "absent"
    if c.exact(role, name):
        return f"{value:,}" if isinstance(value, int) else f"{value:,.3g}"
    spreads = [x.spread(name) for x in c.ranks if x.role == role]
    return f"~{min(s[0] for s in spreads):,.3g}..{max(s[1] for s in spreads):,.3g}"


def from_results(path: str) -> tuple[list[str], bool]:
    """Rows of every counted broadcast case of a results.json, and whether deep mode ran on some."""
    from pytest_ipcbench.results.results import ResultSet

    results = [r for r in ResultSet.load(path).results if r.counters is not None and r.scenario == "broadcast"]
    deep = any(n in x.totals or n in x.absent for r in results for x in r.counters.ranks for n in DEEP_COUNTERS)
    shown = SHOWN + (DEEP_COUNTERS if deep else ())
    order = {b: i for i, b in enumerate(backend_names())}
    out = []
    for r in sorted(results, key=lambda r: (order.get(r.backend, 99), r.backend, r.mode, r.size)):
        c = r.counters
        for role in ("writer", "reader"):
            if any(x.role == role for x in c.ranks):
                cells = " | ".join(role_cell(c, role, n) for n in shown)
                out.append(f"| {r.backend} | {r.mode} | {size_label(r.size)} | {role} | {cells} |")
    return out, deep


def rows(group: Group | None, world: LocalWorld | None, names: list[str], sizes: list[int],
         scenario: str = "broadcast", modes: tuple[str, ...] = ("bytes", "native"), kind: str = "ndarray") -> list[str]:
    out = []
    settings = BenchSettings(time_budget=0.1)
    for name in names:
        for mode in modes:
            for size in sizes:
                spec = BackendSpec(name, mode)
                buffer = scenario != "broadcast" or kind == "buffer"
                payload = BufferPayload(size) if buffer else PayloadSpec(kind, size)
                if world is not None:
                    result = run_bench(world.group(2), spec, payload, scenario, settings)
                else:
                    assert group is not None
                    result = bench(group, spec, payload, scenario, settings)
                    if group.rank != 0:
                        continue
                assert result is not None
                c = result.counters
                if c is None:
                    out.append(f"| {name} | {mode} | {size_label(size)} | | {result.extra.get('counting')} |")
                    continue
                for role in ("writer", "reader"):
                    cells = " | ".join(role_cell(c, role, n) for n in SHOWN)
                    out.append(f"| {name} | {mode} | {size_label(size)} | {role} | {cells} |")
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--backends", default="", help="comma list (default: every one runnable here)")
    parser.add_argument("--sizes", default="1024,1048576", help="payload bytes, comma list")
    parser.add_argument("--scenario", default="broadcast", help="broadcast (default), pingpong or stream")
    parser.add_argument("--modes", default="bytes,native", help="comma list")
    parser.add_argument("--kind", default="ndarray", help="broadcast payload kind, or buffer (a reference's "
                        "native mode gives a flat buffer back: compare a backend with it on buffer)")
    parser.add_argument("--results", help="make the table from this results.json (ipcbench run --count)")
    args = parser.parse_args()
    if args.results:
        lines, deep = from_results(args.results)
        head = HEAD + (("copied B", "copies", "instructions") if deep else ())
        print("\n".join(["| backend | mode | size | rank | " + " | ".join(head) + " |",
                         "|---|---|---|---|" + "---|" * len(head), *lines]))
        return 0
    sizes = [int(s) for s in args.sizes.split(",")]
    mpi = in_mpi_job()
    group = MPIGroup.world() if mpi else None
    wanted = [b for b in args.backends.split(",") if b] or list(backend_names())
    # a reference (ref-<backend>) runs where its backend does
    names = [b for b in wanted if unavailable_reason(b, group) is None
             and (mpi == b.removeprefix("ref-").startswith("mpi") or (mpi and args.backends))]
    header = ["| backend | mode | size | rank | " + " | ".join(HEAD) + " |",
              "|---|---|---|---|" + "---|" * len(HEAD)]
    if mpi:
        lines = rows(group, None, names, sizes, args.scenario, tuple(args.modes.split(",")), args.kind)
    else:
        with LocalWorld(2) as world:
            lines = rows(None, world, names, sizes, args.scenario, tuple(args.modes.split(",")), args.kind)
    if group is None or group.rank == 0:
        print("\n".join(header + lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
