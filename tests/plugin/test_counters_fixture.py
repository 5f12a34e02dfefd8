"""Counters through the ``ipc_bench`` fixture: the README's example, pytest-benchmark's
``extra_info`` and ``--ipc-count=no``, in a pytest subprocess."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest

from pytest_ipcbench.backends.base import unavailable_reason
from pytest_ipcbench.core.syscalls import syscall_unavailable

# the README's example ("Counters"), as a user writes it
README_EXAMPLE = '''
import pytest
from pytest_ipcbench.core.syscalls import syscall_unavailable

@pytest.mark.ipcbench(ranks="2")
def test_shm_handle_path_costs(ipc_bench):
    result = ipc_bench("shm", ("ndarray", "1MiB"), mode="native", time_budget=0.05)
    writer, reader = result.counters.writer, result.counters.reader
    assert writer.pickle_dumps == 0 and reader.pickle_loads == 0  # no pickle on the handle path
    assert reader.exact("io.rchar") and reader.io_rchar == 0      # no byte through the kernel
    if syscall_unavailable() is None:                               # perf_event_open and tracefs
        assert result.cost("reader", "syscalls.data") == 0
    assert reader.value("alloc.bytes") < result.nbytes / 2         # a view, not a copy
'''


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
