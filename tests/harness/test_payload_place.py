"""The arrays a scenario sends sit at one place in their page in every run (harness/payload.py
steady_place): a heap put them where the process's history left room, and a store's copy ran
3-4x slower from some places (core/aliasing.py)."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np

from pytest_ipcbench.core.aliasing import FRESH_OFFSET, PAGE, buffer_address, placed
from pytest_ipcbench.harness.payload import steady_place
from pytest_ipcbench.harness.plan import BenchSettings
from pytest_ipcbench.harness.scenarios import _Case


class _AtOffset:
    """A payload whose arrays a heap left 160 bytes into a page (the window for shm's layout)."""

    kind, size = "ndarray", 10**6

    def build(self, seed: int = 0) -> np.ndarray:
        return placed(np.full((250, 1000), seed, dtype=np.float32), offset=160)


def test_a_scenarios_payloads_sit_at_the_fresh_place() -> None:
    case = SimpleNamespace(payload=_AtOffset(), settings=BenchSettings())
    objs = _Case._payloads(case)  # type: ignore[arg-type]
    assert [buffer_address(o) % PAGE for o in objs] == [FRESH_OFFSET, FRESH_OFFSET]
    assert [float(o[0, 0]) for o in objs] == [1.0, 2.0] and objs[0].shape == (250, 1000)


def test_lists_of_arrays_are_placed_and_small_or_other_objects_kept() -> None:
    big = placed(np.arange(100_000, dtype=np.int32), offset=4080)
    small = np.arange(10, dtype=np.int32)
    out = steady_place([big, small])
    assert buffer_address(out[0]) % PAGE == FRESH_OFFSET and np.array_equal(out[0], big)
    assert out[1] is small
    d = {"a": big}
    assert steady_place(d) is d
    assert steady_place(small) is small
