"""The shared-array fixtures: leak detection, factory and pool teardown."""

from __future__ import annotations

import gc
import os
import pickle
import subprocess
import sys
import textwrap

import numpy as np

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
    before = snapshot()
    out = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(tmp_path)],
                         cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60)
    assert "2 passed, 1 error" in out.stdout, out.stdout + out.stderr  # fails at teardown
    assert "test left 1 shared segment(s)" in out.stdout
    assert snapshot() - before == set()
