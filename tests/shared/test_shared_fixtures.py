"""The shared-array fixtures: leak detection, factory and pool teardown."""

from __future__ import annotations

import gc
import os
import pickle
import subprocess
import sys
import textwrap
import time

import numpy as np

from pytest_ipcbench.core import names
from pytest_ipcbench.plugin.fixtures.shared import leaked_segments, snapshot
from pytest_ipcbench.shared import SharedNDArray, reclaim_orphans
from pytest_ipcbench.shared.segment import shm_path


def test_leaked_segments_sees_ours_only_after_before():
    before = snapshot()
    arr = SharedNDArray.from_numpy_array(np.ones(100_000))
    name = arr.segment_name
    pickle.dumps(arr)  # leak: an in-transit reference never adopted
    del arr
    gc.collect()
    assert leaked_segments(before) == [name]
    assert leaked_segments(before | {name}) == []
    assert reclaim_orphans(in_transit=True, names=[name]) == [name]
    assert leaked_segments(before) == []


def test_pool_fixture_and_factory_cleanup_before_guard(shm_leak_guard, shared_pool, shared_array):
    kept = [shared_pool.from_numpy_array(np.ones(50_000)), shared_array(np.zeros(50_000))]
    assert all(a.is_shared for a in kept)
    test_pool_fixture_and_factory_cleanup_before_guard.kept = kept  # outlives the test


def test_previous_test_left_nothing():
    kept = test_pool_fixture_and_factory_cleanup_before_guard.kept
    assert not any(shm_path(a.segment_name).exists() for a in kept)
    del test_pool_fixture_and_factory_cleanup_before_guard.kept


INNER = textwrap.dedent("""
    import pickle
    import numpy as np
    from pytest_ipcbench.plugin.fixtures.shared import shm_leak_guard
    from pytest_ipcbench.shared import SharedNDArray

    def test_leaks(shm_leak_guard):
        pickle.dumps(SharedNDArray.from_numpy_array(np.ones(100_000)))

    def test_clean(shm_leak_guard):
        SharedNDArray.from_numpy_array(np.ones(100_000))
""")


def test_guard_fails_a_leaking_test_and_removes_the_leak(tmp_path):
    (tmp_path / "test_inner.py").write_text(INNER)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [os.getcwd(), os.environ.get("PYTHONPATH")])),
               PYTEST_DISABLE_PLUGIN_AUTOLOAD="1")
    proc = subprocess.Popen([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(tmp_path)],
                            cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    stdout, stderr = proc.communicate(timeout=60)
    assert "2 passed, 1 error" in stdout, stdout + stderr  # fails at teardown
    assert "test left 1 shared segment(s)" in stdout
    assert names.find_ours(proc.pid) == []  # the inner run's own segments (not other jobs')


HELD_ELSEWHERE = textwrap.dedent("""
    import os, sys, time
    import numpy as np
    from pytest_ipcbench.shared import SharedNDArray

    arr = SharedNDArray.from_numpy_array(np.ones(10_000), inline_below=0)
    r, w = os.pipe()
    if os.fork() == 0:  # the holder: outlives its creator, and is no descendant of the test
        if os.fork():
            os._exit(0)
        os.write(w, f"{arr.segment_name} {os.getpid()}\\n".encode())
        null = os.open(os.devnull, os.O_RDWR)
        for fd in (0, 1, 2):  # let the test read to the end of our output
            os.dup2(null, fd)
        time.sleep(60)
        os._exit(0)
    os.waitpid(-1, 0)
    print(os.read(r, 200).decode().strip(), flush=True)
""")


def test_leak_check_ignores_a_segment_of_the_same_process_group_held_by_another_process():
    """Another pytest run started from the same shell: its creator died, its holder lives on."""
    before = snapshot()
    out = subprocess.run([sys.executable, "-c", HELD_ELSEWHERE], capture_output=True, text=True, timeout=60)
    name, holder = out.stdout.split()
    try:
        assert names.owner_pid(name) not in (None, os.getpid())
        assert name not in leaked_segments(before)
    finally:
        os.kill(int(holder), 9)
        deadline = time.monotonic() + 10
        while names.pid_alive(int(holder)) and time.monotonic() < deadline:
            time.sleep(0.05)
        reclaim_orphans(names=[name])
    assert not shm_path(name).exists()
