"""The probe of the host's state: a 1 MiB copy from another CPU's cache (core/cpu_pair.py)."""

from __future__ import annotations

import os
import subprocess

import pytest

from pytest_ipcbench.core import cpu_pair


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="one CPU: nothing to cross")
def test_the_probe_times_a_copy_between_two_cpus_and_leaves_no_process() -> None:
    before = set(os.listdir("/proc"))
    seconds = cpu_pair.cross_cpu_copy()
    assert seconds is not None and 0 < seconds < 0.1  # a 1 MiB copy: microseconds, never a second
    left = [p for p in set(os.listdir("/proc")) - before
            if p.isdigit() and os.path.exists(f"/proc/{p}/cmdline")
            and "pytest_ipcbench.core.cpu_pair" in open(f"/proc/{p}/cmdline").read()]
    assert left == []


def test_one_cpu_or_a_failed_probe_gives_none(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0})
    assert cpu_pair.cross_cpu_copy() is None
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1})
    for outcome in (subprocess.CompletedProcess([], 1, "", "boom"), subprocess.CompletedProcess([], 0, "null", ""),
                    subprocess.CompletedProcess([], 0, "not json", "")):
        monkeypatch.setattr(subprocess, "run", lambda *a, _o=outcome, **k: _o)
        assert cpu_pair.cross_cpu_copy() is None

    def hangs(*args: object, **kwargs: object) -> None:
        raise subprocess.TimeoutExpired("probe", 20)

    monkeypatch.setattr(subprocess, "run", hangs)
    assert cpu_pair.cross_cpu_copy() is None
