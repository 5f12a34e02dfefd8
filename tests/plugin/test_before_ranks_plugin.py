"""An installed plugin whose transport is made before the ranks start (``before_ranks``), end to end.

Issue 39: through ``ipc_group`` and ``ipc_bench`` it failed with "nothing inherited from before the
ranks started" (rank 0 of a third-party backend runs in a process of its own, whose world never ran
the hook), the conformance kit took another path and passed, and the segment the hook made failed
a green run at the leak check (no way to release it). Every run is a pytest subprocess.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from pytest_ipcbench.core.group import in_mpi_job
from pytest_ipcbench.core.names import owner_pid, pid_alive

pytestmark = pytest.mark.skipif(in_mpi_job(), reason="runs pytest in a subprocess: not inside an MPI job")
MPIEXEC = Path(sys.executable).with_name("mpiexec")
FAST = ("-p", "no:cacheprovider", "--ipc-sizes", "1KB", "--ipc-modes", "bytes", "--ipc-ranks", "2",
        "--ipc-payloads", "dict")

USES = """
from pytest_ipcbench import assert_delivered, deliver


def test_group(ipc_group, inshm_backend, ipc_payload):
    assert_delivered(ipc_group.run(deliver, inshm_backend, ipc_payload))


def test_matrix(ipc_group, ipc_backend, ipc_payload):
    assert_delivered(ipc_group.run(deliver, ipc_backend, ipc_payload))


def test_bench(ipc_bench, ipc_group, inshm_backend, ipc_payload):
    result = ipc_bench(inshm_backend, ipc_payload, time_budget=0.05)
    assert result.verified.failed == 0
"""
# read, not imported: defining a backend class with before_ranks registers its hook in this process,
# and every local world of this test session would then make a segment
SUPPORT = (Path(__file__).parents[1] / "before_ranks_support.py").read_text()
KIT = "from pytest_ipcbench.testing import BackendConformance\n\nclass TestInshm(BackendConformance):\n    backend = 'inshm'\n"


def _segments() -> set[str]:
    """ishm segments whose owner is gone: left behind (a live one is another run's, on a shared machine)."""
    return {p.name for p in Path("/dev/shm").glob("ipcb-*-ishm") if not pid_alive(owner_pid(p.name) or 0)}


def _installed(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, source: str | None = None) -> None:
    site = pytester.mkdir("site")
    dist = site / "ipcbench_inshm-1.0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: ipcbench-inshm\nVersion: 1.0\n")
    (dist / "entry_points.txt").write_text("[pytest_ipcbench.backends]\ninshm = inshm:InheritedShm\n")
    (site / "inshm.py").write_text(source or SUPPORT)
    monkeypatch.setenv("PYTHONPATH", str(site))


