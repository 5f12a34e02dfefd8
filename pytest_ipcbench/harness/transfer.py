"""Move a payload through a backend to every reader and verify what each one received.

``deliver`` runs on every rank of a group (``group.run(deliver, spec, payload)``); it is the
correctness core that the tests and the harness share: payload -> write -> transfer -> read ->
verify.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..backends.base import BackendSpec
from ..core.group import Group
from ..core.payloads import PayloadSpec


@dataclass(frozen=True)
class Delivery:
    """What one rank did in one transfer."""

    rank: int
    role: str  # "writer" or "reader"
    rounds: int
    verified: int  # rounds whose received object equalled what was written
    problem: str = ""

    @property
    def ok(self) -> bool:
        return not self.problem and (self.role == "writer" or self.verified == self.rounds)


def deliver(group: Group, backend: BackendSpec, payload: PayloadSpec, rounds: int = 2) -> Delivery:
    """Collective: ``rounds`` times, the root writes a fresh payload and every reader checks it.

    Each round uses another seed, so a reader that sees a stale value fails verification.
    """
    with backend.open(group) as live:
        verified = 0
        problem = ""
        for round_ in range(rounds):
            group.barrier()
            expected = payload.build(seed=round_)
            if group.rank == live.root:
                try:
                    live.write(expected)
                except Exception:
                    # a failed write left an error record in the store: still meet the readers
                    # at the barrier so they read it and raise too, instead of hanging here (not
                    # on Ctrl-C: it must stop the run, and the readers may be gone already)
                    if live.delivery == "store":
                        group.barrier()
                    raise
                if live.delivery == "store":
                    group.barrier()
            else:
                if live.delivery == "store":
                    group.barrier()
                got = live.read()
                if payload.equal(got, expected):
                    verified += 1
                elif not problem:
                    problem = f"round {round_}: {describe_difference(got, expected)}"
                del got
        group.barrier()
    role = "writer" if group.rank == backend.root else "reader"
    return Delivery(group.rank, role, rounds, verified, problem)


def assert_delivered(deliveries: Sequence[Delivery]) -> None:
    """Fail with every rank's problem if any reader did not receive exactly what was written."""
    bad = [d for d in deliveries if not d.ok]
    if bad:
        lines = "\n".join(f"  rank {d.rank}: {d.problem or f'{d.verified}/{d.rounds} verified'}" for d in bad)
        raise AssertionError(f"{len(bad)} of {len(deliveries)} ranks did not receive the payload:\n{lines}")
    if not any(d.role == "reader" for d in deliveries):
        raise AssertionError("no reader took part: a transfer needs at least 2 ranks")


def describe_object(obj: Any) -> str:
    """A short, data-free description of a received object for error messages."""
    shape = getattr(obj, "shape", None)
    dtype = getattr(obj, "dtype", None)
    if shape is not None:
        return f"{type(obj).__name__}(shape={shape}, dtype={dtype})"
    try:
        return f"{type(obj).__name__}(len={len(obj)})"
    except TypeError:
        return type(obj).__name__


_SHOWN = 60  # characters of a value shown in a difference


def _short(value: Any) -> str:
    text = repr(value.item() if isinstance(value, np.generic) else value)
    return text if len(text) <= _SHOWN else text[:_SHOWN - 3] + "..."


def describe_difference(got: Any, expected: Any) -> str:
    """Why ``got`` is not ``expected``, for a wrong-bytes failure: the descriptions, then the first
    difference (index and both values) of ndarrays, bytes, dicts, lists and tuples, nested."""
    head = f"received {describe_object(got)}, expected {describe_object(expected)}"
    where = first_difference(got, expected)
    return f"{head}: {where}" if where else head


def first_difference(got: Any, expected: Any, path: str = "", depth: int = 0) -> str:
    """The first place where ``got`` and ``expected`` differ, in words ("" if none is found)."""
    at = f"at {path}: " if path else ""
    if type(got) is not type(expected) and not (isinstance(got, (bytes, bytearray, memoryview))
                                                and isinstance(expected, (bytes, bytearray, memoryview))):
        return f"{at}type {type(got).__name__} instead of {type(expected).__name__}"
    if isinstance(expected, np.ndarray):
        found = _array_difference(got, expected)
        return at + found if found else ""
    if isinstance(expected, (bytes, bytearray, memoryview)):
        a, b = bytes(got), bytes(expected)
        for i, (x, y) in enumerate(zip(a, b)):
            if x != y:
                return f"{at}first differing byte at index {i}: {x:#04x} instead of {y:#04x}"
        return f"{at}{len(a)} bytes instead of {len(b)}" if len(a) != len(b) else ""
    if depth > 8:
        return ""
    if isinstance(expected, dict):
        missing = [k for k in expected if k not in got]
        if missing:
            return f"{at}key {_short(missing[0])} missing"
        extra = [k for k in got if k not in expected]
        if extra:
            return f"{at}unexpected key {_short(extra[0])}"
        for key in expected:
            found = first_difference(got[key], expected[key], f"{path}[{key!r}]", depth + 1)
            if found:
                return found
        return ""
    if isinstance(expected, (list, tuple)):
        for i, (x, y) in enumerate(zip(got, expected)):
            found = first_difference(x, y, f"{path}[{i}]", depth + 1)
            if found:
                return found
        return f"{at}length {len(got)} instead of {len(expected)}" if len(got) != len(expected) else ""
    try:
        same = bool(got == expected)
    except Exception:
        return ""
    return "" if same else f"{at}{_short(got)} instead of {_short(expected)}"


def _array_difference(got: np.ndarray, expected: np.ndarray) -> str:
    if got.dtype != expected.dtype:
        return f"dtype {got.dtype} instead of {expected.dtype}"
    if got.shape != expected.shape:
        return f"shape {got.shape} instead of {expected.shape}"
    try:
        differs = np.asarray(got != expected)
        if expected.dtype.kind in "fc":  # NaN in the same place is the same payload
            differs &= ~(np.isnan(got) & np.isnan(expected))
    except Exception:
        differs = np.zeros(expected.shape, dtype=bool)
    flat = np.flatnonzero(differs)
    if not flat.size:  # equal as numbers (0.0 and -0.0, NaN payloads): compare the bytes
        a = np.ascontiguousarray(got).reshape(-1).view(np.uint8)
        b = np.ascontiguousarray(expected).reshape(-1).view(np.uint8)
        bad = np.flatnonzero(a != b)
        if not bad.size:
            return ""
        flat = np.asarray([bad[0] // max(1, expected.itemsize)])
    index = tuple(int(i) for i in np.unravel_index(int(flat[0]), expected.shape))
    shown = index[0] if len(index) == 1 else index
    return (f"{flat.size} of {expected.size} elements differ; the first at index {shown}: "
            f"{_short(got[index])} instead of {_short(expected[index])}")
