"""Plugins end to end: a consumer's conftest.py or installed distribution adds a backend and a
payload kind, and gets what a built-in gets (options, marker, fixtures, spawned workers, MPI ranks,
the leak check); the conformance suite flags broken backends.

Every run is a pytest subprocess (registrations are process-wide; an in-process run would leave
them behind in this one).
"""

from __future__ import annotations

import inspect
import os
import re
import subprocess
import sys
from pathlib import Path

import plugin_support  # tests/ is on sys.path (rootdir conftest, no package)
import pytest

from pytest_ipcbench.core.group import in_mpi_job

pytestmark = pytest.mark.skipif(in_mpi_job(), reason="runs pytest in a subprocess: not inside an MPI job")
MPIEXEC = Path(sys.executable).with_name("mpiexec")
FAST = ("-p", "no:cacheprovider", "--ipc-sizes", "1KB", "--ipc-modes", "bytes")

CONFTEST = """
import os
import secrets
import tempfile
from pathlib import Path

from storeplugin import FileStore, records_kind
from pytest_ipcbench import register_backend, register_payload
from pytest_ipcbench.backends.base import dumps

register_backend(FileStore)  # "test-filestore"
register_payload("records", records_kind)


class Stale(FileStore):
    '''Readers keep returning the first value they read.'''
    name = "stale"

    def read(self):
        got = super().read()
        if not hasattr(self, "kept"):
            self.kept = got
        return self.kept


class Silent(FileStore):
    '''The writer fails on an unpicklable object without telling its readers.'''
    name = "silent"

    def write(self, obj):
        self._seq += 1
        self._publish(("ok", dumps(obj)))


class Leaky(FileStore):
    '''Names its folder itself (declared in resources) and forgets to remove it.'''
    name = "leaky"
    resources = ("{tmp}/ipcbtest-leaky-{pid}-*",)

    def _create(self):
        self._owner = True
        path = Path(tempfile.gettempdir()) / f"ipcbtest-leaky-{os.getpid()}-{secrets.token_hex(4)}"
        path.mkdir()
        return str(path)

    def close(self):
        self.path = None


class Endless(FileStore):
    '''A read that should time out returns None instead.'''
    name = "endless"

    def read(self):
        try:
            return super().read()
        except TimeoutError:
            return None


for cls in (Stale, Silent, Leaky, Endless):
    register_backend(cls)
"""

USES_THE_FIXTURES = """
import pytest
from pytest_ipcbench import assert_delivered, deliver


def test_matrix(ipc_group, ipc_backend, ipc_payload):
    assert_delivered(ipc_group.run(deliver, ipc_backend, ipc_payload))


def test_own_fixture(ipc_group, test_filestore_backend, ipc_payload):
    assert test_filestore_backend.name == "test-filestore"
    assert_delivered(ipc_group.run(deliver, test_filestore_backend, ipc_payload))


@pytest.mark.ipcbench(backends="test-filestore", payloads="records")
def test_marker(ipc_backend, ipc_payload):
    assert (ipc_backend.name, ipc_payload.kind) == ("test-filestore", "records")


def test_bench(ipc_bench, ipc_backend, ipc_payload, ipc_group):
    result = ipc_bench(ipc_backend, ipc_payload, time_budget=0.05)
    assert result.verified.failed == 0
"""


def _project(pytester: pytest.Pytester, **files: str) -> None:
    pytester.makepyfile(storeplugin=inspect.getsource(plugin_support), conftest=CONFTEST, **files)


def _failed(result: pytest.RunResult) -> set[str]:
    """``Class::test`` of every FAILED line of the short summary (parameters dropped)."""
    found = set()
    for line in result.outlines:
        m = re.match(r"FAILED \S+?::(\w+)::(\w+)", line)
        if m:
            found.add(f"{m.group(1)}::{m.group(2)}")
    return found


