"""The shared-array handle path in counts: a premade SharedNDArray through our Queue against
``None`` through the same queue (the experiment's ``handle`` and ``ping`` paths), per message, on the
sender and on the consumer, counted as the counting pass counts (core/probes.CounterProbe).

    .venv/bin/python tools/counter_shared.py [--size 1MB] [--messages 200] [--repeats 3]

Each message is acknowledged over a pipe on both paths, as in the shared-array experiment: the
acknowledgement costs the same on both, so handle minus None is what the handle adds. Kinds
alternate (handle, None, handle, ...) per repeat. A value is the median repeat's per message,
``a..b`` when the repeats differed (min..max).
"""

from __future__ import annotations

import argparse
import multiprocessing
import statistics
from typing import Any

import numpy as np

from pytest_ipcbench.core.counters import COUNTERS
from pytest_ipcbench.core.probes import CounterProbe, differences
from pytest_ipcbench.core.units import parse_size, size_label
from pytest_ipcbench.shared.array import SharedNDArray
from pytest_ipcbench.shared.queue import Queue

SHOWN = ("syscalls.total", "syscalls.data", "syscalls.sync", "syscalls.mapping", "syscalls.waiting", "syscalls.other",
         "io.syscr", "io.syscw", "io.rchar", "io.wchar", "faults.minor", "pickle.dumps", "pickle.loads")


def _consumer(conn: Any, q: Queue) -> None:
    while True:
        n = conn.recv()
        if n is None:
            return
        with CounterProbe() as probe:
            s0 = probe.snapshot()
            for _ in range(n):
                x = q.get()
                if x is not None:
                    x.flat[0]  # touch, as the experiment's consumer does
                conn.send_bytes(b"a")
                del x
            s1 = probe.snapshot()
        conn.send((differences(s0, s1), probe.absent))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--size", default="1MB")
    parser.add_argument("--messages", type=int, default=200)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    mp: Any = multiprocessing.get_context("spawn")
    q = Queue(ctx=mp)
    conn, child = mp.Pipe()
    proc = mp.Process(target=_consumer, args=(child, q), daemon=True)
    proc.start()
    child.close()
    array = np.ones(parse_size(args.size), np.uint8)
    premade = SharedNDArray.from_numpy_array(array)
    got: dict[tuple[str, str], dict[str, list[int]]] = {}
    absent: dict[str, str] = {}
    try:
        for r in range(args.repeats + 1):  # the first repeat warms up, not kept
            for kind, item in (("handle", premade), ("None", None)):
                conn.send(args.messages)
                with CounterProbe() as probe:
                    s0 = probe.snapshot()
                    for _ in range(args.messages):
                        q.put(item)
                        conn.recv_bytes()
                    s1 = probe.snapshot()
                theirs, their_absent = conn.recv()
                absent.update(probe.absent, **their_absent)
                if r == 0:
                    continue
                for side, d in (("sender", differences(s0, s1)), ("consumer", theirs)):
                    for k, v in d.items():
                        got.setdefault((kind, side), {}).setdefault(k, []).append(v)
    finally:
        conn.send(None)
        proc.join(30)
        premade = None
        q.close()
    print(f"shared-array handle path ({size_label(array.nbytes)} array) against None, per message "
          f"({args.messages} messages x {args.repeats} repeats; each acknowledged over a pipe on both paths)")
    print(f"| side | path | {' | '.join(n for n in SHOWN)} |")
    print("|---|---|" + "---:|" * len(SHOWN))
    for side in ("sender", "consumer"):
        for kind in ("handle", "None"):
            d = got[(kind, side)]
            cells = []
            for n in SHOWN:
                if n in absent or n not in d:
                    cells.append("absent")
                    continue
                per = [v / args.messages for v in d[n]]
                cells.append(f"{statistics.median(per):,.2f}" if min(per) == max(per)
                             else f"{min(per):,.2f}..{max(per):,.2f}")
            print(f"| {side} | {kind} | {' | '.join(cells)} |")
    assert set(SHOWN) <= set(COUNTERS)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
