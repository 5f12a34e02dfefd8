"""What an object is made of, as far as moving it goes: cheap, deterministic features.

:func:`features` pickles the object once with protocol 5 and a buffer callback (as the native
modes do) and walks it once: ``total_bytes``, ``inband_bytes``, ``oob_count``, ``oob_bytes``,
``oob_largest``, ``oob_largest_share``; ``python_objects`` (what pickle handles one by one in
band; a plain-dtype array counts as none); ``arrays``, ``noncontiguous_arrays``,
``object_arrays``, ``dtypes``; ``depth`` (a list of values 1, a dict of lists 2); ``top``. The
same object gives the same features in every process (no addresses, no timings).
"""

from __future__ import annotations

import pickle
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from ..core.errors import UsageError

#: containers walked; anything else is one object (its own pickle decides what it holds)
_CONTAINERS = (dict, list, tuple, set, frozenset)


@dataclass(frozen=True)
class Features:
    total_bytes: int
    inband_bytes: int
    oob_count: int
    oob_bytes: int
    oob_largest: int
    oob_largest_share: float
    python_objects: int
    arrays: int
    noncontiguous_arrays: int
    object_arrays: int
    dtypes: tuple[str, ...]
    depth: int
    top: str

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["dtypes"] = list(self.dtypes)
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Features:
        return cls(**{**d, "dtypes": tuple(d["dtypes"])})

    def describe(self) -> str:
        """One line: ``1.05 MB: 50 out-of-band buffers (largest 8% of it), 101 Python objects in band, depth 1``."""
        from ..core.units import format_bytes

        parts = [f"{format_bytes(self.total_bytes)} ({self.top})"]
        if self.oob_count:
            parts.append(f"{self.oob_count} out-of-band buffer{'s' * (self.oob_count != 1)} "
                         f"({format_bytes(self.oob_bytes)}, the largest {self.oob_largest_share:.0%} of the whole)")
        else:
            parts.append("no out-of-band buffer")
        parts.append(f"{self.python_objects} Python object{'s' * (self.python_objects != 1)} in band "
                     f"({format_bytes(self.inband_bytes)})")
        if self.arrays:
            extra = [f"{self.noncontiguous_arrays} non-contiguous"] if self.noncontiguous_arrays else []
            extra += [f"{self.object_arrays} of dtype object"] if self.object_arrays else []
            parts.append(f"{self.arrays} array{'s' * (self.arrays != 1)} of {'/'.join(self.dtypes)}"
                         + (f" ({', '.join(extra)})" if extra else ""))
        parts.append(f"depth {self.depth}")
        return "; ".join(parts)


def _walk(obj: Any) -> tuple[int, int, int, int, set[str], int]:
    """(python objects, arrays, non-contiguous, object-dtype, dtypes, depth), iteratively (deep
    nesting must not hit the recursion limit)."""
    objects = arrays = noncontig = objarrays = 0
    dtypes: set[str] = set()
    depth = 0
    stack: list[tuple[Any, int]] = [(obj, 0)]
    while stack:
        x, d = stack.pop()
        if isinstance(x, np.ndarray):
            arrays += 1
            dtypes.add(x.dtype.str if x.dtype.names is None else "record")
            if not (x.flags.c_contiguous or x.flags.f_contiguous):
                noncontig += 1
            if x.dtype.hasobject and x.dtype.names is None:
                objarrays += 1
                depth = max(depth, d + 1)
                stack.extend((e, d + 1) for e in x.reshape(-1).tolist())
            continue
        objects += 1
        if isinstance(x, dict):
            depth = max(depth, d + 1)
            for k, v in x.items():
                stack.append((k, d + 1))
                stack.append((v, d + 1))
        elif isinstance(x, _CONTAINERS):
            depth = max(depth, d + 1)
            stack.extend((e, d + 1) for e in x)
    return objects, arrays, noncontig, objarrays, dtypes, depth


def features(obj: Any) -> Features:
    """The features of ``obj``; UsageError when it cannot be pickled (no backend could send it)."""
    buffers: list[pickle.PickleBuffer] = []
    try:
        head = pickle.dumps(obj, protocol=5, buffer_callback=buffers.append)
    except Exception as exc:
        raise UsageError(f"the object cannot be pickled ({type(exc).__name__}: {exc}): no backend can send it") from exc
    sizes = [memoryview(b).nbytes for b in buffers]
    oob = sum(sizes)
    total = len(head) + oob
    largest = max(sizes, default=0)
    objects, arrays, noncontig, objarrays, dtypes, depth = _walk(obj)
    return Features(
        total_bytes=total, inband_bytes=len(head), oob_count=len(sizes), oob_bytes=oob, oob_largest=largest,
        oob_largest_share=round(largest / total, 6) if total else 0.0, python_objects=objects, arrays=arrays,
        noncontiguous_arrays=noncontig, object_arrays=objarrays, dtypes=tuple(sorted(dtypes)), depth=depth,
        top=type(obj).__name__,
    )
