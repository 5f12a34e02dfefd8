"""How fast this machine moves data between two of its CPUs now: a probe of the host's state.

On a virtual machine the host may place the guest's CPUs differently from one minute to the
next, and every case whose data crosses CPUs moves with it, whatever the code (rule 24). A run
records this probe at its start and end (``cross_cpu_copy_s``) and ``ipcbench compare`` says when
two sides met different host states. :func:`cross_cpu_copy` runs this module in a fresh process
(no fork inside an MPI rank): it forks, pins parent and child to two CPUs, and the child copies a
1 MiB buffer the parent just wrote, ``REPS`` times; the median copy is the answer.
"""

from __future__ import annotations

import json
import mmap
import os
import signal
import subprocess
import sys
import time

NBYTES = 2**20
REPS = 40
DEADLINE_S = 5.0  # the probe's own handshakes give up after this (a peer that never runs)


def cross_cpu_copy(timeout: float = 20.0) -> float | None:
    """Seconds for the median 1 MiB copy from another CPU's cache; None where it cannot be
    measured (fewer than two CPUs allowed, not Linux, no numpy, or the probe failed)."""
    if not hasattr(os, "sched_getaffinity") or len(os.sched_getaffinity(0)) < 2:
        return None
    try:
        done = subprocess.run([sys.executable, "-m", __name__], capture_output=True, text=True, timeout=timeout,
                              check=False, env={**os.environ, "OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1"})
        value = json.loads(done.stdout or "null") if done.returncode == 0 else None
    except (OSError, subprocess.TimeoutExpired, ValueError):
        return None
    return float(value) if isinstance(value, (int, float)) and value > 0 else None


def _probe(nbytes: int = NBYTES, reps: int = REPS) -> float | None:
    import numpy as np

    cpus = sorted(os.sched_getaffinity(0))[:2]
    shared = mmap.mmap(-1, 4096 + nbytes)  # anonymous and shared with the child: nothing to clean
    turn = np.frombuffer(shared, dtype=np.int64, count=2)  # [0]: the parent's message, [1]: the child's ack
    src = np.frombuffer(shared, dtype=np.uint8, count=nbytes, offset=4096)
    times = np.frombuffer(mmap.mmap(-1, 8 * reps), dtype=np.float64)
    deadline = time.monotonic() + DEADLINE_S
    pid = os.fork()
    if pid == 0:  # the child: copies what the parent wrote, from the parent's CPU's cache
        status = 1
        try:
            os.sched_setaffinity(0, {cpus[1]})
            dst = np.ones(nbytes, dtype=np.uint8)  # touched: no page fault in the copy
            for i in range(1, reps + 1):
                while turn[0] != i:
                    if time.monotonic() > deadline:
                        raise TimeoutError
                t0 = time.perf_counter()
                np.copyto(dst, src)
                times[i - 1] = time.perf_counter() - t0
                turn[1] = i
            status = 0
        finally:
            os._exit(status)
    ok = False
    try:
        os.sched_setaffinity(0, {cpus[0]})
        for i in range(1, reps + 1):
            src.fill(i & 0xFF)  # every line of the buffer now modified in this CPU's cache
            turn[0] = i
            while turn[1] != i:
                if time.monotonic() > deadline:
                    raise TimeoutError
        ok = True
    except TimeoutError:
        os.kill(pid, signal.SIGKILL)
    finally:
        _, status = os.waitpid(pid, 0)
    return float(np.median(times)) if ok and status == 0 else None


if __name__ == "__main__":
    print(json.dumps(_probe()))
