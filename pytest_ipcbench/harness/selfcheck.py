"""``ipcbench selfcheck``: does the harness measure the machine, or itself? (docs/method.md rule 15)

Three figures, each measured by the harness and by an outside reference in the same session,
interleaved (harness, reference, harness, reference, ...), compared on the median of rounds:

* MPI ping-pong latency at 1 byte: the harness's ``pingpong`` scenario over ``mpi-raw`` (a
  minimal backend: ``Send`` / ``Recv`` of a byte buffer, what ``mpi4py.bench`` does) against
  ``python -m mpi4py.bench pingpong`` (its printed table is parsed);
* MPI ping-pong bandwidth at 16 MiB, the same way;
* copy bandwidth: :func:`~.inrun.copy_samples` against a plain ``timeit`` of ``np.copyto``.

Each must agree within 15% (``--tolerance``). mpi4py.bench prints the mean of a block of round
trips, so both sides run many short blocks, interleaved; the difference is the median over blocks of
a harness block's mean over the reference block's right after it (adjacent blocks see the same load
on a shared machine); the copy figure likewise, round by round. Outside MPI it launches
``mpiexec -n 2 python -m pytest_ipcbench.harness.selfcheck --worker``.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import re
import statistics
import sys
import timeit
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..backends.base import Backend, BackendSpec, register
from ..core import launcher
from ..core.group import comm_of, in_mpi_job

DEFAULT_TOLERANCE = 0.15
LATENCY_BYTES = 1
BANDWIDTH_BYTES = 16 * 1024 * 1024
COPY_BYTES = 64 * 10**6
_TAG = 77
_MARK = "@@ipcbench-selfcheck "


@register
class MPIRaw(Backend):
    """The thinnest MPI transport: ``Send`` of a byte buffer, ``Recv`` into a reused buffer.

    For the self-check only (it moves 1-D uint8 arrays); kind ``channel``, needs MPI.
    """

    internal = True  # the harness's own raw MPI case, not a backend users pick
    name = "mpi-raw"
    delivery = "channel"
    needs_mpi = True

    def setup(self) -> None:
        # write() and read() become closures over what they use: the self-check compares this
        # path with mpi4py.bench's two calls, so it carries as little Python as it can.
        from mpi4py import MPI

        comm, tag, byte = comm_of(self.group), _TAG, MPI.BYTE
        send, recv = comm.Send, comm.Recv
        readers, root = tuple(self.readers), self.root
        single = readers[0] if len(readers) == 1 else None
        slots: list[Any] = [None, None, None, None]  # two (object, message) pairs, built once each
        box: list[Any] = [None, None]  # the receive buffer and its message, made at the first read

        def write(obj: Any) -> None:
            if obj is slots[0]:
                msg = slots[1]
            elif obj is slots[2]:
                msg = slots[3]
            else:
                msg = [obj, obj.nbytes, byte]
                slots[2], slots[3], slots[0], slots[1] = slots[0], slots[1], obj, msg
            if single is not None:
                send(msg, single, tag)
            else:
                for reader in readers:
                    send(msg, reader, tag)

        def read() -> Any:
            msg = box[1]
            if msg is None:  # the first message fixes the size (one Probe)
                status = MPI.Status()
                comm.Probe(root, tag, status)
                box[0] = np.empty(status.Get_count(byte), dtype=np.uint8)
                msg = box[1] = [box[0], box[0].nbytes, byte]
            recv(msg, root, tag)
            return box[0]

        self.write = write  # type: ignore[method-assign]
        self.read = read  # type: ignore[method-assign]

    def write(self, obj: Any) -> None:  # replaced in setup()
        raise RuntimeError("mpi-raw: setup() first")

    def read(self) -> Any:  # replaced in setup()
        raise RuntimeError("mpi-raw: setup() first")


# ------------------------------------------------------------------------- mpi4py.bench output

_ROW = re.compile(r"^\s*(\d+)\s+([0-9.eE+-]+)\s*\|\s*([0-9.eE+-]+)\s*\S+\s*([0-9.eE+-]+)\s+(\d+)\s*$")
_ROW_NO_STATS = re.compile(r"^\s*(\d+)\s+([0-9.eE+-]+)\s*$")


def parse_pingpong(text: str) -> dict[int, dict[str, float]]:
    """Rows of ``mpi4py.bench pingpong``: size -> {bandwidth_MBps, mean_s, stddev_s, samples}
    (its time is one way, its bandwidth size / time in MB/s)."""
    rows: dict[int, dict[str, float]] = {}
    for line in text.splitlines():
        if line.lstrip().startswith("#"):
            continue
        m = _ROW.match(line)
        if m:
            size, bw, mean, std, n = m.groups()
            rows[int(size)] = {"bandwidth_MBps": float(bw), "mean_s": float(mean), "stddev_s": float(std),
                               "samples": int(n)}
            continue
        m = _ROW_NO_STATS.match(line)
        if m:
            size, bw = m.groups()
            rows[int(size)] = {"bandwidth_MBps": float(bw), "mean_s": int(size) / (float(bw) * 1e6)}
    return rows


def mpi4py_bench_pingpong(comm: Any, size: int, loop: int, skip: int) -> dict[str, float]:
    """Run mpi4py.bench's pingpong at one size in this MPI job; parse its printed table (rank 0)."""
    from mpi4py import bench

    args = ["-m", str(size), "-n", str(size), "-l", str(loop), "-s", str(skip),
            "--loop-large", str(loop), "--skip-large", str(skip),
            "--loop-huge", str(loop), "--skip-huge", str(skip)]
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        bench.pingpong(comm, args)
    if comm.Get_rank() != 0:
        return {}
    rows = parse_pingpong(out.getvalue())
    if size not in rows:
        raise RuntimeError(f"could not read mpi4py.bench's output:\n{out.getvalue()}")
    return rows[size]


