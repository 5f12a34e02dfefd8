"""A rank's reaper after a Ctrl-C: the rank ends its job, and Hydra's proxy, signalled too, may exit
without unlinking its topology file (``/tmp/hydra_hwloc_xmlfile_*``). The reaper of an interrupted
rank stays until the rank and the proxy are gone and removes that file; a normal end's reaper
leaves at once and touches nothing.

The job here is two plain processes: a "proxy" that holds the file open, as Hydra's does, and
its child, the "rank", which starts its reaper (core/reaper.py) and releases it.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from pytest_ipcbench.core.cleanup import HYDRA_DIR, HYDRA_PREFIX

PROXY = textwrap.dedent("""
    import subprocess, sys
    topology = open(sys.argv[1], "w")  # held open while the job runs, like Hydra's proxy
    rank = subprocess.run([sys.executable, "-c", sys.argv[2], sys.argv[3]], stdin=subprocess.DEVNULL)
    sys.exit(rank.returncode)  # and leaves without unlinking it, like a signalled proxy
""")

RANK = textwrap.dedent("""
    import sys, time
    from pytest_ipcbench.core import reaper
    watcher = reaper.start(0)
    assert watcher is not None
    time.sleep(1.0)  # the reaper looks at the proxy's open files every 0.5 s
    reaper.release(watcher, interrupted=sys.argv[1] == "interrupted")
""")


@pytest.mark.parametrize("interrupted", [True, False])
def test_an_interrupted_ranks_reaper_removes_the_topology_file_its_proxy_left(tmp_path: Path,
                                                                             interrupted: bool) -> None:
    if not hasattr(__import__("os"), "pidfd_open"):
        pytest.skip("no pidfds here: no reaper")
    topology = HYDRA_DIR / f"{HYDRA_PREFIX}ipcbtest{tmp_path.name}"
    try:
        job = subprocess.run([sys.executable, "-c", PROXY, str(topology), RANK,
                              "interrupted" if interrupted else "done"],
                             capture_output=True, text=True, timeout=60)
        assert job.returncode == 0, job.stderr
        deadline = time.monotonic() + 15  # the reaper gives a gone proxy 2 s to unlink it itself
        while interrupted and topology.exists() and time.monotonic() < deadline:
            time.sleep(0.1)
        if interrupted:
            assert not topology.exists(), job.stderr
        else:
            time.sleep(3)
            assert topology.exists()  # released as a normal end: the reaper touched nothing
    finally:
        topology.unlink(missing_ok=True)
