"""Move a payload through a backend to every reader and verify what each one received.

``deliver`` runs on every rank of a group (``group.run(deliver, spec, payload)``); it is the
correctness core that the tests and the harness share: payload -> write -> transfer -> read ->
verify.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

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
                    problem = f"round {round_}: received {describe_object(got)}, expected {describe_object(expected)}"
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
