"""The plainest store write, by where the copy lands past its source modulo a page (issue 26).

    python tools/copy_place.py                      # distances 0, 16, 32, 48, 64, 2048; 1 MB
    python tools/copy_place.py --distances 0,32 --size 262144 --rounds 4

A writer pinned to the first CPU copies ``--size`` bytes from a numpy array into a /dev/shm
mapping; a reader pinned to the second CPU reads the destination through after every copy (as a
broadcast's readers do); pipes order the two. Each round times 20 copies per distance (the first
4 not kept), distances interleaved, the two sources alternating. Prints each distance's median
and quartiles of the copy, in µs. On this project's machine a distance of 16-48 bytes copied 1 MB
3-5x slower while the host ran the two vCPUs far apart (tools/line_roundtrip.c) and no slower
while it ran them near (core/aliasing.py; docs/measurements/2026-11-harness.md).
"""

from __future__ import annotations

import argparse
import mmap
import os
import time
from multiprocessing import get_context
from typing import Any

import numpy as np

from pytest_ipcbench.core import names
from pytest_ipcbench.core.aliasing import PAGE, placed


def _reader(path: str, size: int, offset: int, cpu: int, go: Any, done: Any) -> None:
    os.sched_setaffinity(0, {cpu})
    fd = os.open(path, os.O_RDONLY)
    mm = mmap.mmap(fd, 0, prot=mmap.PROT_READ)
    os.close(fd)
    view = np.frombuffer(mm, np.uint8, size, offset)
    while go.recv():
        done.send(int(view.sum(dtype=np.uint64)))
    del view
    mm.close()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--distances", default="0,16,32,48,64,2048", help="bytes past the source, modulo a page")
    ap.add_argument("--size", type=int, default=10**6)
    ap.add_argument("--rounds", type=int, default=6)
    args = ap.parse_args(argv)
    cpus = sorted(os.sched_getaffinity(0))
    if len(cpus) < 2:
        raise SystemExit("copy_place needs two CPUs")
    dst = 4 * 64  # the destination's offset in the segment (64-byte aligned, as shm lays out)
    path = str(names.SHM_DIR / names.resource_name("copyplace"))
    fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_RDWR, 0o600)
    try:
        os.ftruncate(fd, dst + args.size + PAGE)
        seg = mmap.mmap(fd, dst + args.size + PAGE)
        os.close(fd)
        ctx = get_context("fork")
        go_w, go_r = ctx.Pipe()
        done_r, done_w = ctx.Pipe()
        proc = ctx.Process(target=_reader, args=(path, args.size, dst, cpus[1], go_r, done_r))
        proc.start()
        os.sched_setaffinity(0, {cpus[0]})
        distances = [int(x) for x in args.distances.split(",")]
        base = np.arange(args.size, dtype=np.uint64).astype(np.uint8)
        sources = {d: [placed(base, (dst - d) % PAGE), placed(base + 1, (dst - d) % PAGE)] for d in distances}
        times: dict[int, list[float]] = {d: [] for d in distances}
        for _ in range(args.rounds):
            for d in distances:
                for i in range(20):
                    t0 = time.perf_counter()
                    seg[dst : dst + args.size] = memoryview(sources[d][i & 1])
                    took = time.perf_counter() - t0
                    go_w.send(1)
                    done_w.recv()
                    if i >= 4:
                        times[d].append(took)
        go_w.send(0)
        proc.join()
        seg.close()
    finally:
        os.unlink(path)
    for d, ts in times.items():
        q1, med, q3 = (float(np.percentile(ts, p)) * 1e6 for p in (25, 50, 75))
        print(f"distance {d:5d} B: median {med:7.1f} µs  (quartiles {q1:.1f}-{q3:.1f}, n={len(ts)})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
