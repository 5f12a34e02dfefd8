"""An installed plugin's declared resources (``Backend.resources``) that its ``close()`` leaves:
plain pytest (whose rank 0 of a third-party backend runs in a host process of its own) and
``ipcbench run --no-mpi`` (local workers) fail naming them and remove them, as the MPI path does;
``ipcbench clean --dry-run`` lists those of a dead owner (issue 42).

Every run is a subprocess with a private temp folder (TMPDIR): other runs on the machine make
files of the same kind.
"""

from __future__ import annotations

import inspect
import os
import subprocess
import sys
from pathlib import Path

import plugin_support  # tests/ is on sys.path (rootdir conftest, no package)
import pytest

from pytest_ipcbench.core.group import in_mpi_job

pytestmark = pytest.mark.skipif(in_mpi_job(), reason="runs pytest in a subprocess: not inside an MPI job")

LEAKY = """\
import os
import secrets
import tempfile
from pathlib import Path

from storeplugin import FileStore


class Leaky(FileStore):
    '''Names its folder itself (declared in resources) and forgets to remove it.'''
    name = "epleaky"
    resources = ("{tmp}/ipcbtest-epleak-{pid}-*",)

    def _create(self):
        self._owner = True
        path = Path(tempfile.gettempdir()) / f"ipcbtest-epleak-{os.getpid()}-{secrets.token_hex(4)}"
        path.mkdir()
        return str(path)

    def close(self):
        self.path = None
"""


def _install(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An installed distribution with one entry point, ``epleaky``; the private temp folder."""
    site = pytester.mkdir("site")
    dist = site / "ipcbench_leaky_plugin-1.0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: ipcbench-leaky-plugin\nVersion: 1.0\n")
    (dist / "entry_points.txt").write_text("[pytest_ipcbench.backends]\nepleaky = fakeleaky:Leaky\n")
    (site / "storeplugin.py").write_text(inspect.getsource(plugin_support))
    (site / "fakeleaky.py").write_text(LEAKY)
    monkeypatch.setenv("PYTHONPATH", str(site))
    tmp = pytester.mkdir("tmp")
    monkeypatch.setenv("TMPDIR", str(tmp))
    return tmp


def test_plain_pytest_fails_naming_a_plugins_declared_leftover_and_removes_it(
        pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    """Before the fix: exit 0, the folders left (rank 0 ran in a host process the check did not know)."""
    tmp = _install(pytester, monkeypatch)
    pytester.makepyfile(test_x="from pytest_ipcbench import assert_delivered, deliver\n\n"
                        "def test_x(ipc_group, epleaky_backend, ipc_payload):\n"
                        "    assert_delivered(ipc_group.run(deliver, epleaky_backend, ipc_payload))\n")
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "--ipc-sizes", "1KB", "--ipc-modes", "bytes",
                                           "--ipc-payloads", "dict", "--ipc-ranks", "2")
    assert result.ret != 0, result.stdout.str()
    result.stdout.fnmatch_lines(["*ipcbench: resources left behind*", "*ipcbtest-epleak-*", "*1 passed*"])
    assert not list(tmp.glob("ipcbtest-epleak-*"))  # removed


def test_ipcbench_run_no_mpi_fails_naming_a_plugins_declared_leftover_and_removes_it(
        pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    """Before the fix: exit 0, one folder left per case."""
    tmp = _install(pytester, monkeypatch)
    proc = subprocess.run(
        [sys.executable, "-m", "pytest_ipcbench", "run", "--quick", "--no-mpi", "--no-extras", "--backends", "epleaky",
         "--modes", "bytes", "--scenarios", "broadcast", "--sizes", "1KB", "--ranks", "2", "--kinds", "dict",
         "--results-only", "--progress", "none", "--out", str(pytester.path / "out")],
        cwd=pytester.path, capture_output=True, text=True, timeout=300)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 1, out
    assert "left behind" in out and "ipcbtest-epleak-" in out, out
    assert not list(tmp.glob("ipcbtest-epleak-*"))  # removed


def test_clean_dry_run_lists_a_plugins_declared_leftover_of_a_dead_owner(
        pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    """Before the fix: "nothing of ours is left" (a declared name records no PID namespace, and the
    age rule kept it for an hour)."""
    tmp = _install(pytester, monkeypatch)
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    left = tmp / f"ipcbtest-epleak-{dead.pid}-0a1b"
    left.mkdir()
    proc = subprocess.run([sys.executable, "-m", "pytest_ipcbench", "clean", "--dry-run"],
                          cwd=pytester.path, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert f"{left} (owner {dead.pid}" in proc.stdout, proc.stdout
    assert left.exists()  # a dry run
    if os.getuid() == left.stat().st_uid:
        proc = subprocess.run([sys.executable, "-m", "pytest_ipcbench", "clean"], cwd=pytester.path,
                              capture_output=True, text=True, timeout=120)
        assert not left.exists(), proc.stdout
