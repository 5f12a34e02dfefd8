"""SharedNDArray in one process: layouts, dtypes, views, ufuncs, pickling, errors."""

from __future__ import annotations

import gc
import os
import pickle
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from pytest_ipcbench.core import names
from pytest_ipcbench.shared import INLINE_BELOW, SharedMemoryFull, SharedNDArray, reclaim_orphans
from pytest_ipcbench.shared.segment import shm_path


@pytest.fixture(autouse=True)
def _no_leaks(shm_leak_guard: None) -> None:
    """Every test here must leave /dev/shm clean of our segments."""


def roundtrip(a):
    return pickle.loads(pickle.dumps(a, protocol=pickle.HIGHEST_PROTOCOL))


def shared(a, **kw):
    return SharedNDArray.from_numpy_array(a, inline_below=0, **kw)


INPUTS = {
    "0-d": np.array(3.5),
    "empty": np.zeros((0, 4), dtype=np.int16),
    "non-contiguous": np.arange(600, dtype=np.float32).reshape(20, 30)[::2, 5:25:3],
    "big-endian": np.arange(50, dtype=">i8"),
    "big-endian-float": np.linspace(0, 1, 33).astype(">f4"),
    "fortran": np.asfortranarray(np.arange(60.0).reshape(6, 10)),
    "transposed": np.arange(60.0).reshape(6, 10).T[::-1],
    "structured": np.array([(1, 2.0, b"ab"), (3, 4.0, b"cd")], dtype=[("i", ">u2"), ("f", "<f8"), ("s", "S2")]),
    "bool": np.array([True, False, True]),
    "complex": np.arange(5) * (1 + 2j),
    "datetime": np.array(["2024-01-01", "2025-06-30"], dtype="datetime64[D]"),
}


@pytest.mark.parametrize("kind", list(INPUTS))
def test_from_numpy_array_preserves_dtype_values_and_roundtrips(kind):
    src = INPUTS[kind]
    arr = shared(src)
    assert arr.is_shared and os.path.exists(shm_path(arr.segment_name))
    assert arr.dtype == src.dtype and arr.dtype.byteorder == src.dtype.byteorder
    assert arr.shape == src.shape
    np.testing.assert_array_equal(np.asarray(arr), src)
    back = roundtrip(arr)
    assert type(back) is SharedNDArray and back.segment_name == arr.segment_name
    np.testing.assert_array_equal(np.asarray(back), src)
    if src.size:
        assert np.shares_memory(np.asarray(back), np.asarray(arr))


def test_layout_decisions():
    assert shared(INPUTS["fortran"]).flags.f_contiguous
    assert not shared(INPUTS["fortran"]).flags.c_contiguous
    assert shared(INPUTS["non-contiguous"]).flags.c_contiguous
    assert shared(INPUTS["transposed"]).flags.c_contiguous


def test_empty_and_0d_constructors():
    e = SharedNDArray.empty((0,), np.float64, inline_below=0)
    assert e.shape == (0,) and e.is_shared and roundtrip(e).shape == (0,)
    z = SharedNDArray.empty((), np.int32, inline_below=0)
    z[()] = 7
    assert roundtrip(z)[()] == 7
    f = SharedNDArray.empty((3, 4), ">f8", order="F", inline_below=0)
    assert f.flags.f_contiguous and f.dtype == np.dtype(">f8")
    assert not f.any()  # fresh segments are zeroed


def test_object_dtype_refused_clearly():
    with pytest.raises(TypeError, match="object"):
        SharedNDArray.from_numpy_array(np.array([1, "x", None], dtype=object))
    with pytest.raises(TypeError, match="object"):
        SharedNDArray.empty(10, dtype=[("a", "O")])


def test_views_slices_keep_segment_alive_and_pickle_by_handle():
    arr = shared(np.arange(1000, dtype=np.int64).reshape(10, 100))
    name = arr.segment_name
    view = arr[2:8, ::-7]
    plain = arr[1].view(np.ndarray)  # plain views pin the segment too (through the anchor)
    del arr
    gc.collect()
    assert shm_path(name).exists()
    assert view.segment_name == name and view.is_shared
    got = roundtrip(view)
    np.testing.assert_array_equal(got, view)
    got[0, 0] = -1
    assert view[0, 0] == -1
    assert plain[5] == 105
    del view, got
    gc.collect()
    assert shm_path(name).exists()
    del plain
    gc.collect()
    assert not shm_path(name).exists()


def test_the_base_of_an_array_keeps_the_mapping_alive():
    """numpy exposes the anchor as ``base``: an array built on it alone must keep the mapping."""
    arr = shared(np.arange(100_000, dtype=np.int64))
    name = arr.segment_name
    raw = np.frombuffer(arr.base, dtype=np.int64)  # no SharedNDArray left after the del below
    del arr
    gc.collect()
    assert shm_path(name).exists() and raw[99_999] == 99_999
    del raw
    gc.collect()
    assert not shm_path(name).exists()


def test_a_read_only_view_arrives_read_only():
    arr = shared(np.arange(100_000.0))
    view = arr[10:20]
    view.flags.writeable = False
    got = roundtrip(view)
    assert got.is_shared and not got.flags.writeable and got[0] == 10.0
    with pytest.raises(ValueError, match="read-only"):
        got[0] = 1.0
    assert roundtrip(arr).flags.writeable  # and a writable one writable
    del arr, view, got


def test_a_handle_outside_its_segment_is_refused():
    arr = shared(np.zeros(100_000))
    bad = list(arr.__reduce_ex__(5)[1])
    bad[3] = (200_000,)  # shape beyond the segment's capacity
    with pytest.raises(ValueError, match="size of buffer"):
        arr.__reduce_ex__(5)[0](*bad)
    arr._ipcb_seg.unsend_ref()  # two reductions took two references; attach gave one back
    del arr