def test_a_conftest_backend_and_payload_get_everything_a_built_in_gets(pytester: pytest.Pytester) -> None:
    """Options, the per-backend fixture, the marker, ipc_bench, and spawned local workers (rank 1
    and 2 never ran the conftest: before the fix they said ``unknown backend``)."""
    _project(pytester, test_uses=USES_THE_FIXTURES)
    result = pytester.runpytest_subprocess(
        *FAST, "--ipc-backends", "test-filestore,shm", "--ipc-payloads", "records,dict", "--ipc-ranks", "2,3", "-v"
    )
    result.assert_outcomes(passed=4 * 2 + 1 * 2 * 2 + 1 + 4 * 2)
    result.stdout.fnmatch_lines(["*test_matrix?test-filestore-records-1KB-r3-bytes? PASSED*"])
    result.stdout.fnmatch_lines(["*test_own_fixture?test-filestore-dict-1KB-r3-bytes? PASSED*"])
    assert "ipcbench: backends=test-filestore,shm" in result.stdout.str()


def test_a_conftest_defined_backend_reaches_workers_in_importlib_mode(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The classes of CONFTEST are defined in conftest.py itself. Under --import-mode=importlib and
    the ``pytest`` script (the current folder is not on sys.path), a worker cannot import that
    conftest by its module name: it loads the file."""
    lib = pytester.mkdir("lib")
    (lib / "storeplugin.py").write_text(inspect.getsource(plugin_support))
    monkeypatch.setenv("PYTHONPATH", str(lib))
    folder = pytester.mkdir("my-tests")
    (folder / "conftest.py").write_text(CONFTEST)
    (folder / "test_conf.py").write_text("from pytest_ipcbench.testing import BackendConformance\n\n"
                                         "class TestStaleDelivery(BackendConformance):\n    backend = 'stale'\n    rounds = 1\n")
    # not pytester.run: it would put the current folder on PYTHONPATH
    env = {**os.environ, "PYTHONPATH": str(lib)}
    result = subprocess.run(
        [str(Path(sys.executable).with_name("pytest")), *FAST, "--import-mode=importlib", "--ipc-payloads", "records",
         "--ipc-ranks", "3", "-k", "delivers or writer_error", "my-tests"],
        cwd=pytester.path, env=env, capture_output=True, text=True, timeout=240,
    )
    # one round: a stale reader is not caught yet, but it ran on the workers
    assert result.returncode == 0 and "2 passed" in result.stdout, result.stdout + result.stderr


@pytest.mark.skipif(not MPIEXEC.exists(), reason=f"no mpiexec next to {sys.executable}")
def test_a_conftest_backend_runs_on_every_mpi_rank(pytester: pytest.Pytester) -> None:
    pytest.importorskip("mpi4py")
    _project(pytester, test_uses=USES_THE_FIXTURES)
    result = pytester.run(
        str(MPIEXEC), "-n", "2", sys.executable, "-m", "pytest", "--with-mpi", "-m", "mpi", *FAST,
        "--ipc-backends", "test-filestore,shm", "--ipc-payloads", "records,dict", timeout=240,
    )
    assert result.ret == 0, result.stdout.str()
    result.stdout.fnmatch_lines(["*11 passed*"])  # 4 matrix + 2 own fixture + 1 marker + 4 bench, at 2 ranks


def _private_tmp(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A temp folder of the run's own: another test run on the machine makes leaky files too."""
    tmp = pytester.path / "tmp"
    tmp.mkdir()
    monkeypatch.setenv("TMPDIR", str(tmp))
    return tmp


def test_the_conformance_suite_flags_broken_backends(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    classes = "\n".join(
        f"class Test{cls}(BackendConformance):\n    backend = {name!r}\n    timeout = 3\n"
        for cls, name in [("Good", "test-filestore"), ("Stale", "stale"), ("Silent", "silent"),
                          ("Leaky", "leaky"), ("Endless", "endless")]
    )
    _project(pytester, test_conformance="from pytest_ipcbench.testing import BackendConformance\n\n" + classes)
    tmp = _private_tmp(pytester, monkeypatch)
    result = pytester.runpytest_subprocess(*FAST, "--ipc-payloads", "records,dict", "--ipc-ranks", "2", "-rf")
    assert _failed(result) == {
        "TestStale::test_delivers_every_payload_kind",
        "TestStale::test_benchmarks_through_ipc_bench",  # the path a user's benchmark takes catches it too
        "TestSilent::test_writer_error_reaches_the_readers",
        "TestLeaky::test_delivers_every_payload_kind",
        "TestLeaky::test_writer_error_reaches_the_readers",
        "TestLeaky::test_leaves_nothing_behind",
        "TestEndless::test_read_times_out_clearly",
    }, result.stdout.str()
    out = result.stdout.str()
    assert "did not receive the payload" in out  # stale
    assert "expected PayloadError, got TimeoutError" in out  # silent
    assert "read() returned a NoneType although nothing was written" in out  # endless
    assert re.search(r"leaky-bytes left behind: \['rank 0: \S+ipcbtest-leaky-\d+-", out)
    # and the session's own leak check saw the folders too, and removed them
    assert "ipcbench: resources left behind" in out
    assert not list(tmp.glob("ipcbtest-leaky-*"))
    assert result.ret == pytest.ExitCode.TESTS_FAILED


def test_the_session_leak_check_covers_declared_resources(pytester: pytest.Pytester,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """The issue: a plugin backend's folder was left behind and nothing noticed."""
    _project(pytester, test_leak="from pytest_ipcbench import assert_delivered, deliver\n\n"
             "def test_x(ipc_group, ipc_backend, ipc_payload):\n"
             "    assert_delivered(ipc_group.run(deliver, ipc_backend, ipc_payload))\n")
    tmp = _private_tmp(pytester, monkeypatch)
    result = pytester.runpytest_subprocess(*FAST, "--ipc-backends", "leaky", "--ipc-payloads", "dict", "--ipc-ranks", "2")
    assert result.ret == pytest.ExitCode.TESTS_FAILED  # every test passed; the leak fails the run
    result.stdout.fnmatch_lines(["*ipcbench: resources left behind*", "*ipcbtest-leaky-*", "*1 passed*"])
    assert not list(tmp.glob("ipcbtest-leaky-*"))  # removed


def test_unknown_names_are_refused_everywhere_naming_the_plugins_too(pytester: pytest.Pytester, monkeypatch) -> None:
    _project(pytester, test_x="import pytest\n\n@pytest.mark.ipcbench(backends='fifo')\n"
             "def test_x(ipc_backend):\n    pass\n")
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "--ipc-backends", "shm,fifo")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--ipc-backends: unknown backend 'fifo' (choose from lmdb, *, zmq, *test-filestore, stale*"])
    monkeypatch.setenv("IPCBENCH_PAYLOADS", "records,json")
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider")
    result.stderr.fnmatch_lines(["*env IPCBENCH_PAYLOADS: unknown payload kind 'json' (choose from array1d, *, tiny, records, or all*"])
    monkeypatch.delenv("IPCBENCH_PAYLOADS")
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider")  # the marker names 'fifo'
    assert result.ret != 0
    result.stdout.fnmatch_lines(["*@pytest.mark.ipcbench(backends=...): unknown backend 'fifo' (choose from lmdb*"])


# ------------------------------------------------------------------- an installed distribution

FAKE_DIST = "ipcbench_fake_plugin-1.0.dist-info"
ENTRY_POINTS = """\
[pytest_ipcbench.backends]
good = fakeplugin:Good
needsdep = fakeplugin_needsdep:NeedsDep
broken = ipcbench_no_such_module:Thing
boom = fakeboom:Thing
crashy = fakecrash:Crashy

[pytest_ipcbench.payloads]
fakerecords = storeplugin:records_kind
"""


def _fake_distribution(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    site = pytester.mkdir("site")
    dist = site / FAKE_DIST
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: ipcbench-fake-plugin\nVersion: 1.0\n")
    (dist / "entry_points.txt").write_text(ENTRY_POINTS)
    (site / "storeplugin.py").write_text(inspect.getsource(plugin_support))
    (site / "fakeplugin.py").write_text("from storeplugin import FileStore\n\nclass Good(FileStore):\n    name = 'good'\n")
    (site / "fakeplugin_needsdep.py").write_text("import ipcbench_no_such_dependency\n")
    (site / "fakeboom.py").write_text("raise RuntimeError('boom at import')\n")
    (site / "fakecrash.py").write_text("import ctypes\nfrom storeplugin import FileStore\n\n"
                                       "class Crashy(FileStore):\n    name = 'crashy'\n\n"
                                       "    def write(self, obj):\n        ctypes.string_at(0)  # SIGSEGV\n")
    monkeypatch.setenv("PYTHONPATH", str(site))


def test_an_installed_distribution_adds_a_backend_with_one_entry_point_line(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    _fake_distribution(pytester, monkeypatch)
    pytester.makepyfile(test_x="from pytest_ipcbench import assert_delivered, deliver\n\n"
                        "def test_x(ipc_group, good_backend, ipc_payload):\n"
                        "    assert_delivered(ipc_group.run(deliver, good_backend, ipc_payload))\n")
    result = pytester.runpytest_subprocess(*FAST, "--ipc-payloads", "fakerecords", "--ipc-ranks", "2,3", "-v")
    result.assert_outcomes(passed=2)
    result.stdout.fnmatch_lines(["*test_x?good-fakerecords-1KB-r3-bytes? PASSED*"])

    pytester.makepyfile(test_x="def test_x(ipc_backend):\n    pass\n")
    result = pytester.runpytest_subprocess(*FAST, "--ipc-backends", "needsdep", "-rs")
    result.assert_outcomes(skipped=1)
    result.stdout.fnmatch_lines([
        "*needsdep needs the ipcbench_no_such_dependency package (entry point 'needsdep = "
        "fakeplugin_needsdep:NeedsDep' (group pytest_ipcbench.backends) of ipcbench-fake-plugin 1.0)*"
    ])

    # a broken entry point of another distribution is skipped, named with its distribution
    result = pytester.runpytest_subprocess(*FAST, "--ipc-backends", "broken", "-rs")
    result.assert_outcomes(skipped=1)
    result.stdout.fnmatch_lines([
        "*skipped, broken: backend 'broken': entry point 'broken = ipcbench_no_such_module:Thing' "
        "(group pytest_ipcbench.backends) of ipcbench-fake-plugin 1.0 cannot be imported*"
    ])


def test_a_broken_entry_point_is_named_and_skipped_and_the_rest_runs(pytester: pytest.Pytester,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    # an entry point whose module raised at import stopped the whole session at collection
    _fake_distribution(pytester, monkeypatch)
    pytester.makepyfile(test_x="def test_x(ipc_backend):\n    pass\n")
    result = pytester.runpytest_subprocess(*FAST, "-rs")
    assert result.ret == 0, result.stdout.str()
    outcomes = result.parseoutcomes()
    assert outcomes.get("passed", 0) >= 3  # lmdb, shm, zmq, good ... ran
    result.stdout.fnmatch_lines([
        "*skipped, broken: backend 'boom': entry point 'boom = fakeboom:Thing' (group pytest_ipcbench.backends) "
        "of ipcbench-fake-plugin 1.0 failed to load: RuntimeError: boom at import*"
    ])
    assert "Traceback" not in result.stdout.str() + result.stderr.str()


def test_a_crash_in_a_third_party_backend_fails_its_test_and_the_session_goes_on(
        pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    # a segfault in a plugin's write killed the pytest process itself (rank 0 in plain mode)
    _fake_distribution(pytester, monkeypatch)
    pytester.makepyfile(test_x="from pytest_ipcbench import assert_delivered, deliver\n\n"
                        "def test_crash(ipc_group, crashy_backend, ipc_payload):\n"
                        "    assert_delivered(ipc_group.run(deliver, crashy_backend, ipc_payload))\n\n"
                        "def test_after(ipc_group, good_backend, ipc_payload):\n"
                        "    assert_delivered(ipc_group.run(deliver, good_backend, ipc_payload))\n")
    result = pytester.runpytest_subprocess(*FAST, "--ipc-payloads", "fakerecords", "--ipc-ranks", "2", timeout=300)
    result.assert_outcomes(failed=1, passed=1)
    result.stdout.fnmatch_lines(["*backend 'crashy': rank 0 (pid *) was killed by signal 11 (SIGSEGV) in write "
                                 "(fakecrash.py:8); the session goes on*"])
