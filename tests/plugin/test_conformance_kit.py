"""The conformance kit as a user meets it: used by several classes in one folder (``pytest
--fixtures`` and the run), and its deadline (a broken backend fails within seconds, not a minute).

Every run is a pytest subprocess (registrations are process-wide)."""

from __future__ import annotations

import inspect
import sys
import time
from pathlib import Path

import plugin_support  # tests/ is on sys.path (rootdir conftest, no package)
import pytest

from pytest_ipcbench.core.group import in_mpi_job
from pytest_ipcbench.plugin.fixtures.conformance import DEFAULT_TIMEOUT, TIMEOUT_ENV, conformance_timeout

pytestmark = pytest.mark.skipif(in_mpi_job(), reason="runs pytest in a subprocess: not inside an MPI job")
FAST = ("-p", "no:cacheprovider", "--ipc-sizes", "1KB", "--ipc-modes", "bytes", "--ipc-ranks", "2")

CONFTEST = """
from storeplugin import FileStore
from pytest_ipcbench import register_backend
from pytest_ipcbench.backends.base import dumps

register_backend(FileStore)  # "test-filestore"


class Silent(FileStore):
    '''The writer fails on an unpicklable object without telling its readers: they wait.'''
    name = "silent"

    def write(self, obj):
        self._seq += 1
        self._publish(("ok", dumps(obj)))


register_backend(Silent)
"""

KIT = "from pytest_ipcbench.testing import BackendConformance\n\n"


def _project(pytester: pytest.Pytester, **files: str) -> None:
    pytester.makepyfile(storeplugin=inspect.getsource(plugin_support), conftest=CONFTEST, **files)


def test_the_kit_used_twice_in_one_folder_lists_its_fixtures_and_runs(pytester: pytest.Pytester) -> None:
    """The issue: ``pytest --fixtures`` ended in INTERNALERROR ('<' not supported between instances
    of 'FixtureDef') once two classes of one folder used the kit."""
    _project(
        pytester,
        test_one=KIT + "class TestFileStore(BackendConformance):\n    backend = 'test-filestore'\n\n"
                       "class TestFileStor2(BackendConformance):\n    backend = 'test-filestore'\n",
        test_two=KIT + "class TestFileStore(BackendConformance):\n    backend = 'test-filestore'\n",
    )
    listing = pytester.runpytest_subprocess("-p", "no:cacheprovider", "--fixtures")
    assert listing.ret == 0, listing.stdout.str() + listing.stderr.str()
    assert "INTERNALERROR" not in listing.stdout.str() + listing.stderr.str()
    listing.stdout.fnmatch_lines(["conformance_backend*", "*BackendConformance*"])
    result = pytester.runpytest_subprocess(*FAST, "--ipc-payloads", "tiny", "-k", "delivers")
    result.assert_outcomes(passed=3)


def test_a_broken_backend_fails_within_the_kits_short_deadline(pytester: pytest.Pytester) -> None:
    """A writer that fails silently leaves its readers waiting: the case fails at the kit's
    default deadline (10 s), not after a minute."""
    _project(pytester, test_kit=KIT + "class TestSilent(BackendConformance):\n    backend = 'silent'\n")
    start = time.monotonic()
    result = pytester.runpytest_subprocess(*FAST, "-k", "writer_error")
    took = time.monotonic() - start
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*expected PayloadError, got TimeoutError*"])
    assert took < DEFAULT_TIMEOUT + 40, f"the failing case took {took:.0f} s"


def test_the_deadline_is_overridable(monkeypatch: pytest.MonkeyPatch) -> None:
    class Default:
        timeout = None

    class Slow:
        timeout = 120

    monkeypatch.delenv(TIMEOUT_ENV, raising=False)
    assert conformance_timeout(Default) == DEFAULT_TIMEOUT == 10.0
    monkeypatch.setenv(TIMEOUT_ENV, "2.5")
    assert conformance_timeout(Default) == 2.5
    assert conformance_timeout(Slow) == 120  # the class's own value wins
    monkeypatch.setenv(TIMEOUT_ENV, "soon")
    with pytest.raises(pytest.UsageError, match=f"env {TIMEOUT_ENV}: must be a finite number of seconds > 0.*'soon'"):
        conformance_timeout(Default)


# ------------------------------------------------- transports made before the ranks (before_ranks)

EXAMPLE_PIPES = Path(__file__).parents[2] / "examples" / "consumer" / "src" / "fifo_channel" / "pipes.py"
PIPES_CONFTEST = """
from pipesplugin import PipeBackend
from pytest_ipcbench import register_backend

register_backend(PipeBackend)
"""


# That the example's pipe channel (pipes made by before_ranks in the parent, inherited by the
# spawned ranks) passes every check of the kit at 2 and 4 ranks is what the example's own
# tests/test_conformance.py runs, installed from a wheel, in `make test-example` (part of make test).


@pytest.mark.skipif(not Path(sys.executable).with_name("mpiexec").exists(), reason="no mpiexec")
def test_under_mpiexec_it_is_skipped_with_the_reason(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(pipesplugin=EXAMPLE_PIPES.read_text(), conftest=PIPES_CONFTEST,
                        test_kit=KIT + "class TestPipe(BackendConformance):\n    backend = 'pipe'\n")
    result = pytester.run(str(Path(sys.executable).with_name("mpiexec")), "-n", "2", sys.executable, "-m", "pytest",
                          "--with-mpi", "-m", "mpi", "-p", "no:cacheprovider", "--ipc-sizes", "1KB", "-rs", timeout=240)
    assert result.ret == 0, result.stdout.str()[-3000:]
    result.stdout.fnmatch_lines(["*pipe needs objects made before the ranks start (before_ranks)*"])
