"""``ipcbench selfcheck --backends <plugin>`` for a plugin backend without a reference: it says what
is missing and how to add it, and checks what can be checked (the harness figures, and the
backend's own ping-pong timed alone) instead of ending in a traceback."""

from __future__ import annotations

import inspect
import os
import subprocess
import sys
from pathlib import Path

import plugin_support  # tests/ is on sys.path (rootdir conftest, no package)
import pytest

from pytest_ipcbench.core.group import in_mpi_job
from pytest_ipcbench.core.procs import find_mpiexec

pytestmark = [pytest.mark.skipif(in_mpi_job(), reason="starts its own MPI job: not inside one"),
              pytest.mark.skipif(find_mpiexec() is None, reason="no mpiexec (install pytest-ipcbench[mpi])")]

ENTRY_POINTS = """\
[pytest_ipcbench.backends]
plainstore = selfcheckplugin:PlainStore
dangling = selfcheckplugin:Dangling
"""
PLUGIN = """\
from storeplugin import FileStore


class PlainStore(FileStore):
    name = "plainstore"  # no reference


class Dangling(FileStore):
    name = "dangling"
    reference = "ref-dangling"  # named, never registered
"""


def _installed_plugin(tmp_path: Path) -> dict[str, str]:
    """A distribution on PYTHONPATH whose entry points add two backends without a usable reference."""
    site = tmp_path / "site"
    dist = site / "ipcbench_selfcheck_plugin-1.0.dist-info"
    dist.mkdir(parents=True)
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: ipcbench-selfcheck-plugin\nVersion: 1.0\n")
    (dist / "entry_points.txt").write_text(ENTRY_POINTS)
    (site / "storeplugin.py").write_text(inspect.getsource(plugin_support))
    (site / "selfcheckplugin.py").write_text(PLUGIN)
    return {**os.environ, "PYTHONPATH": str(site)}


@pytest.mark.timeout(600)
def test_selfcheck_of_a_plugin_without_a_reference_says_what_is_missing(tmp_path: Path) -> None:
    env = _installed_plugin(tmp_path)
    proc = subprocess.run(
        [str(Path(sys.executable).with_name("ipcbench")), "selfcheck", "--backends", "plainstore,dangling",
         "--rounds", "1", "--sizes", "1KB", "--scenarios", "pingpong", "--time-budget", "0.05", "--ref-rounds", "2",
         "--out", str(tmp_path / "report")],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=500,
    )
    out = proc.stdout + proc.stderr
    assert "Traceback" not in out, out[-4000:]
    assert proc.returncode in (0, 1), out[-4000:]  # 1: a harness figure outside 15% (shared machine)
    assert ("no reference: plainstore names no reference (its class attribute reference is not set): add one: "
            "a Backend subclass with internal = True") in proc.stdout
    assert "no reference: dangling names the reference 'ref-dangling', which is not registered" in proc.stdout
    assert "docs/extending.md" in proc.stdout
    # what can be checked was: the harness figures, and each backend's own ping-pong, timed alone
    assert "MPI ping-pong latency, 1 B" in proc.stdout and "copy bandwidth" in proc.stdout
    rows = [line.split() for line in proc.stdout.splitlines() if line.startswith("pingpong ")]
    assert {(r[2], r[-2], r[-1]) for r in rows} == {("plainstore", "ref", "(none)"), ("dangling", "ref", "(none)"),
                                                    ("null", "floor", "(none)")}, rows  # null: the harness's floor
    assert "harness floor (local workers, the null channel: nothing moved, 1 B): pingpong" in proc.stdout
    assert (tmp_path / "report" / "summary.md").exists()
