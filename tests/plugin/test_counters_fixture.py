"""Counters through the ``ipc_bench`` fixture: the README's example, pytest-benchmark's
``extra_info`` and ``--ipc-count=no``, in a pytest subprocess."""

from __future__ import annotations

import json
import re
import textwrap
from pathlib import Path

import pytest

from pytest_ipcbench.backends.base import unavailable_reason
from pytest_ipcbench.core.syscalls import syscall_unavailable

# the README's example ("Counters": its snippet test_costs.py), read from the README as a user copies it
README_EXAMPLE = re.search(r"<!-- snippet: test_costs\.py[^>]*-->\s*\n```python\n(.*?)```",
                           (Path(__file__).parents[2] / "README.md").read_text(), re.S).group(1)


@pytest.fixture
def example(pytester: pytest.Pytester) -> pytest.Pytester:
    if unavailable_reason("shm"):
        pytest.skip("no shm backend")
    pytester.makepyfile(test_example=textwrap.dedent(README_EXAMPLE))
    return pytester


def test_readme_example_passes_and_feeds_extra_info(example: pytest.Pytester, tmp_path: Path) -> None:
    bench = tmp_path / "bench.json"
    res = example.runpytest_subprocess("-p", "no:cacheprovider", f"--benchmark-json={bench}", "-q", timeout=180)
    res.assert_outcomes(passed=1)
    (bm,) = json.loads(bench.read_text())["benchmarks"]
    counters = bm["extra_info"]["ipcbench"]["counters"]
    assert counters["writer"]["pickle.dumps"] == 0 and "pickle.dumps" in counters["writer_exact"]
    assert counters["reader"]["io.rchar"] == 0
    if syscall_unavailable() is None:
        assert counters["reader"]["syscalls.data"] == 0
    else:
        assert "syscalls.data" in counters["reader_absent"]


def test_no_ipc_count_leaves_results_without_counters(example: pytest.Pytester, tmp_path: Path) -> None:
    bench = tmp_path / "bench.json"
    res = example.runpytest_subprocess("-p", "no:cacheprovider", "--ipc-count=no", f"--benchmark-json={bench}",
                                       "-q", timeout=180)
    res.assert_outcomes(failed=1)  # the example reads result.counters: None now
    res.stdout.fnmatch_lines(["*'NoneType' object has no attribute 'writer'*"])
    (bm,) = json.loads(bench.read_text())["benchmarks"]
    assert "turned off" in bm["extra_info"]["ipcbench"]["counting"]
