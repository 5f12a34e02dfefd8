"""``ipcbench clean``: leftovers of dead owners and of aborted MPICH jobs go; live ones stay."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

from pytest_ipcbench.core import names
from pytest_ipcbench.core.cleanup import stale_mpich_segments


def _dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def _clean(*args: str) -> str:
    proc = subprocess.run(
        [sys.executable, "-m", "pytest_ipcbench", "clean", *args], capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def test_clean_removes_what_a_dead_owner_left_and_keeps_a_live_one() -> None:
    dead = names.private_dir("lmdb", pid=_dead_pid())
    (dead / "data.mdb").write_bytes(b"x")
    live = names.private_dir("zmq")  # this process: alive
    try:
        listed = _clean("--dry-run")
        assert str(dead) in listed and dead.exists()  # a dry run removes nothing
        out = _clean()
        assert f"removed {dead}" in out
        assert not dead.exists()
        assert live.exists() and str(live) not in out
    finally:
        names.remove(dead)
        names.remove(live)


def test_an_old_unmapped_mpich_segment_is_stale_a_mapped_one_is_not() -> None:
    stale = names.SHM_DIR / f"mpich_shm_ipcbtest{os.getpid()}_0"
    mapped = names.SHM_DIR / f"mpich_shm_ipcbtest{os.getpid()}_1"
    import mmap

    try:
        for path in (stale, mapped):
            path.write_bytes(b"\0" * 4096)
            old = time.time() - 3600
            os.utime(path, (old, old))
        with open(mapped, "r+b") as f, mmap.mmap(f.fileno(), 4096) as view:
            found = {p.name for p in stale_mpich_segments()}
            assert stale.name in found
            assert mapped.name not in found
            del view
        fresh = {p.name for p in stale_mpich_segments(min_age=7200)}
        assert stale.name not in fresh  # too young for the default age rule
    finally:
        for path in (stale, mapped):
            Path(path).unlink(missing_ok=True)


def test_a_hydra_file_left_by_an_aborted_job_is_stale_only_when_no_launcher_runs() -> None:
    import pytest

    from pytest_ipcbench.core import cleanup

    if cleanup.launcher_running():
        pytest.skip("an MPICH launcher is running on this machine")
    left = Path(cleanup.tempfile.gettempdir()) / f"hydra_hwloc_xmlfile_ipcbtest{os.getpid()}"
    try:
        left.write_text("<topology/>")
        old = time.time() - 3600
        os.utime(left, (old, old))
        assert left in cleanup.stale_hydra_files()
        assert left not in cleanup.stale_hydra_files(ignore={left.name})
        assert left not in cleanup.stale_hydra_files(min_age=7200)
    finally:
        left.unlink(missing_ok=True)