def test_ufunc_results_are_plain_and_out_is_kept():
    arr = shared(np.arange(10.0))
    assert type(arr + 1) is np.ndarray
    assert type(np.sqrt(arr)) is np.ndarray
    assert type(arr.sum()) is np.float64 and arr.sum() == 45.0
    assert type(arr.mean()) is np.float64
    ref = arr
    arr += 1
    assert arr is ref and arr.is_shared and arr[0] == 1.0
    out = np.add(arr, arr, out=arr)
    assert out is arr and arr[1] == 4.0


def test_copies_are_private_and_pickle_by_value():
    arr = shared(np.arange(10.0))
    c = arr.copy()
    assert type(c) is SharedNDArray and c.segment_name is None and not c.is_shared
    back = roundtrip(c)
    back[0] = 100
    assert c[0] == 0
    assert arr.astype(np.float32).segment_name is None


def test_small_arrays_stay_inline_by_default():
    small = SharedNDArray.from_numpy_array(np.zeros(INLINE_BELOW // 8 - 1))
    assert not small.is_shared and small.segment_name is None
    assert type(roundtrip(small)) is SharedNDArray
    big = SharedNDArray.from_numpy_array(np.zeros(INLINE_BELOW // 8))
    assert big.is_shared


def test_release_drops_reference_early():
    arr = shared(np.arange(100.0))
    name = arr.segment_name
    arr.release()
    assert not shm_path(name).exists()  # our reference was the only one
    assert arr[99] == 99.0  # still mapped while the array lives
    back = roundtrip(arr)  # travels by value now
    assert back.segment_name is None and back[99] == 99.0


def _mine() -> set[str]:
    """Our names in /dev/shm owned by this process (other jobs on the machine come and go)."""
    return {x.path.name for x in names.find_ours(os.getpid()) if x.path.parent == names.SHM_DIR}


def test_full_dev_shm_raises_clear_error_and_leaves_nothing():
    before = _mine()
    total = os.statvfs(names.SHM_DIR).f_blocks * os.statvfs(names.SHM_DIR).f_frsize
    huge = total // 8 + (1 << 30) // 8  # more float64 than the whole tmpfs holds
    with pytest.raises(SharedMemoryFull, match=r"cannot reserve .* in /dev/shm .* free of") as info:
        SharedNDArray.empty(huge, np.float64, inline_below=0)
    assert isinstance(info.value, OSError)
    assert _mine() - before == set()


def test_full_dev_shm_caught_at_fallocate_too(monkeypatch):
    """Without the statvfs pre-check, posix_fallocate's ENOSPC gives the same error, no file."""
    from pytest_ipcbench.shared import segment

    monkeypatch.setattr(segment, "_check_free", lambda size: None)
    before = _mine()
    st = os.statvfs(names.SHM_DIR)
    with pytest.raises(SharedMemoryFull, match="free of"):
        SharedNDArray.empty(st.f_blocks * st.f_frsize + (1 << 30), np.uint8, inline_below=0)
    assert _mine() - before == set()


def test_fixture_factory_releases_at_teardown(shared_array):
    a = shared_array((300, 300), np.float32)
    b = shared_array(np.arange(200_000))
    assert a.is_shared and b.is_shared and b[-1] == 199_999
    global _KEPT
    _KEPT = a  # still referenced after the test: the fixture drops our reference anyway


_KEPT = None


def test_fixture_teardown_released_kept_array():
    assert _KEPT is not None and not shm_path(_KEPT._ipcb_seg.name).exists()


@pytest.mark.parametrize("backend", ["libatomic", "fcntl"])
def test_counter_is_atomic_across_processes(backend):
    """2 processes x 1000 pickles/adopts on one segment keep the counts exact (both back ends)."""
    code = textwrap.dedent("""
        import os, pickle, sys
        import numpy as np
        from pytest_ipcbench.shared import SharedNDArray
        from pytest_ipcbench.shared import _atomic
        assert _atomic.DEFAULT_MODE == (_atomic.FCNTL if sys.argv[1] == "fcntl" else _atomic.LIBATOMIC)
        arr = SharedNDArray.from_numpy_array(np.ones(100), inline_below=0)
        seg = arr._ipcb_seg
        r, w = os.pipe()
        pid = os.fork()
        for _ in range(1000):  # both processes hammer the same words
            pickle.loads(pickle.dumps(arr))
        if pid == 0:
            os._exit(0 if seg.refs() >= 1 else 1)
        os.waitpid(pid, 0)
        print(seg.refs() - 1, seg.in_transit())  # the child re-held at fork and dropped nothing
    """)
    env = dict(os.environ, IPCB_ATOMIC=backend, PYTHONPATH=os.getcwd())
    out = subprocess.run([sys.executable, "-c", code, backend], env=env, capture_output=True, text=True,
                         timeout=60)
    assert out.returncode == 0, out.stderr
    extra, transit = map(int, out.stdout.split())
    assert transit == 0
    assert extra == 1  # the os._exit child leaked exactly its own reference, nothing was lost


def test_reclaim_orphans_incomplete_file_only_if_creator_dead():
    dead = names.resource_name("nd", pid=99_999_999)  # above any pid_max: never alive
    alive = names.resource_name("nd")
    for n in (dead, alive):
        with open(shm_path(n), "wb") as f:
            f.write(bytes(4096))  # header never written
    try:
        assert reclaim_orphans(names=[dead, alive]) == [dead]
        assert shm_path(alive).exists()
    finally:
        names.remove(shm_path(alive))
        names.remove(shm_path(dead))
