"""Broadcast through every backend: backend x mode x payload kind x size x ranks (2 and 4).

One ``mpiexec -n 4`` launch (``setup_cache``) measures the whole matrix with the project's
harness (``pytest_ipcbench.harness.measure``); each ``track_completion`` returns one case's median
completion time (max over readers per iteration), in seconds. Backends that cannot run between
MPI ranks are measured in a local world of processes by a second, plain launch. A case the
commit cannot run (module missing, backend unavailable) is skipped, not failed.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from . import _job


def setup_cache() -> dict[str, Any]:
    cache = _job.launch(["transfer"], Path("transfer-mpi.jsonl").resolve(), nprocs=4)
    local = sorted(cache.pop("!local", ()))
    if local:  # e.g. mp-queue: queues are inherited by local processes, MPI ranks cannot share one
        cache.update(_job.launch(["transfer", "--local", "--backends", ",".join(local)],
                                 Path("transfer-local.jsonl").resolve(), nprocs=None))
    return cache


setup_cache.timeout = 2 * _job.JOB_TIMEOUT + 60  # type: ignore[attr-defined]


class Broadcast:
    """Rank 0 writes, every other rank reads and verifies (seeds 000 and 001)."""

    params = [list(_job.BACKENDS), list(_job.MODES), list(_job.KINDS), list(_job.SIZES), list(_job.RANKS)]
    param_names = ["backend", "mode", "payload", "size", "ranks"]
    timeout = 60

    def setup(self, cache: dict[str, Any], backend: str, mode: str, payload: str, size: str, ranks: int) -> None:
        if payload == "tiny" and size != _job.SIZES[0]:
            raise NotImplementedError("tiny payloads have one size (64 B), listed under the smallest")
        _job.lookup(cache, _job.case_key(backend, mode, payload, size, ranks))

    def track_completion(self, cache: dict[str, Any], backend: str, mode: str, payload: str, size: str,
                         ranks: int) -> float:
        return _job.lookup(cache, _job.case_key(backend, mode, payload, size, ranks))

    track_completion.unit = "seconds"  # type: ignore[attr-defined]
