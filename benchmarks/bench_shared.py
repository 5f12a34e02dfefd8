"""The shared-array paths: SharedNDArray, SharedNumpyPool and the handle that travels.

In-process ``time_*`` / ``peakmem_*`` benchmarks of the sender's side (make a shared copy in a
fresh segment, in a pooled one, pickle the handle), and ``track_*`` figures of the shared-array experiment's
two-process experiment (``pytest_ipcbench.shared.experiment``) when the commit has it:
``SharedArrayExperiment`` (the five paths) and ``HandlePath`` (handle-only round trip against
``None``, and their ratio, at 1 MB and 1 GiB).
"""

from __future__ import annotations

import pickle
import sys
from typing import Any

import numpy as np

from . import _job

# float32 rows x 602 columns (a GNN training batch) of about these sizes (the default suite
# keeps the large one: the copies are bandwidth-bound there, pickling a handle costs the same)
SIZES = ("1MB", "100MB") if _job.FULL else ("100MB",)
COLS = 602


def _shared() -> Any:
    try:
        from pytest_ipcbench import shared
    except ImportError as exc:
        raise NotImplementedError(f"this commit has no shared arrays: {exc}") from None
    return shared


def _batch(size: str) -> np.ndarray:
    nbytes = {"1MB": 10**6, "100MB": 10**8, "602MB": 602 * 10**6}[size]
    rows = max(1, nbytes // (COLS * 4))
    a = np.empty((rows, COLS), dtype=np.float32)
    a[...] = np.arange(COLS, dtype=np.float32)
    return a


class SharedArray:
    params = [list(SIZES)]
    param_names = ["size"]
    timeout = 120
    rounds = _job.ROUNDS
    repeat = _job.REPEAT
    warmup_time = _job.WARMUP_TIME

    def setup(self, size: str) -> None:
        self.shared = _shared()
        self.a = _batch(size)
        self.pool = self.shared.SharedNumpyPool(max_bytes=4 * self.a.nbytes)
        warm = self.pool.from_numpy_array(self.a)  # one segment, pages touched: later copies reuse it
        warm.release()
        del warm
        self.held = self.shared.SharedNDArray.from_numpy_array(self.a)

    def teardown(self, size: str) -> None:
        self.held.release()
        del self.held
        self.pool.close()

    def time_new_segment_copy(self, size: str) -> None:
        """A new segment and one copy into it (first-touch page faults included)."""
        x = self.shared.SharedNDArray.from_numpy_array(self.a)
        x.release()

    def time_pooled_copy(self, size: str) -> None:
        """A pooled, already touched segment and one copy (the fast path: one memcpy)."""
        x = self.pool.from_numpy_array(self.a)
        x.release()

    def time_pickle_handle(self, size: str) -> None:
        """What a queue or mpi4py's lowercase send pickles: the handle, not the data."""
        blob = pickle.dumps(self.held, protocol=5)
        pickle.loads(blob).release()

    def peakmem_new_segment_copy(self, size: str) -> None:
        x = self.shared.SharedNDArray.from_numpy_array(self.a)
        x.release()


# the experiment's batch: ROWS x 602 float32 (25000 rows: 60 MB; 250000 rows: 602 MB)
EXPERIMENT_ROWS_ALL = {"60MB": 25_000, "602MB": 250_000}
EXPERIMENT_ROWS = EXPERIMENT_ROWS_ALL if _job.FULL else {"60MB": 25_000}
EXPERIMENT_PATHS = ("mpqueue", "fresh", "pool", "handle", "ping", "copy")
HANDLE_SIZES = ("1MB", "1GiB")  # the handle path should not depend on the array's size


def _experiment_cache() -> dict[str, Any]:
    """The shared-array experiment (one spawned consumer per size); it ends with the handle sweep
    (handle vs None at 1 MB and 1 GiB) on commits that have it.  Shared by the two classes
    below (asv keys a cache by its function's module and line)."""
    cache: dict[str, Any] = {}
    for size, rows in EXPERIMENT_ROWS.items():
        got = _job.run_json([sys.executable, "-m", "pytest_ipcbench.shared.experiment", "--rows", str(rows),
                             "--repeats", "3", "--json"], timeout=600)
        if isinstance(got, str):
            cache[size] = got
            continue
        for path, seconds in got.get("median", {}).items():
            cache[f"{size}|{path}"] = float(seconds)
        sweep = got.get("handle_sweep") or {}
        for label, med in sweep.get("median", {}).items():
            for path, seconds in med.items():
                cache[f"sweep|{label}|{path}"] = float(seconds)
        for label, ratio in sweep.get("paired", {}).items():
            cache[f"sweep|{label}|paired"] = float(ratio)
        for label, seconds in sweep.get("release", {}).items():
            cache[f"sweep|{label}|release"] = float(seconds)
    return cache


_experiment_cache.timeout = 1300  # type: ignore[attr-defined]


class SharedArrayExperiment:
    """The experiment's producer -> consumer transfer of one batch, timed by the experiment itself.

    From just before the put until the consumer holds the array and acknowledged it: through
    multiprocessing.Queue, a fresh segment, a pooled segment, a premade array's handle, ``None``
    (the queue's own latency), and a plain copy for reference. Run in a process of its own (it
    spawns its consumer). Default suite: 60 MB; ``IPCBENCH_ASV_FULL=1`` adds the seed's 602 MB.
    """

    params = [list(EXPERIMENT_ROWS), list(EXPERIMENT_PATHS)]
    param_names = ["size", "path"]
    timeout = 120
    rounds = _job.TRACK_ROUNDS
    setup_cache = staticmethod(_experiment_cache)

    def setup(self, cache: dict[str, Any], size: str, path: str) -> None:
        self.value = _lookup(cache, size, path)

    def track_transfer(self, cache: dict[str, Any], size: str, path: str) -> float:
        return _lookup(cache, size, path)

    track_transfer.unit = "seconds"  # type: ignore[attr-defined]


class HandlePath:
    """Handle-only round trip of a premade shared array against ``None`` through the same queue.

    ``track_roundtrip_*``: median seconds from put until the consumer acknowledged (it maps
    the segment, or reuses the mapping it made before, and reads one element). ``track_ratio``:
    handle / None, each handle followed by ``None``, every size in every round (median of
    per-round ratios) -- the figure to watch: 1.0
    would be a free handle, and it should be the same at 1 MB and 1 GiB.
    """

    params = [list(HANDLE_SIZES)]
    param_names = ["size"]
    timeout = 120
    rounds = _job.TRACK_ROUNDS
    setup_cache = staticmethod(_experiment_cache)

    def setup(self, cache: dict[str, Any], size: str) -> None:
        _sweep(cache, size, "handle")

    def track_roundtrip_handle(self, cache: dict[str, Any], size: str) -> float:
        return _sweep(cache, size, "handle")

    track_roundtrip_handle.unit = "seconds"  # type: ignore[attr-defined]

    def track_roundtrip_none(self, cache: dict[str, Any], size: str) -> float:
        return _sweep(cache, size, "ping")

    track_roundtrip_none.unit = "seconds"  # type: ignore[attr-defined]

    def track_release(self, cache: dict[str, Any], size: str) -> float:
        """The receiver's drop of the array (uncount, unlock, park the mapping), after the round
        trip's clock stopped: kept off the round trip, so it is shown here."""
        return _sweep(cache, size, "release")

    track_release.unit = "seconds"  # type: ignore[attr-defined]

    def track_ratio(self, cache: dict[str, Any], size: str) -> float:
        """Median over rounds of handle / None of the same round (robust to load drifts)."""
        paired = cache.get(f"sweep|{size}|paired")
        return float(paired) if paired is not None else _sweep(cache, size, "handle") / _sweep(cache, size, "ping")

    track_ratio.unit = "ratio"  # type: ignore[attr-defined]


def _sweep(cache: dict[str, Any], size: str, path: str) -> float:
    value = cache.get(f"sweep|{size}|{path}")
    if value is None:
        raise NotImplementedError(f"skip: this commit's experiment has no handle sweep at {size}")
    return float(value)


def _lookup(cache: dict[str, Any], size: str, path: str) -> float:
    value = cache.get(f"{size}|{path}", cache.get(size, f"skip: no figure for {path} at {size}"))
    if isinstance(value, str):
        raise NotImplementedError(value)
    return float(value)