# ----------------------------------------------------------------------------------- checks


@dataclass
class Figure:
    name: str
    unit: str
    harness: float
    reference: float
    reference_name: str
    harness_median: float | None = None
    rounds: int = 0
    paired_ratio: float | None = None  # median over blocks of harness / the reference block beside it

    @property
    def deviation(self) -> float:
        if self.paired_ratio is not None:
            return self.paired_ratio - 1
        return self.harness / self.reference - 1 if self.reference else float("inf")

    def ok(self, tolerance: float) -> bool:
        return abs(self.deviation) <= tolerance

    def as_dict(self) -> dict[str, Any]:
        return {**self.__dict__, "deviation": self.deviation}


def _harness_pingpong(group: Any, size: int, iterations: int, warmup: int, backend: str = "mpi-raw") -> Any:
    from .measure import BenchSettings, BufferPayload, bench

    settings = BenchSettings(
        time_budget=1e9, max_iterations=iterations, min_iterations=iterations, warmup=warmup, verify="ends",
        alternate=False,  # one send buffer, as mpi4py.bench: the same bytes in the caches on both sides
        quiet_waits=False,  # and plain (spinning) MPI barriers, as mpi4py.bench
    )
    return bench(group, BackendSpec(backend, "native"), BufferPayload(size), "pingpong", settings)


def mpi_figures(rounds: int = 3) -> list[Figure]:
    """Collective (every rank of COMM_WORLD, 2 ranks used): the MPI ping-pong figures on rank 0,
    from ``rounds * 10`` pairs of blocks (the harness's, then mpi4py.bench's) of the same plan."""
    from mpi4py import MPI

    from ..core.group import MPIGroup

    world = MPIGroup.world()
    comm = MPI.COMM_WORLD
    plans = {LATENCY_BYTES: (200, 20), BANDWIDTH_BYTES: (5, 1)}  # (loop, skip) for both sides
    figures = []
    for size, (loop, skip) in plans.items():
        ours_mean, ours_med, ref = [], [], []
        for _ in range(rounds * 10):
            r = _harness_pingpong(world, size, loop, skip)
            if comm.Get_rank() == 0:
                lat = r.samples["latency"]
                ours_mean.append(statistics.fmean(lat))
                ours_med.append(statistics.median(lat))
            row = mpi4py_bench_pingpong(comm, size, loop, skip)
            if comm.Get_rank() == 0:
                ref.append(row["mean_s"])
        if comm.Get_rank() != 0:
            continue
        h, m, f = statistics.median(ours_mean), statistics.median(ours_med), statistics.median(ref)
        paired = statistics.median(x / y for x, y in zip(ours_mean, ref))
        n = len(ref)
        what = f"mpi4py.bench pingpong, median of {n} block means"
        if size == LATENCY_BYTES:
            figures.append(Figure("MPI ping-pong latency, 1 B", "us", h * 1e6, f * 1e6, what, m * 1e6, n, paired))
        else:
            figures.append(Figure("MPI ping-pong bandwidth, 16 MiB", "MB/s", size / h / 1e6, size / f / 1e6, what,
                                  size / m / 1e6, n, 1 / paired))
    return figures


