"""The harness's own floor (the null channel), a backend's largest message, and one backend's
failure never dropping the other backends' rows from the reference checks (issues 39 and 40)."""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import Any

import pytest
from plugin_support import FileStore  # tests/ is on sys.path (rootdir conftest, no package)

from pytest_ipcbench.backends.base import BackendSpec, PayloadError, backend_names, get_backend, register_backend
from pytest_ipcbench.core.group import Group
from pytest_ipcbench.core.local import LocalWorld
from pytest_ipcbench.harness.floor import floor_line, measure_floor
from pytest_ipcbench.harness.measure import BenchSettings, BufferPayload, bench
from pytest_ipcbench.harness.refcheck import compare_on, run_refchecks, skipped_cases
from pytest_ipcbench.runner.matrix import Case
from pytest_ipcbench.runner.worker import case_unavailable


class SlotStore(FileStore):
    """A store with a fixed slot: it declares the largest message it takes."""

    name = "test-slotstore"
    max_message_bytes = 4096


class BrokenStore(FileStore):
    """Fails every message above 2 KB (the writer says so to the readers, then raises)."""

    name = "test-brokenstore"

    def write(self, obj: Any) -> None:
        if getattr(obj, "nbytes", 0) > 2000:
            self._seq += 1
            self._publish(("error", "too large for this test store"))
            raise PayloadError("too large for this test store")
        super().write(obj)


# registered at import, here and in the spawned workers (they import this module for its functions)
for _cls in (SlotStore, BrokenStore):
    if _cls.name not in backend_names():
        register_backend(_cls)


@pytest.fixture(scope="module")
def world() -> Iterator[LocalWorld]:
    with LocalWorld(2, timeout=120) as w:
        yield w


def test_null_is_internal_and_moves_nothing() -> None:
    cls = get_backend("null")
    assert cls.internal and "null" not in backend_names()  # no fixture, no default matrix offers it


def _floor(group: Group) -> Any:
    return measure_floor(group, rounds=2)


def test_the_floor_is_measured_per_scenario(world: LocalWorld) -> None:
    floor = world.run(_floor, ranks=2)[0]
    assert floor["group"] == "local" and floor["ranks"] == 2 and floor["backend"] == "null"
    assert set(floor["seconds"]) == {"pingpong", "broadcast"}
    assert all(v > 0 and math.isfinite(v) for v in floor["seconds"].values())
    assert "pingpong" in floor_line(floor) and "no case can show a change smaller" in floor_line(floor)


def _null_pingpong(group: Group) -> Any:
    return bench(group, BackendSpec("null", "native"), BufferPayload(1), "pingpong", BenchSettings(time_budget=0.02))


def test_null_pingpong_is_verified_and_counts_nothing(world: LocalWorld) -> None:
    result = world.run(_null_pingpong, ranks=2)[0]
    assert result.verified.checked > 0 and result.verified.failed == 0
    assert result.counters is not None
    for role in ("writer", "reader"):
        assert result.counters.cost(role, "pickle.dumps") == 0 and result.counters.cost(role, "pickle.loads") == 0


def _compare_plugins(group: Group) -> Any:
    return compare_on(group, ["test-slotstore", "test-brokenstore", "shm"], sizes=[1000, 8192],
                      scenarios=["pingpong"], time_budget=0.03, rounds=2, floor=True)


def test_largest_message_is_skipped_and_a_failure_keeps_the_other_rows(world: LocalWorld) -> None:
    rows = world.run(_compare_plugins, ranks=2)[0]
    got = {(r.backend, r.size): r for r in rows}
    # the floor comes first; the slot store is not timed above its slot; the broken store's 8 KB case
    # failed and is a row with the error; shm still has both sizes
    assert rows[0].backend == "null" and rows[0].is_floor and rows[0].verdict == "floor"
    assert ("test-slotstore", 1000) in got and ("test-slotstore", 8192) not in got
    assert got[("test-brokenstore", 8192)].extra["error"].startswith("PayloadError")
    assert "error" not in got[("test-brokenstore", 1000)].extra
    assert got[("shm", 1000)].ours > 0 and got[("shm", 8192)].ours > 0
    assert skipped_cases(["test-slotstore", "shm"], [1000, 8192]) == [
        "skipped: test-slotstore at 8KiB: above the largest message it takes (4KiB, its max_message_bytes)"]


def test_run_skips_a_case_beyond_the_largest_message() -> None:
    small = Case("pingpong", "test-slotstore", "bytes", "buffer", 4096, 2)
    large = Case("pingpong", "test-slotstore", "bytes", "buffer", 16 * 2**20, 2)
    assert case_unavailable(small, None) is None
    reason = case_unavailable(large, None)
    assert reason and "at most 4096 B (its max_message_bytes)" in reason


def test_refchecks_keep_rows_of_backends_that_worked() -> None:
    rows, problems = run_refchecks(["test-brokenstore", "shm"], sizes=[8192], scenarios=["pingpong"],
                                   time_budget=0.03, rounds=2)
    assert [r.backend for r in rows if not r.is_floor] == ["shm"]
    assert any(r.is_floor for r in rows)
    assert len(problems) == 1 and problems[0].startswith("test-brokenstore native pingpong 8KiB failed")
