"""``pin`` (core/affinity.py): each rank of a case on its own CPU, round-robin, restored after."""

from __future__ import annotations

import os

import pytest

from pytest_ipcbench.backends.base import BackendSpec
from pytest_ipcbench.core.affinity import pinned
from pytest_ipcbench.core.local import LocalWorld
from pytest_ipcbench.harness.measure import run_bench
from pytest_ipcbench.harness.payload import BufferPayload
from pytest_ipcbench.harness.plan import BenchSettings

pytestmark = pytest.mark.skipif(not hasattr(os, "sched_setaffinity"), reason="no CPU affinity on this OS")


def test_pinned_sits_on_one_cpu_and_gives_the_old_set_back() -> None:
    before = os.sched_getaffinity(0)
    with pinned(len(before) + 1) as cpu:  # wraps round-robin
        assert os.sched_getaffinity(0) == {cpu} == {sorted(before)[1 % len(before)]}
    assert os.sched_getaffinity(0) == before
    with pinned(0, "none") as cpu:
        assert cpu is None and os.sched_getaffinity(0) == before
    with pinned(1, "auto", ranks_here=len(before)) as cpu:  # as many ranks as CPUs: the kernel places them
        assert cpu is None and os.sched_getaffinity(0) == before
    with pinned(1, "auto", ranks_here=len(before) + 1) as cpu:  # more ranks than CPUs: pinned
        assert os.sched_getaffinity(0) == {cpu} == {sorted(before)[1 % len(before)]}
    assert os.sched_getaffinity(0) == before


def test_a_bad_mode_is_named() -> None:
    with pytest.raises(ValueError, match="pin must be one of auto, core, none, not 'socket'"):
        BenchSettings(pin="socket")


def test_each_rank_of_a_case_ran_on_its_cpu_round_robin() -> None:
    allowed = sorted(os.sched_getaffinity(0))
    with LocalWorld(3) as world:
        result = run_bench(world.group(3), BackendSpec("shm", "bytes"), BufferPayload(1000), "broadcast",
                           BenchSettings(time_budget=0.05, min_iterations=3, pin="core", count=False))
    assert result.extra["pinned_cpus"] == [allowed[i % len(allowed)] for i in range(3)]


def test_by_default_ranks_are_pinned_only_when_they_outnumber_the_cpus() -> None:
    allowed = sorted(os.sched_getaffinity(0))
    with LocalWorld(3) as world:
        result = run_bench(world.group(3), BackendSpec("shm", "bytes"), BufferPayload(1000), "broadcast",
                           BenchSettings(time_budget=0.05, min_iterations=3, count=False))
    if len(allowed) < 3:
        assert result.extra["pinned_cpus"] == [allowed[i % len(allowed)] for i in range(3)]
    else:
        assert "pinned_cpus" not in result.extra
