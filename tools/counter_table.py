"""Print a Markdown table of per-message counters of every built-in backend (README "Counters").

    .venv/bin/python tools/counter_table.py                      # local backends, 2 local ranks
    .venv/bin/mpiexec -n 2 .venv/bin/python tools/counter_table.py   # MPI backends (and the rest)

One broadcast case per backend, mode and size (1 writer, 1 reader), counted as the harness counts
(harness/count.py). A value is per message; ``~a..b`` marks a statistical counter (the repeats
differed: its spread), a plain number an exact one (every repeat the same).
"""

from __future__ import annotations

import argparse
import sys

from pytest_ipcbench.backends.base import BackendSpec, backend_names, unavailable_reason
from pytest_ipcbench.core.counters import CounterAbsent
from pytest_ipcbench.core.group import Group, MPIGroup, in_mpi_job
from pytest_ipcbench.core.local import LocalWorld
from pytest_ipcbench.core.payloads import PayloadSpec
from pytest_ipcbench.core.units import size_label
from pytest_ipcbench.harness.measure import BenchSettings, bench, run_bench

SHOWN = ("syscalls.total", "syscalls.data", "syscalls.sync", "syscalls.mapping", "syscalls.waiting",
         "io.rchar", "io.wchar", "faults.minor", "pickle.dumps", "pickle.loads", "alloc.peak_bytes")
HEAD = ("syscalls", "data", "sync", "mapping", "waiting", "rchar B", "wchar B", "minor faults", "dumps", "loads",
        "alloc peak B")


def cell(rank: object, name: str) -> str:
    try:
        value = rank.value(name)  # type: ignore[attr-defined]
    except CounterAbsent:
        return "absent"
    if rank.exact(name):  # type: ignore[attr-defined]
        return f"{value:,}" if isinstance(value, int) else f"{value:,.3g}"
    lo, hi = rank.spread(name)  # type: ignore[attr-defined]
    return f"~{lo:,.3g}..{hi:,.3g}"


def rows(group: Group | None, world: LocalWorld | None, names: list[str], sizes: list[int]) -> list[str]:
    out = []
    settings = BenchSettings(time_budget=0.1)
    for name in names:
        for mode in ("bytes", "native"):
            for size in sizes:
                spec, payload = BackendSpec(name, mode), PayloadSpec("ndarray", size)
                if world is not None:
                    result = run_bench(world.group(2), spec, payload, "broadcast", settings)
                else:
                    assert group is not None
                    result = bench(group, spec, payload, "broadcast", settings)
                    if group.rank != 0:
                        continue
                assert result is not None
                c = result.counters
                if c is None:
                    out.append(f"| {name} | {mode} | {size_label(size)} | | {result.extra.get('counting')} |")
                    continue
                for rank in (c.writer, c.reader):
                    cells = " | ".join(cell(rank, n) for n in SHOWN)
                    out.append(f"| {name} | {mode} | {size_label(size)} | {rank.role} | {cells} |")
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--backends", default="", help="comma list (default: every one runnable here)")
    parser.add_argument("--sizes", default="1024,1048576", help="payload bytes, comma list")
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    mpi = in_mpi_job()
    group = MPIGroup.world() if mpi else None
    wanted = [b for b in args.backends.split(",") if b] or list(backend_names())
    names = [b for b in wanted if unavailable_reason(b, group) is None and (mpi == b.startswith("mpi"))]
    header = ["| backend | mode | size | rank | " + " | ".join(HEAD) + " |",
              "|---|---|---|---|" + "---|" * len(HEAD)]
    if mpi:
        lines = rows(group, None, names, sizes)
    else:
        with LocalWorld(2) as world:
            lines = rows(None, world, names, sizes)
    if group is None or group.rank == 0:
        print("\n".join(header + lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
