"""The MPI methods: method x configuration x shape (1d, 2d) x ranks.

The commit's one ``mpiexec -n 4`` launch (:func:`_job.setup_cache`, shared with
``bench_transfer``) runs ``pytest_ipcbench.mpi_methods.methods`` on sub-groups of the selected rank
counts; ``track_transfer`` is the median time per transfer, max over ranks, in seconds. Default
suite: Small and Large at 4 ranks; ``IPCBENCH_ASV_FULL=1``: Small, Medium, Large at 2 and 4.
"""

from __future__ import annotations

from typing import Any

from . import _job
from ._job import setup_cache  # noqa: F401  (one MPI launch per commit, shared: see _job)

# fixed here (not read from the package) so the suite is the same over history
METHODS = ("p2p", "bcast", "ibcast", "pack", "datatype", "rma-fence", "rma-lock", "pickle", "pkl5")


class MPIMethods:
    """Rank 0 sends the MPI methods' int32 data (contiguous 1D, ragged 2D) to every rank."""

    params = [list(METHODS), list(_job.SUITE_METHOD_CONFIGS), list(_job.SHAPES), list(_job.SUITE_RANKS)]
    param_names = ["method", "config", "shape", "ranks"]
    timeout = 60
    rounds = _job.TRACK_ROUNDS

    def setup(self, cache: dict[str, Any], method: str, config: str, shape: str, ranks: int) -> None:
        _job.lookup(cache, _job.case_key(method, config, shape, ranks), "methods")

    def track_transfer(self, cache: dict[str, Any], method: str, config: str, shape: str, ranks: int) -> float:
        return _job.lookup(cache, _job.case_key(method, config, shape, ranks), "methods")

    track_transfer.unit = "seconds"  # type: ignore[attr-defined]
