"""In-process: what the ``bytes`` mode pays on each side, pickling and unpickling each payload kind.

``inband`` is pickle protocol 5 with the data inside the bytes (the fair protocol);
``oob`` keeps numpy buffers out of band (the ``native`` mode's path: no copy into the pickle).
"""

from __future__ import annotations

import pickle
from typing import Any

from . import _job

PROTOCOLS = ("inband", "oob")


def _payload(kind: str, size: str) -> Any:
    try:
        from pytest_ipcbench.core.payloads import PayloadSpec, parse_size
    except ImportError as exc:
        raise NotImplementedError(f"this commit has no payload factories: {exc}") from None
    return PayloadSpec(kind, 64 if kind == "tiny" else parse_size(size)).build()


class Serialize:
    """``payload``: kind and size (``ndarray-1MB``; ``tiny-64B``), as in ``bench_transfer``."""

    params = [list(_job.SUITE_CASES), list(PROTOCOLS)]
    param_names = ["payload", "protocol"]
    timeout = 120
    rounds = _job.ROUNDS
    repeat = _job.REPEAT
    warmup_time = _job.WARMUP_TIME

    def setup(self, payload: str, protocol: str) -> None:
        self.obj = _payload(*_job.CASE_OF[payload])
        self.buffers: list[pickle.PickleBuffer] = []
        if protocol == "oob":
            self.blob = pickle.dumps(self.obj, protocol=5, buffer_callback=self.buffers.append)
        else:
            self.blob = pickle.dumps(self.obj, protocol=5)

    def time_dumps(self, payload: str, protocol: str) -> None:
        if protocol == "oob":
            pickle.dumps(self.obj, protocol=5, buffer_callback=[].append)
        else:
            pickle.dumps(self.obj, protocol=5)

    def time_loads(self, payload: str, protocol: str) -> None:
        pickle.loads(self.blob, buffers=self.buffers)

    def peakmem_roundtrip(self, payload: str, protocol: str) -> None:
        """Peak RSS of a dumps + loads round trip (the payload itself included)."""
        if protocol == "oob":
            buffers: list[pickle.PickleBuffer] = []
            pickle.loads(pickle.dumps(self.obj, protocol=5, buffer_callback=buffers.append), buffers=buffers)
        else:
            pickle.loads(pickle.dumps(self.obj, protocol=5))


class PayloadBuild:
    """Building a payload happens outside every timed region; this keeps its cost visible."""

    params = [list(_job.SUITE_CASES)]
    param_names = ["payload"]
    rounds = _job.ROUNDS
    repeat = _job.REPEAT
    warmup_time = _job.WARMUP_TIME

    def setup(self, payload: str) -> None:
        self.case = _job.CASE_OF[payload]
        _payload(*self.case)  # skips on commits without payloads

    def time_build(self, payload: str) -> None:
        _payload(*self.case)
