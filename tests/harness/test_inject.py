"""Injected slowdowns (harness/inject.py): parsed strictly, only where asked, and as large as asked.

The size of a slowdown is checked as a ratio measured interleaved in the same test: the same
case with and without the injection, round after round.
"""

from __future__ import annotations

import os
import subprocess
import sys
import types

import numpy as np
import pytest

from pytest_ipcbench.backends.base import BackendSpec
from pytest_ipcbench.core.envinfo import INJECT_ENV, collect
from pytest_ipcbench.core.group import LocalWorld, in_mpi_job
from pytest_ipcbench.harness import measure
from pytest_ipcbench.harness.inject import injected, parse_injection, slow_down
from pytest_ipcbench.harness.measure import BenchSettings, BufferPayload

pytestmark = pytest.mark.skipif(in_mpi_job(), reason="local process groups: not inside an MPI job")


@pytest.mark.parametrize("text, expected", [
    ("shm=1.5", {"shm": 1.5}),
    (" shm=2 , zmq=1.25,", {"shm": 2.0, "zmq": 1.25}),
    ("", {}),
])
def test_parse(text: str, expected: dict[str, float]) -> None:
    assert parse_injection(text) == expected


@pytest.mark.parametrize("text", ["shm", "shm=", "shm=fast", "shm=0.5", "shm=inf", "shm=nan", "=2", "shm=1000"])
def test_bad_slowdown_names_the_part(text: str) -> None:
    with pytest.raises(ValueError, match="bad slowdown .* expected BACKEND=FACTOR"):
        parse_injection(text, "--inject")


def _fake(rank: int, root: int = 0) -> types.SimpleNamespace:
    writes: list[object] = []
    return types.SimpleNamespace(group=types.SimpleNamespace(rank=rank), root=root, write=writes.append, writes=writes)


def test_only_rank_0_as_root_of_a_named_backend_is_slowed() -> None:
    factors = {"shm": 2.0}
    for rank, root, name, slowed in [(0, 0, "shm", True), (1, 0, "shm", False), (1, 1, "shm", False),
                                     (0, 1, "shm", False), (0, 0, "zmq", False)]:
        b = _fake(rank, root)
        plain = b.write
        slow_down(b, name, factors)
        assert (b.write is not plain) == slowed, (rank, root, name)
        b.write("x")
        assert b.writes == ["x"]  # the write itself still happens, once


def test_environment_names_the_injection(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(INJECT_ENV, raising=False)
    assert "injected" not in collect() and injected() == {}
    monkeypatch.setenv(INJECT_ENV, "shm=1.5")
    assert collect()["injected"] == "shm=1.5" and injected() == {"shm": 1.5}


@pytest.mark.parametrize("value, message", [("shm=0", "bad slowdown"), ("nosuch=2", "unknown backend 'nosuch'")])
def test_run_refuses_a_bad_injection(value: str, message: str, tmp_path) -> None:
    env = {**os.environ, INJECT_ENV: value}
    proc = subprocess.run([sys.executable, "-m", "pytest_ipcbench", "run", "--quick", "--no-config", "--no-mpi",
                           "--out", str(tmp_path / "out")], capture_output=True, text=True, env=env, timeout=120)
    assert proc.returncode == 2 and message in proc.stderr
    assert not (tmp_path / "out").exists()  # refused before anything ran


def _bench_with(group, inject: str, spec: BackendSpec, payload, scenario: str, settings: BenchSettings):
    """One case on every rank with $IPCBENCH_INJECT set to ``inject`` ("" : none) in this worker."""
    os.environ[INJECT_ENV] = inject
    try:
        return measure.bench(group, spec, payload, scenario, settings)
    finally:
        os.environ.pop(INJECT_ENV, None)


@pytest.mark.parametrize("scenario, size", [("pingpong", 64 * 1024), ("broadcast", 1_000_000)])
def test_injected_slowdown_is_about_the_factor(scenario: str, size: int) -> None:
    settings = BenchSettings(time_budget=0.15, min_iterations=20, max_iterations=400, warmup=10)
    spec, payload = BackendSpec("shm", "bytes"), BufferPayload(size)
    plain: list[float] = []
    slowed: list[float] = []
    with LocalWorld(2, timeout=120) as world:
        for _ in range(3):  # interleaved: the machine's drift hits both alike
            for inject, into in (("", plain), ("shm=2", slowed)):
                result = world.run(_bench_with, inject, spec, payload, scenario, settings)[0]
                into.extend(result.samples[result.primary])
    ratio = float(np.median(slowed) / np.median(plain))
    assert 1.6 < ratio < 2.8, f"asked 2x, got {ratio:.2f}x"
