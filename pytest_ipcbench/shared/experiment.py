"""Seed 002's experiment: move one big float32 array to another process, five ways.

Run it: ``python -m pytest_ipcbench.shared.experiment [--rows 250000 --cols 602 --repeats 5
--paths mpqueue,fresh,pool,handle,copy]``.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import statistics
import time
from typing import Any, Callable, Sequence

import numpy as np

from .array import SharedNDArray
from .pool import SharedNumpyPool
from .queue import Queue

PATHS = ("mpqueue", "fresh", "pool", "handle", "copy")
#: Extra path, not run by default: ``None`` through our Queue -- the IPC latency floor that
#: ``handle`` adds its map/unmap work to.
EXTRA_PATHS = ("ping",)


def _consumer_main(conn: Any, mpq: Any, q: Queue) -> None:
    """Get an item from the queue the command names, touch one element, ack, drop, report."""
    while True:
        cmd = conn.recv()
        if cmd == "exit":
            return
        x = (mpq if cmd == "mp" else q).get()
        if x is not None:
            x.flat[0]  # touch: the mapping is usable (one page fault)
        conn.send("ack")
        del x
        conn.send("released")


class _Consumer:
    """One spawned consumer kept alive for every round (spawning costs more than a transfer)."""

    def __init__(self, ctx: str = "spawn") -> None:
        mp: Any = multiprocessing.get_context(ctx)
        self.mpq = mp.Queue()
        self.q = Queue(ctx=mp)
        self.conn, child = mp.Pipe()
        self.proc = mp.Process(target=_consumer_main, args=(child, self.mpq, self.q), daemon=True)
        self.proc.start()
        child.close()

    def transfer(self, cmd: str, send: Callable[[], Any]) -> float:
        """Seconds from just before ``send()`` until the consumer acknowledged the item."""
        self.conn.send(cmd)  # the consumer is now blocked in get(): not part of the time
        t0 = time.perf_counter()
        keep = send()
        self.conn.recv()  # "ack"
        elapsed = time.perf_counter() - t0
        del keep  # our reference goes after the clock stopped
        self.conn.recv()  # "released": the consumer dropped its array too
        return elapsed

    def close(self) -> None:
        self.conn.send("exit")
        self.proc.join(30)
        if self.proc.is_alive():  # pragma: no cover
            self.proc.kill()
            self.proc.join(5)
        self.conn.close()
        self.q.close()
        self.mpq.close()


def measure(array: np.ndarray, paths: Sequence[str] = PATHS, repeats: int = 5,
            consumer: _Consumer | None = None) -> dict[str, list[float]]:
    """Samples (seconds) per path, rounds interleaved; one discarded warm-up round first."""
    unknown = set(paths) - set(PATHS) - set(EXTRA_PATHS)
    if unknown:
        raise ValueError(f"unknown paths {sorted(unknown)}; choose from {PATHS + EXTRA_PATHS}")
    own_consumer = consumer is None
    consumer = consumer or _Consumer()
    pool = SharedNumpyPool(max_bytes=max(4 * array.nbytes, 1 << 20))
    premade = SharedNDArray.from_numpy_array(array) if "handle" in paths else None
    dst = np.empty_like(array) if "copy" in paths else None
    if dst is not None:
        dst.fill(0)  # touched: the reference copy pays no page faults either

    def run(path: str) -> float:
        if path == "mpqueue":
            return consumer.transfer("mp", lambda: consumer.mpq.put(array))
        if path == "fresh":
            return consumer.transfer("q", lambda: _put(consumer.q, SharedNDArray.from_numpy_array(array)))
        if path == "pool":
            return consumer.transfer("q", lambda: _put(consumer.q, pool.from_numpy_array(array)))
        if path == "handle":
            return consumer.transfer("q", lambda: consumer.q.put(premade))
        if path == "ping":
            return consumer.transfer("q", lambda: consumer.q.put(None))
        assert dst is not None
        t0 = time.perf_counter()
        np.copyto(dst, array)
        return time.perf_counter() - t0

    samples: dict[str, list[float]] = {p: [] for p in paths}
    try:
        for p in paths:
            run(p)
        for _ in range(repeats):
            for p in paths:
                samples[p].append(run(p))  # arrays are freed by refcounting: no gc pass here
    finally:
        premade = None  # noqa: F841  (drop our reference before the pool closes)
        pool.close()
        if own_consumer:
            consumer.close()
    return samples


def _put(q: Queue, arr: SharedNDArray) -> SharedNDArray:
    q.put(arr)
    return arr  # kept alive by the caller until the consumer acknowledged


def run_seed002(nbytes_rows: int = 250000, cols: int = 602, repeats: int = 5,
                paths: Sequence[str] = PATHS) -> dict[str, Any]:
    """Seed 002's 600 MB experiment between this process and one spawned consumer.

    A float32 array of ``nbytes_rows x cols`` (ones) goes to the consumer by:

    * ``mpqueue`` -- ``multiprocessing.Queue.put`` (pickle, pipe, unpickle: seed's 2.29 s);
    * ``fresh``   -- ``SharedNDArray.from_numpy_array`` (new segment + copy) + our Queue;
    * ``pool``    -- ``SharedNumpyPool.from_numpy_array`` (reused, already touched segment) + Queue;
    * ``handle``  -- a premade shared array: only its handle passes;
    * ``copy``    -- reference: one ``np.copyto`` into a preallocated, touched array (no IPC);
    * ``ping``    -- (only if asked for) ``None`` through our Queue: the IPC latency floor.

    Time of one sample: from just before the put (including the copy into shared memory for
    fresh/pool) until the consumer has got the item, has it mapped, has read one element and
    its acknowledgement arrived through a Pipe.  Releasing the arrays happens after the clock
    stops (the consumer drops its array before the next round starts, so the pool can reuse).
    Rounds are interleaved over paths; one warm-up round per path is discarded.

    Returns ``{"nbytes", "shape", "repeats", "median": {path: s}, "samples": {path: [s]},
    "ratios": {"pool/copy", "mpqueue/pool", "fresh/copy", "mpqueue/fresh"}}`` (ratios only for
    measured paths).
    """
    array = np.ones((nbytes_rows, cols), dtype=np.float32)
    samples = measure(array, paths, repeats)
    median = {p: statistics.median(s) for p, s in samples.items()}
    ratios = {}
    for a, b in (("pool", "copy"), ("mpqueue", "pool"), ("fresh", "copy"), ("mpqueue", "fresh")):
        if a in median and b in median and median[b] > 0:
            ratios[f"{a}/{b}"] = median[a] / median[b]
    return {"nbytes": array.nbytes, "shape": array.shape, "repeats": repeats,
            "median": median, "samples": samples, "ratios": ratios}


def main(argv: Sequence[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--rows", type=int, default=250000)
    ap.add_argument("--cols", type=int, default=602)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--paths", default=",".join(PATHS))
    ap.add_argument("--json", action="store_true", help="print the whole result as JSON")
    args = ap.parse_args(argv)
    res = run_seed002(args.rows, args.cols, args.repeats, tuple(args.paths.split(",")))
    if args.json:
        print(json.dumps(res, indent=2))
        return
    print(f"{res['nbytes'] / 1e6:.1f} MB {res['shape']} float32, {res['repeats']} rounds (medians)")
    for p, m in res["median"].items():
        lo, hi = min(res["samples"][p]), max(res["samples"][p])
        print(f"  {p:8s} {m * 1e3:10.3f} ms   (min {lo * 1e3:.3f}, max {hi * 1e3:.3f})")
    for k, v in res["ratios"].items():
        print(f"  {k:14s} {v:8.2f}x")


if __name__ == "__main__":
    main()
