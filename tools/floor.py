"""Where each microsecond of a small message goes (issue 40): a per-step breakdown of one
backend's ping-pong, its counts and allocations per message, beside its reference and the
harness's own floor (the ``null`` backend).

Run on 2 ranks (the MPI backends need mpiexec; the others run there too, as ``ipcbench run``
times shm, lmdb and zmq among MPI ranks)::

    mpiexec -n 2 python tools/floor.py shm,mpi-p2p,mpi-buffer,mpi-shm-win,zmq,lmdb --sizes 1,65536,1000000
    mpiexec -n 4 python tools/floor.py shm --sizes 1,1000,65536 --broadcast   # completion beside ref-shm's
    mpiexec -n 2 python tools/floor.py --mpi-floor --sizes 1   # the MPI references against MPI's own loops
    MPIR_CVAR_DEVICE_COLLECTIVES=none mpiexec -n 2 python tools/floor.py --mpi-floor --sizes 1   # Bcast over point-to-point

Per backend and size it prints, rank 0's view of one round trip (medians of ``--n`` iterations):

* ``write``: rank 0's ``write()``; ``read``: rank 1's ``read()`` of a message already there
  (started 200 us after both left a barrier, so it hardly waits); ``wait``: what is left of the one-way
  latency, ``rtt/2 - write - read`` (the crossing and the wake-up); ``verify``: the harness's
  ``payload.equal`` (outside the timed loop);
* then the harness's pingpong (``bench_interleaved``, interleaved with the reference, for MPI
  backends ``mpi-raw`` (the self-check's raw loop, held against mpi4py.bench) and ``null``): one-way latency, and per message system calls, pickles and bytes allocated
  (tracemalloc), writer/reader, from the counting pass (harness/count.py).

Times on a shared machine move with its load (print ``uptime`` beside them); the counts do not.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

from pytest_ipcbench.backends.base import BackendSpec, get_backend
from pytest_ipcbench.core.group import MPIGroup
from pytest_ipcbench.core.units import parse_size, size_label
from pytest_ipcbench.harness import selfcheck  # (registers mpi-raw)
from pytest_ipcbench.harness.measure import BenchSettings, BufferPayload, bench_interleaved

COUNTS = ("syscalls.total", "pickle.dumps", "pickle.loads", "alloc.bytes", "faults.minor")


def steps(group: MPIGroup, name: str, size: int, n: int) -> dict[str, float] | None:
    """Medians (seconds) of write, read (message already there), rtt/2 and verify; rank 0 only."""
    payload = BufferPayload(size)
    obj = payload.build(seed=1)
    fwd = BackendSpec(name, "native", root=0).open(group)
    back = BackendSpec(name, "native", root=1).open(group)
    with fwd, back:
        perf = time.perf_counter
        writes, reads, rtts, verifies = [], [], [], []
        for i in range(n + 20):  # round trips first
            if group.rank == 0:
                t0 = perf()
                fwd.write(obj)
                got = back.read()
                t1 = perf()
                v0 = perf()
                payload.equal(got, obj)
                v1 = perf()
                if i >= 20:
                    rtts.append(t1 - t0)
                    verifies.append(v1 - v0)
                del got
            else:
                back.write(fwd.read())
        for i in range(n + 20):  # then apart: the reader starts after the message is there
            group.barrier()
            if group.rank == 0:
                t0 = perf()
                fwd.write(obj)
                t1 = perf()
                if i >= 20:
                    writes.append(t1 - t0)
            else:
                time.sleep(200e-6)
                t0 = perf()
                got = fwd.read()
                t1 = perf()
                del got
                if i >= 20:
                    reads.append(t1 - t0)
        reads = group.bcast(reads, root=1)
    if group.rank != 0:
        return None
    med = statistics.median
    return {"write": med(writes), "read": med(reads), "oneway": med(rtts) / 2, "verify": med(verifies),
            "write_min": min(writes), "read_min": min(reads)}


def broadcast(group: MPIGroup, name: str, size: int, budget: float, rounds: int) -> None:
    """Broadcast completion of ``name`` and its reference, interleaved; medians printed on rank 0."""
    ref = get_backend(name).reference
    specs = [BackendSpec(name, "native")] + ([BackendSpec(ref, "native")] if ref else [])
    results = bench_interleaved(group, specs, BufferPayload(size), "broadcast", BenchSettings(time_budget=budget),
                                rounds)
    if group.rank == 0:
        meds = [statistics.median(r.samples["completion"]) * 1e6 for r in results if r is not None]
        ratio = f", ours / reference {meds[0] / meds[1]:.2f}" if len(meds) == 2 else ""
        print(f"{name} {size_label(size)} broadcast, {group.size} ranks: completion {meds[0]:.1f} us"
              + (f", {ref} {meds[1]:.1f} us" if len(meds) == 2 else "") + ratio, flush=True)


def stubbed(names: list[str], size: int, number: int = 1000, repeat: int = 50) -> None:
    """The Python work per message of MPI backends and references, MPI stubbed out (no process,
    no waiting): the least of many short timeit runs, which a loaded machine stretches least. One
    process; sizes that fit in a head (up to 16 KiB), the messages that are one call each."""
    import timeit

    import numpy as np

    from pytest_ipcbench.backends import mpi, references
    from pytest_ipcbench.core.group import MPIGroup

    class Request:
        def Start(self) -> None: ...
        def Wait(self, *a: Any) -> None: ...

    class Comm:  # the calls these backends make per message, doing nothing
        def bcast(self, obj: Any, root: int = 0) -> Any: return obj
        def Send(self, *a: Any, **k: Any) -> None: ...
        def Recv(self, *a: Any, **k: Any) -> None: ...
        def Bcast(self, *a: Any, **k: Any) -> None: ...
        def Recv_init(self, *a: Any, **k: Any) -> Request: return Request()
        def Probe(self, *a: Any, **k: Any) -> None: ...

    class Group(MPIGroup):
        def __init__(self, rank: int) -> None:  # no MPI: two ranks on paper
            self.rank, self.size, self.comm, self.nodes = rank, 2, Comm(), 1

    mpi.comm_of = references.comm_of = selfcheck.comm_of = lambda group: group.comm  # type: ignore[assignment]
    obj = np.arange(size, dtype=np.uint8)
    for name in names:
        cls = get_backend(name)
        writer, reader = cls(Group(0), "native", 0, 5.0, "block"), cls(Group(1), "native", 0, 5.0, "block")
        writer.setup()
        reader.setup()
        if hasattr(reader, "_size"):  # the references' size, from the first message
            reader._size = size if name.startswith("ref-mpi-p2p") else np.full(1, size, dtype=np.int64)
        for _ in range(4):  # past the first messages, into each one's steady path
            writer.write(obj)
            if hasattr(reader, "_head"):  # what the writer's head carried
                reader._head[:] = writer._head
            reader.read()
        w = min(timeit.repeat(lambda w=writer: w.write(obj), number=number, repeat=repeat)) / number
        r = min(timeit.repeat(reader.read, number=number, repeat=repeat)) / number
        print(f"{name:<16} {size_label(size):>6}: Python work per message, MPI stubbed: write {w * 1e6:.2f} us, "
              f"read {r * 1e6:.2f} us")


def mpi_floor(size: int, blocks: int = 30, loop: int = 400) -> None:
    """MPI's own floor against the MPI references (issue 40: a reference within 1.25x of the raw loop
    of its mechanism). In alternating blocks of ``loop`` round trips each: plain mpi4py ping-pongs by
    ``Send``/``Recv`` (what mpi4py.bench pingpong times), the same with rank 1 echoing the buffer it
    received into (``echo``, as the harness's ping-pong), by ``Bcast`` with the root taking turns,
    ``mpi4py.bench pingpong`` itself, and the harness's ping-pong over ``mpi-raw``, ``ref-mpi-p2p`` and
    ``ref-mpi-buffer``. Prints each
    one's median block mean (one way) and the blockwise ratios of each harness case to the plain loop
    of its mechanism (min/median/max over blocks)."""
    from mpi4py import MPI

    comm = MPI.COMM_WORLD
    group = MPIGroup.world()
    rank, other = comm.rank, 1 - comm.rank
    # a buffer to send from and another to receive into, as mpi4py.bench: with one buffer for both,
    # MPICH's Send/Recv ping-pong took 1.6x as long at 64 KiB here (docs/floor.md, 2026-12-08)
    out, into = ([bytearray(max(1, size)), size, MPI.BYTE] for _ in range(2))
    root0, root1 = (out, into) if rank == 0 else (into, out)  # each Bcast: root sends out, the other receives

    def pingpong(back: list) -> float:  # rank 1 answers from ``out``, or from ``into`` as the harness's echo
        comm.Barrier()
        t0 = MPI.Wtime()
        for _ in range(loop):
            if rank == 0:
                comm.Send(out, other, 0)
                comm.Recv(into, other, 0)
            else:
                comm.Recv(into, other, 0)
                comm.Send(back, other, 0)
        return (MPI.Wtime() - t0) / loop / 2

    def bcast() -> float:
        comm.Barrier()
        t0 = MPI.Wtime()
        for _ in range(loop):
            comm.Bcast(root0, 0)
            comm.Bcast(root1, 1)
        return (MPI.Wtime() - t0) / loop / 2

    def harness(name: str) -> Callable[[], float]:
        def run() -> float:
            res = selfcheck._harness_pingpong(group, size, loop, loop // 10, name)
            return statistics.fmean(res.samples["latency"]) if res is not None and group.rank == 0 else 0.0
        return run

    def bench() -> float:  # mpi4py.bench pingpong itself, as the self-check runs it
        comm.Barrier()
        row = selfcheck.mpi4py_bench_pingpong(comm, size, loop, loop // 10)
        return float(row["mean_s"]) if rank == 0 else 0.0

    cases = {"Send/Recv": lambda: pingpong(out), "echo": lambda: pingpong(into), "mpi4py.bench": bench, "Bcast": bcast, "mpi-raw": harness("mpi-raw"),
             "ref-mpi-p2p": harness("ref-mpi-p2p"), "ref-mpi-buffer": harness("ref-mpi-buffer")}
    if size & (size - 1):  # mpi4py.bench times powers of two only (it would time nothing, and rank 0 fail)
        del cases["mpi4py.bench"]
    means: dict[str, list[float]] = {k: [] for k in cases}
    order = list(cases)
    for block in range(blocks + 1):  # one warm-up block
        for label in order if block % 2 else order[::-1]:
            t = cases[label]()
            if block:
                means[label].append(t)
    if rank != 0:
        return
    med = {k: statistics.median(v) for k, v in means.items()}
    # MPICH's device (shared-memory) collectives make a 2-rank Bcast cost more than Send/Recv;
    # MPIR_CVAR_DEVICE_COLLECTIVES=none routes it over point-to-point (docs/floor.md, 2026-12-08)
    cvar = os.environ.get("MPIR_CVAR_DEVICE_COLLECTIVES", "default")
    print(f"MPI's floor, {size_label(size)}, 2 ranks, {blocks} alternating blocks of {loop} round trips "
          f"(MPIR_CVAR_DEVICE_COLLECTIVES={cvar}); one way, median of block means: "
          + ", ".join(f"{k} {v * 1e6:.2f} us" for k, v in med.items()))
    for case, base in (("mpi-raw", "mpi4py.bench"), ("ref-mpi-p2p", "mpi4py.bench"), ("ref-mpi-p2p", "Send/Recv"),
                       ("ref-mpi-buffer", "Bcast"), ("ref-mpi-buffer", "mpi4py.bench"), ("Bcast", "Send/Recv"),
                       ("mpi4py.bench", "Send/Recv"), ("echo", "Send/Recv"), ("mpi-raw", "echo")):
        if case not in means or base not in means:
            continue
        r = sorted(a / b for a, b in zip(means[case], means[base]))
        print(f"  {case} / {'plain ' if base in ('Send/Recv', 'Bcast', 'echo') else ''}{base}: {statistics.median(r):.2f}x (blockwise min/median/max "
              f"{r[0]:.2f}/{statistics.median(r):.2f}/{r[-1]:.2f})", flush=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("backends", nargs="?", default="", help="comma list")
    parser.add_argument("--sizes", default="1", help="comma list of sizes (default 1)")
    parser.add_argument("--n", type=int, default=2000, help="round trips of the step breakdown")
    parser.add_argument("--budget", type=float, default=0.3, help="seconds per case of the harness pingpong")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--broadcast", action="store_true",
                        help="on any number of ranks: each backend's broadcast completion beside its reference's, "
                             "interleaved (a store's, which ipcbench selfcheck does not time)")
    parser.add_argument("--stubbed", action="store_true",
                        help="one process: the Python work per message with MPI stubbed out (MPI backends, "
                             "their references, mpi-raw)")
    parser.add_argument("--mpi-floor", action="store_true",
                        help="on 2 ranks: plain mpi4py Bcast against Send/Recv ping-pong, no harness (mpi_floor)")
    args = parser.parse_args(argv)
    if args.mpi_floor:
        for size in [parse_size(s) for s in args.sizes.split(",")]:
            mpi_floor(size)
        return 0
    if not args.backends:
        parser.error("name the backends (a comma list), or --mpi-floor")
    if args.stubbed:
        for size in [parse_size(s) for s in args.sizes.split(",")]:
            stubbed(args.backends.split(","), size)
        return 0
    group = MPIGroup.world()
    if args.broadcast:
        for name in args.backends.split(","):
            for size in [parse_size(s) for s in args.sizes.split(",")]:
                broadcast(group, name, size, args.budget, args.rounds)
        return 0
    if group.size != 2:
        print("run on 2 ranks: mpiexec -n 2 python tools/floor.py ...", file=sys.stderr)
        return 2
    us = 1e6
    say = print if group.rank == 0 else (lambda *a, **k: None)
    for name in args.backends.split(","):
        ref = get_backend(name).reference
        for size in [parse_size(s) for s in args.sizes.split(",")]:
            got = steps(group, name, size, args.n)
            specs = [BackendSpec(name, "native")] + ([BackendSpec(ref, "native")] if ref else [])
            if get_backend(name).needs_mpi:  # the raw MPI loop the self-check holds against mpi4py.bench
                specs.append(BackendSpec("mpi-raw", "native"))
            try:  # the harness's floor (absent from a checkout before it existed)
                get_backend("null")
                specs.append(BackendSpec("null", "native"))
            except ValueError:
                pass
            if args.rounds <= 0:  # the steps alone, of the backend, its reference and the raw loop
                for spec in specs[:-1] if specs[-1].name == "null" else specs:
                    got = got if spec.name == name else steps(group, spec.name, size, args.n)
                    if got is not None:
                        say(f"   {spec.name:<16} {size_label(size)}: fastest write {got['write_min'] * us:.2f} us, "
                            f"read {got['read_min'] * us:.2f} us; medians write {got['write'] * us:.2f}, "
                            f"read {got['read'] * us:.2f}")
                continue
            results = bench_interleaved(group, specs, BufferPayload(size), "pingpong",
                                        BenchSettings(time_budget=args.budget), args.rounds)
            if got is None:
                continue
            say(f"{name} {size_label(size)}: write {got['write'] * us:.2f} us, read {got['read'] * us:.2f} us, "
                f"wait {(got['oneway'] - got['write'] - got['read']) * us:.2f} us (one way {got['oneway'] * us:.2f}), "
                f"verify {got['verify'] * us:.2f} us; fastest write {got['write_min'] * us:.2f} us, "
                f"read {got['read_min'] * us:.2f} us (the least a loaded machine takes: the per-message work)")
            for spec, res in zip(specs, results):
                assert res is not None
                lat = statistics.median(res.samples["latency"]) * us
                counts = res.counters.per_role(COUNTS) if res.counters is not None else {}
                words = "; ".join(f"{role}: " + ", ".join(f"{k.split('.')[-1] if k != 'alloc.bytes' else 'alloc B'} "
                                                          f"{v:g}" for k, v in vals.items())
                                  for role, vals in counts.items())
                say(f"   {spec.name:<16} one way {lat:8.2f} us   {words}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
