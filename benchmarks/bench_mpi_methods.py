"""Seed 004's MPI methods: method x configuration (Small, Medium, Large) x shape (1d, 2d) x ranks.

One ``mpiexec -n 4`` launch (``setup_cache``) runs ``pytest_ipcbench.seed004.methods`` on sub-groups
of 2 and 4 ranks; ``track_transfer`` is the median time per transfer, max over ranks, in seconds.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from . import _job

# fixed here (not read from the package) so the suite is the same over history
METHODS = ("p2p", "bcast", "ibcast", "pack", "datatype", "rma-fence", "rma-lock", "pickle", "pkl5")


def setup_cache() -> dict[str, Any]:
    return _job.launch(["methods"], Path("methods-mpi.jsonl").resolve(), nprocs=4)


setup_cache.timeout = _job.JOB_TIMEOUT + 60  # type: ignore[attr-defined]


class MPIMethods:
    """Rank 0 sends seed 004's int32 data (contiguous 1D, ragged 2D) to every rank."""

    params = [list(METHODS), list(_job.METHOD_CONFIGS), list(_job.SHAPES), list(_job.RANKS)]
    param_names = ["method", "config", "shape", "ranks"]
    timeout = 60

    def setup(self, cache: dict[str, Any], method: str, config: str, shape: str, ranks: int) -> None:
        _job.lookup(cache, _job.case_key(method, config, shape, ranks))

    def track_transfer(self, cache: dict[str, Any], method: str, config: str, shape: str, ranks: int) -> float:
        return _job.lookup(cache, _job.case_key(method, config, shape, ranks))

    track_transfer.unit = "seconds"  # type: ignore[attr-defined]