def test_a_before_ranks_plugin_runs_through_ipc_group_and_ipc_bench(pytester: pytest.Pytester,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    _installed(pytester, monkeypatch)
    pytester.makepyfile(test_uses=USES)
    before = _segments()
    result = pytester.runpytest_subprocess(*FAST, "--ipc-backends", "inshm", timeout=300)
    out = result.stdout.str() + result.stderr.str()
    result.assert_outcomes(passed=3)
    assert "nothing inherited" not in out
    assert "resources left behind" not in out, out  # after_ranks released the segment before the check
    assert result.ret == 0, out
    assert _segments() <= before


def test_the_kit_takes_the_path_of_ipc_group_and_ipc_bench(pytester: pytest.Pytester,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    """The kit runs a plugin's backend where ``ipc_group`` runs it (rank 0 in a process of its
    own) and through ``ipc_bench``: a plugin whose hooks are not passed to that process fails it."""
    _installed(pytester, monkeypatch)
    pytester.makepyfile(test_kit=KIT)
    before = _segments()
    result = pytester.runpytest_subprocess(*FAST, "-v", timeout=300)
    out = result.stdout.str() + result.stderr.str()
    assert result.ret == 0, out
    result.stdout.fnmatch_lines(["*test_objects_made_before_the_ranks_reach_every_rank*PASSED*",
                                 "*test_releases_what_it_made_before_the_ranks*PASSED*",
                                 "*test_benchmarks_through_ipc_bench*PASSED*"])
    assert _segments() <= before


def test_a_before_ranks_plugin_without_after_ranks_is_named_by_the_kit(pytester: pytest.Pytester,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """Without a release hook the segment outlives the world: the kit's check names it and the hook."""
    source = SUPPORT.replace("def after_ranks(", "def _not_after_ranks(")
    _installed(pytester, monkeypatch, source)
    pytester.makepyfile(test_kit=KIT)
    result = pytester.runpytest_subprocess(*FAST, "-k", "releases", timeout=300)
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*inshm: what before_ranks made is still there after the ranks ended*ishm*after_ranks*"])


@pytest.mark.skipif(not MPIEXEC.exists(), reason=f"no mpiexec next to {sys.executable}")
def test_under_mpiexec_the_kit_skips_before_ranks_with_the_reason(pytester: pytest.Pytester,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("mpi4py")
    _installed(pytester, monkeypatch)
    pytester.makepyfile(test_kit=KIT)
    before = _segments()
    result = pytester.run(str(MPIEXEC), "-n", "2", sys.executable, "-m", "pytest", "--with-mpi", "-m", "mpi",
                          *FAST, "-rs", timeout=240)
    assert result.ret == 0, result.stdout.str() + result.stderr.str()
    result.stdout.fnmatch_lines(["*inshm needs objects made before the ranks start (before_ranks)*"])
    assert _segments() <= before


#: (step that hangs, the rank named for it)
HANGS = (("read", 1), ("setup", 0), ("write", 0))


def test_a_hang_fails_within_the_kits_deadline_naming_rank_backend_and_step(
        pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 39: a transport that hung in setup took 300 s per case to fail, "rank 1: did not answer
    within 300 s (hung?)", nothing about where. A reader that hangs is named by rank 0; rank 0
    itself (in a process of its own for a plugin) by the pytest process. The three runs (one per
    step) go at once: each mostly waits out its deadline."""
    _installed(pytester, monkeypatch)
    pytester.makepyfile(test_kit=KIT)
    monkeypatch.setenv("IPCBENCH_CONFORMANCE_TIMEOUT", "3")  # the kit's deadline: 2 x 3 + 10 = 16 s
    before = _segments()

    def hang(step: str) -> tuple[subprocess.CompletedProcess[str], float]:
        start = time.monotonic()
        proc = subprocess.run([sys.executable, "-m", "pytest", f"--basetemp={pytester.path / ('tmp-' + step)}",
                               *FAST, "-k", "delivers"], cwd=pytester.path, capture_output=True, text=True,
                              env={**os.environ, "INSHM_HANG": step}, timeout=300)
        return proc, time.monotonic() - start

    with ThreadPoolExecutor(len(HANGS)) as pool:
        runs = list(pool.map(hang, [step for step, _ in HANGS]))
    assert _segments() <= before  # the hung ranks' worlds were ended and released
    for (step, rank), (proc, took) in zip(HANGS, runs):
        out = proc.stdout
        outcomes = pytest.RunResult.parse_summary_nouns(out.splitlines())
        assert outcomes.get("failed") == 1 and not outcomes.get("passed") and not outcomes.get("errors"), out[-3000:]
        assert re.search(rf"rank {rank}(?: \(pid \d+\))?:? hung in inshm's {step} \(at _hang, inshm.py:\d+\)",
                         out), out[-3000:]
        assert "IPCBENCH_CONFORMANCE_TIMEOUT=SECONDS" in out
        # the deadline, rank 0's 10 s more, three start-ups at once under load: far from the old 300 s
        assert took < 16 + 10 + 60, f"{step}: took {took:.0f} s"