def copy_figure(nbytes: int = COPY_BYTES, rounds: int = 10) -> Figure:
    """Copy bandwidth: the harness's copy_samples against timeit of np.copyto, in interleaved
    rounds of 7 copies each (a round's figure: its median), compared round by round."""
    from .inrun import copy_samples

    src = np.ones(nbytes, dtype=np.uint8)
    dst = np.zeros(nbytes, dtype=np.uint8)
    np.copyto(dst, src)
    ours, ref = [], []
    timer = timeit.Timer(lambda: np.copyto(dst, src))
    for _ in range(rounds):
        ours.append(statistics.median(copy_samples(nbytes, time_budget=0.0, max_reps=7, min_reps=7)))
        ref.append(statistics.median(timer.repeat(repeat=7, number=1)))
    h, f = statistics.median(ours), statistics.median(ref)
    paired = statistics.median(y / x for x, y in zip(ours, ref))  # bandwidth ratio, round by round
    return Figure(f"copy bandwidth, {nbytes // 10**6} MB", "MB/s", nbytes / h / 1e6, nbytes / f / 1e6,
                  f"timeit np.copyto, median of {rounds} rounds", None, rounds, paired)


def table(figures: Sequence[Figure], tolerance: float) -> str:
    head = f"{'figure':<34} {'harness':>12} {'(median)':>11} {'reference':>12}  {'diff':>7}  verdict  reference"
    lines = [head, "-" * len(head)]
    for f in figures:
        med = f"{f.harness_median:.2f}" if f.harness_median is not None else ""
        verdict = "ok" if f.ok(tolerance) else "OUTSIDE"
        lines.append(
            f"{f.name:<34} {f.harness:>9.2f} {f.unit:<3}{med:>10} {f.reference:>9.2f} {f.unit:<3} "
            f"{f.deviation:>+7.1%}  {verdict:<7}  {f.reference_name}"
        )
    lines.append(f"diff: median over blocks of harness / the reference block beside it; (median): the harness's "
                 f"median sample; tolerance ±{tolerance:.0%}; MB = 10^6 bytes; latency = round trip / 2")
    return "\n".join(lines)


# ------------------------------------------------------------------------------------- entry


def run_checks(rounds: int = 3, mpiexec: str | None = None, timeout: float = 300.0) -> tuple[list[Figure], list[str]]:
    """Every figure (MPI through mpiexec -n 2 unless already under MPI); (figures, problems)."""
    figures: list[Figure] = []
    problems: list[str] = []
    if in_mpi_job():
        from mpi4py import MPI

        figures.extend(mpi_figures(rounds))
        if MPI.COMM_WORLD.Get_rank() != 0:
            return [], []
    else:
        try:
            job = launcher.run(2, "pytest_ipcbench.harness.selfcheck", ["--worker", "--rounds", str(rounds)],
                               mark=_MARK, timeout=timeout, mpiexec=mpiexec)
        except launcher.MPIExecNotFound:
            problems.append(f"{launcher.NO_MPIEXEC}: MPI figures skipped")
        else:
            if job.timed_out:
                problems.append(f"the MPI part did not finish within {timeout:g} s")
            elif job.returncode or not job.records:
                problems.append(f"the MPI part failed (exit {job.returncode}): {job.stderr.strip()[-2000:]}")
            else:
                for d in job.records[-1]:
                    d.pop("deviation", None)
                    figures.append(Figure(**d))
    figures.append(copy_figure(rounds=max(5, rounds * 4)))
    return figures, problems


def main(argv: Sequence[str] | None = None) -> int:
    """The MPI part, under ``mpiexec -n 2`` (launched by :func:`run_checks`)."""
    parser = argparse.ArgumentParser(prog="python -m pytest_ipcbench.harness.selfcheck")
    parser.add_argument("--worker", action="store_true", help="required: run the MPI part on every rank")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args(argv)
    if not args.worker:
        parser.error("this module is the MPI part of `ipcbench selfcheck`: run that instead")
    from mpi4py import MPI

    figures = mpi_figures(args.rounds)
    if MPI.COMM_WORLD.Get_rank() == 0:
        launcher.emit(_MARK, [f.as_dict() for f in figures])
    return 0


if __name__ == "__main__":
    sys.exit(main())
