"""core/heap.py: with fixed malloc thresholds, a reader's 1 MB blocks stop faulting in afresh.

Counted, not timed: minor page faults per iteration of a verify-like pattern (two 1 MB copies
and a 1 MB buffer, then a 1 MB receive), in two fresh processes side by side.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

from pytest_ipcbench.core import heap

PATTERN = textwrap.dedent("""
    import resource, sys
    import numpy as np
    if sys.argv[1] == "steady":
        from pytest_ipcbench.core.heap import steady_heap
        assert steady_heap()
    faults = lambda: resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    a = np.arange(10**6 // 8, dtype=np.int64)
    out = []
    for _ in range(12):
        f = faults()
        b, c = a.tobytes(), a.tobytes()  # a check that copies both sides
        d = bytearray(b)
        del b, c, d
        e = np.frombuffer(bytes(10**6), dtype=np.uint8).copy()  # the next message
        del e
        out.append(faults() - f)
    print(max(out[2:]))
""")

glibc = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's malloc")


def _faults(mode: str) -> int:
    done = subprocess.run([sys.executable, "-c", PATTERN, mode], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return int(done.stdout.strip())


@glibc
def test_fixed_thresholds_stop_the_refaulting():
    dynamic, steady = _faults("dynamic"), _faults("steady")
    # glibc's dynamic threshold: the heap's top is trimmed after each round and every 1 MB block
    # faults in again (~1150 pages a round); fixed: warm pages reused, none
    assert dynamic >= 200, dynamic
    assert steady <= 20, steady


@glibc
def test_steady_heap_sets_both_thresholds():
    assert heap.steady_heap() is True  # glibc took both values
    assert heap.steady_heap() is True  # and a second call does not set them again
