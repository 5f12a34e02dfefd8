"""Seed 002's shared-array paths: SharedNDArray, SharedNumpyPool and the handle that travels.

In-process ``time_*`` / ``peakmem_*`` benchmarks of the sender's side (make a shared copy in a
fresh segment, in a pooled one, pickle the handle), and ``track_*`` figures of seed 002's
two-process experiment (``pytest_ipcbench.shared.experiment``) when the commit has it.
"""

from __future__ import annotations

import pickle
from typing import Any

import numpy as np

# float32 rows x 602 columns (seed 002's GNN batch) of about these sizes
SIZES = ("1MB", "100MB")
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
        """A pooled, already touched segment and one copy (seed 002's fast path: one memcpy)."""
        x = self.pool.from_numpy_array(self.a)
        x.release()

    def time_pickle_handle(self, size: str) -> None:
        """What a queue or mpi4py's lowercase send pickles: the handle, not the data."""
        blob = pickle.dumps(self.held, protocol=5)
        pickle.loads(blob).release()

    def peakmem_new_segment_copy(self, size: str) -> None:
        x = self.shared.SharedNDArray.from_numpy_array(self.a)
        x.release()


class Seed002Experiment:
    """Seed 002's producer -> consumer transfer of a batch, by the experiment module's own timing."""

    timeout = 600

    def setup_cache(self) -> dict[str, Any]:
        try:
            from pytest_ipcbench.shared import experiment
        except ImportError as exc:
            return {"*": f"skip: this commit has no seed 002 experiment: {exc}"}
        run = getattr(experiment, "run_seed002", None)
        if run is None:
            return {"*": "skip: pytest_ipcbench.shared.experiment has no run_seed002"}
        return _flatten(run(quick=True))

    def setup(self, cache: dict[str, Any], path: str) -> None:
        _lookup(cache, path)

    def track_transfer(self, cache: dict[str, Any], path: str) -> float:
        return _lookup(cache, path)

    track_transfer.unit = "seconds"  # type: ignore[attr-defined]
    params = [["mp-queue", "new-segment", "pooled-segment", "handle-only"]]
    param_names = ["path"]


def _flatten(outcome: Any) -> dict[str, Any]:
    """``{path: seconds}`` from what run_seed002 returns (a mapping, or records with a median)."""
    items = outcome.items() if isinstance(outcome, dict) else ((getattr(r, "key", None), r) for r in outcome)
    cache: dict[str, Any] = {}
    for key, value in items:
        if isinstance(value, (int, float)):
            cache[str(key)] = float(value)
        elif hasattr(value, "samples"):
            samples = value.samples.get(value.primary) if isinstance(value.samples, dict) else value.samples
            if samples:
                cache[str(getattr(value, "backend", key))] = float(np.median(samples))
    return cache


def _lookup(cache: dict[str, Any], key: str) -> float:
    value = cache.get(key, cache.get("*", f"skip: no figure for {key}"))
    if isinstance(value, str):
        raise NotImplementedError(value)
    return float(value)
