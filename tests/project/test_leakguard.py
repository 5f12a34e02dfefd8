"""The suite's leak guard (tests/leakguard.py, used by tests/conftest.py) names what a test left
and counts nothing that a live process still uses."""

from __future__ import annotations

import mmap
import os
import subprocess
import sys

import leakguard  # tests/ is on sys.path (rootdir conftest, no package)

from pytest_ipcbench.core import names


def _dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def test_the_guard_names_a_dead_owners_folder_an_unmapped_mpich_segment_and_a_killed_runs_temp_folder() -> None:
    before = leakguard.snapshot()
    dead = _dead_pid()
    folder = names.private_dir("guardtest", pid=dead)
    segment = names.SHM_DIR / f"mpich_shm_guardtest{os.getpid()}_0"
    segment.write_bytes(b"\0" * 4096)
    user_root = leakguard._pytest_roots()[0]
    user_root.mkdir(mode=0o700, exist_ok=True)
    run = user_root / f"pytest-{9_000_000 + os.getpid()}"
    run.mkdir(mode=0o700)
    (run / ".lock").write_text(str(dead))
    try:
        found = leakguard.leaked(before, set(), grace=0.5)
        assert found.keys() == {folder, segment, run}, found
        assert "owner pid" in found[folder] and "no process maps" in found[segment] and "killed" in found[run]
    finally:
        leakguard.remove({folder: "", segment: "", run: ""})
    assert leakguard.leaked(before, set(), grace=0) == {}


def test_what_a_live_process_uses_is_not_a_leak() -> None:
    before = leakguard.snapshot()
    mine = names.private_dir("guardtest")  # its owner (this process) runs
    segment = names.SHM_DIR / f"mpich_shm_guardtest{os.getpid()}_1"
    segment.write_bytes(b"\0" * 4096)
    user_root = leakguard._pytest_roots()[0]
    user_root.mkdir(mode=0o700, exist_ok=True)
    live = user_root / f"pytest-{9_100_000 + os.getpid()}"
    live.mkdir(mode=0o700)
    (live / ".lock").write_text(str(os.getpid()))  # a running pytest session's
    try:
        with segment.open("r+b") as f, mmap.mmap(f.fileno(), 4096):
            assert leakguard.leaked(before, set(), grace=0) == {}
    finally:
        leakguard.remove({mine: "", segment: "", live: ""})
