"""The shared-array experiment: move one big float32 array to another process, five ways.

Run it: ``python -m pytest_ipcbench.shared.experiment [--rows 250000 --cols 602 --repeats 5
--paths mpqueue,fresh,pool,handle,ping,copy]``.

The handle path alone, against ``None`` through the same queue, at several array sizes (each
round: handle of every size, each followed by ``None``): ``python -m pytest_ipcbench.shared.experiment
--handle-sizes 1MB,1GiB --repeats 200`` (:func:`handle_sweep`; also part of :func:`run_experiment`).
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import statistics
import time
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from ..core.units import parse_size, size_label
from .array import SharedNDArray
from .pool import SharedNumpyPool
from .queue import Queue
from .segment import SharedMemoryFull

#: ``ping`` is ``None`` through our Queue: the IPC latency floor that ``handle`` adds its
#: receive work (map or cached mapping, lock, count) to.
PATHS = ("mpqueue", "fresh", "pool", "handle", "ping", "copy")
EXTRA_PATHS: tuple[str, ...] = ()
#: Array sizes of the handle sweep in :func:`run_experiment` (the handle path should be flat).
HANDLE_SIZES = (10**6, 2**30)


def _consumer_main(conn: Any, mpq: Any, q: Queue) -> None:
    """Get an item from the queue the command names, touch one element, ack; when told, drop
    it and report how long dropping took."""
    while True:
        cmd = conn.recv()
        if cmd == "exit":
            return
        x = (mpq if cmd == "mp" else q).get()
        if x is not None:
            x.flat[0]  # touch: the mapping is usable (one page fault)
        conn.send("ack")
        conn.recv()  # "drop": the sender's clock has stopped
        t0 = time.perf_counter()
        del x
        conn.send(time.perf_counter() - t0)


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
        self.release_times: list[float] = []  # the consumer's drop of each item, seconds

    def transfer(self, cmd: str, send: Callable[[], Any]) -> float:
        """Seconds from just before ``send()`` until the consumer acknowledged the item.

        The consumer drops the item only after the clock stopped (told by a "drop" message), so
        its release work cannot delay the acknowledgement's delivery; how long the drop took is
        appended to :attr:`release_times`.
        """
        self.conn.send(cmd)  # the consumer is now blocked in get(): not part of the time
        t0 = time.perf_counter()
        keep = send()
        self.conn.recv()  # "ack"
        elapsed = time.perf_counter() - t0
        del keep  # our reference goes after the clock stopped
        self.conn.send("drop")
        self.release_times.append(self.conn.recv())  # the consumer dropped its array too
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
        premade = None  # drop our reference before the pool closes
        pool.close()
        if own_consumer:
            consumer.close()
    return samples


def handle_sweep(sizes: Sequence[int] = HANDLE_SIZES, rounds: int = 200,
                 consumer: _Consumer | None = None) -> dict[str, Any]:
    """Handle-only round trip against ``None`` through the same queue, per array size.

    Every round visits every size, each handle followed by a ``None`` (rule 16: pairs share the same
    minutes); the first round is discarded. A size /dev/shm cannot hold is under ``skipped``.
    Returns ``{"sizes", "samples", "median", "ratio", "paired" (median over rounds of each round's
    handle/ping), "p10", "release" (the consumer's median time to drop a received array, after the
    clock stopped), "skipped"}``, keyed by labels like ``1MB``.
    """
    own_consumer = consumer is None
    consumer = consumer or _Consumer()
    out: dict[str, Any] = {"sizes": [], "samples": {}, "median": {}, "ratio": {}, "paired": {}, "p10": {},
                           "release": {}, "skipped": {}}
    arrays: dict[str, SharedNDArray] = {}
    try:
        for n in sizes:
            label = size_label(int(n))
            if label in arrays:
                continue
            try:
                arrays[label] = SharedNDArray.empty(int(n), np.uint8, inline_below=0)
            except SharedMemoryFull as exc:
                out["skipped"][label] = str(exc)
                continue
            out["sizes"].append(int(n))
        got: dict[str, dict[str, list[float]]] = {label: {"handle": [], "ping": []} for label in arrays}
        release: dict[str, list[float]] = {label: [] for label in arrays}
        for i in range(max(2, int(rounds)) + 1):
            for label, arr in arrays.items():
                def put(a: Any = arr) -> Any:  # bound now, called within the timed transfer
                    return consumer.q.put(a)

                h = consumer.transfer("q", put)
                dropped = consumer.release_times[-1]
                p = consumer.transfer("q", lambda: consumer.q.put(None))
                if i:  # the first round warms both paths (and makes the consumer's mappings)
                    got[label]["handle"].append(h)
                    got[label]["ping"].append(p)
                    release[label].append(dropped)
        for label, pair in got.items():
            med = {k: statistics.median(v) for k, v in pair.items()}
            out["release"][label] = statistics.median(release[label])
            out["samples"][label] = pair
            out["median"][label] = med
            out["ratio"][label] = med["handle"] / med["ping"]
            out["paired"][label] = statistics.median(h / p for h, p in zip(pair["handle"], pair["ping"]))
            out["p10"][label] = {k: sorted(v)[len(v) // 10] for k, v in pair.items()}
    finally:
        arrays.clear()
        if own_consumer:
            consumer.close()
    return out


def _put(q: Queue, arr: SharedNDArray) -> SharedNDArray:
    q.put(arr)
    return arr  # kept alive by the caller until the consumer acknowledged


def run_experiment(nbytes_rows: int = 250000, cols: int = 602, repeats: int = 5,
                paths: Sequence[str] = PATHS, handle_sizes: Sequence[int] = HANDLE_SIZES) -> dict[str, Any]:
    """The 600 MB experiment between this process and one spawned consumer.

    Paths: ``mpqueue`` (``multiprocessing.Queue``), ``fresh`` (``SharedNDArray.from_numpy_array`` +
    our Queue), ``pool`` (``SharedNumpyPool``, a reused segment), ``handle`` (a premade array: only
    its handle), ``copy`` (one ``np.copyto``, no IPC) and ``ping`` (``None``: the floor under
    ``handle``); then :func:`handle_sweep` over ``handle_sizes``. A sample runs from before the put
    to the consumer's acknowledgement of one element read; releases happen after the clock stops.
    Rounds interleave the paths; one warm-up round is discarded.

    Returns ``{"nbytes", "shape", "repeats", "median", "samples", "ratios", "handle_sweep"}``.
    """
    array = np.ones((nbytes_rows, cols), dtype=np.float32)
    consumer = _Consumer()
    try:
        samples = measure(array, paths, repeats, consumer=consumer) if paths else {}
        sweep = handle_sweep(handle_sizes, 40 * repeats, consumer=consumer) if handle_sizes else None
    finally:
        consumer.close()
    median = {p: statistics.median(s) for p, s in samples.items()}
    ratios = {}
    for a, b in (("pool", "copy"), ("mpqueue", "pool"), ("fresh", "copy"), ("mpqueue", "fresh"),
                 ("handle", "ping")):
        if a in median and b in median and median[b] > 0:
            ratios[f"{a}/{b}"] = median[a] / median[b]
    res = {"nbytes": array.nbytes, "shape": array.shape, "repeats": repeats,
           "median": median, "samples": samples, "ratios": ratios}
    if sweep is not None:
        res["handle_sweep"] = sweep
    return res


def main(argv: Sequence[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--rows", type=int, default=250000)
    ap.add_argument("--cols", type=int, default=602)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--paths", default=None,
                    help=f"comma list of {','.join(PATHS)} (default: all; '' for none)")
    ap.add_argument("--handle-sizes", default=None, metavar="SIZES",
                    help="array sizes of the handle sweep, e.g. 1MB,1GiB (default: 1MB,1GiB when "
                         "--paths is not given, none when it is); given without --paths, only the "
                         "sweep runs, with --repeats rounds")
    ap.add_argument("--json", action="store_true", help="print the whole result as JSON")
    args = ap.parse_args(argv)
    paths = PATHS if args.paths is None else tuple(p for p in args.paths.split(",") if p)
    if args.handle_sizes is not None and args.paths is None:
        sweep = handle_sweep([parse_size(x) for x in args.handle_sizes.split(",") if x], args.repeats)
        print(json.dumps(sweep, indent=2) if args.json else _format_sweep(sweep, args.repeats))
        return
    if args.handle_sizes is None:  # the sweep by default only when every path runs
        sizes: Sequence[int] = HANDLE_SIZES if args.paths is None else ()
    else:
        sizes = [parse_size(x) for x in args.handle_sizes.split(",") if x]
    res = run_experiment(args.rows, args.cols, args.repeats, paths, sizes)
    if args.json:
        print(json.dumps(res, indent=2))
        return
    print(f"{res['nbytes'] / 1e6:.1f} MB {res['shape']} float32, {res['repeats']} rounds (medians)")
    for p, m in res["median"].items():
        lo, hi = min(res["samples"][p]), max(res["samples"][p])
        print(f"  {p:8s} {m * 1e3:10.3f} ms   (min {lo * 1e3:.3f}, max {hi * 1e3:.3f})")
    for k, v in res["ratios"].items():
        print(f"  {k:14s} {v:8.2f}x")
    if "handle_sweep" in res:
        print(_format_sweep(res["handle_sweep"], 40 * res["repeats"]))


def _format_sweep(sweep: dict[str, Any], rounds: int) -> str:
    lines = [f"handle only vs None through the same queue, {rounds} interleaved rounds (medians):"]
    for label, med in sweep["median"].items():
        p10 = sweep.get("p10", {}).get(label, {})
        lines.append(
            f"  {label:>6s}  handle {med['handle'] * 1e6:8.1f} us   ping {med['ping'] * 1e6:8.1f} us"
            f"   handle/ping {sweep['ratio'][label]:.2f}x   paired {sweep['paired'][label]:.2f}x"
            + (f"   (10th percentiles {p10['handle'] * 1e6:.1f} / {p10['ping'] * 1e6:.1f} us)" if p10 else "")
            + (f"   release {sweep['release'][label] * 1e6:.1f} us" if label in sweep.get("release", {}) else "")
        )
    for label, why in sweep["skipped"].items():
        lines.append(f"  {label:>6s}  skipped: {why}")
    return "\n".join(lines)


if __name__ == "__main__":
    main()
