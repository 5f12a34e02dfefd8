"""Broadcast through every backend: backend x mode x payload kind x size x ranks.

The MPI cases are measured by the one ``mpiexec -n 4`` launch of the commit
(:func:`_job.setup_cache`, shared with ``bench_mpi_methods``) with the project's harness
(``pytest_ipcbench.harness.measure``); each ``track_completion`` returns one case's median
completion time (max over readers per iteration), in seconds. Backends that cannot run between
MPI ranks are measured in a local world of processes by a second, plain launch. A case the
commit cannot run (module missing, backend unavailable) is skipped, not failed; so are the
cases outside the default suite unless ``IPCBENCH_ASV_FULL=1`` (see :mod:`_job`).
"""

from __future__ import annotations

from typing import Any

from . import _job
from ._job import setup_cache  # noqa: F401  (one MPI launch per commit, shared: see _job)


class Broadcast:
    """Rank 0 writes, every other rank reads and verifies.

    ``payload``: kind and size (``ndarray-1MB``; ``tiny-64B`` is the latency case).
    """

    params = [list(_job.BACKENDS), list(_job.MODES), list(_job.SUITE_CASES), list(_job.SUITE_RANKS)]
    param_names = ["backend", "mode", "payload", "ranks"]
    timeout = 60
    rounds = _job.TRACK_ROUNDS

    def setup(self, cache: dict[str, Any], backend: str, mode: str, payload: str, ranks: int) -> None:
        self.key = _job.case_key(backend, mode, *_job.CASE_OF[payload], ranks)
        _job.lookup(cache, self.key, "transfer")

    def track_completion(self, cache: dict[str, Any], backend: str, mode: str, payload: str, ranks: int) -> float:
        return _job.lookup(cache, self.key, "transfer")

    track_completion.unit = "seconds"  # type: ignore[attr-defined]
