"""The robust normalisation of two runs by their in-run references.

Runs are normalised by their in-run references (copy bandwidth, pipe ping-pong) only when there
are at least :data:`MIN_REFERENCES` of them: the factor is the median of their head / base
ratios, shown with its own interval, so a single volatile reference (a 1 B pipe) cannot scale
every ratio.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from ..results.results import Result

#: Scenarios of in-run references (harness.measure.REFERENCE_SCENARIOS; not imported: no harness here).
REFERENCE_SCENARIOS = ("copy", "reference")
#: Fewer in-run references than this: runs are not normalised at all (one volatile case must
#: never scale every ratio).
MIN_REFERENCES = 3

def is_reference(result: Result) -> bool:
    return result.scenario in REFERENCE_SCENARIOS


def _median_ratio(a: Sequence[float] | None, b: Sequence[float] | None) -> float | None:
    if not a or not b:
        return None
    ma, mb = float(np.median(a)), float(np.median(b))
    return ma / mb if ma > 0 and mb > 0 else None


@dataclass(frozen=True)
class Normalisation:
    """head / base of the in-run references: their median ``factor`` and its interval, or none.

    ``used`` is False when fewer than :data:`MIN_REFERENCES` references were found: the ratios
    are then not normalised (factor 1), and the output says so.
    """

    factor: float
    low: float
    high: float
    references: tuple[tuple[str, float], ...]
    used: bool

    @property
    def half_width(self) -> float:
        """Log-scale half-width of the factor's interval (0 when not used)."""
        return math.log(self.high / self.low) / 2 if self.used and self.low > 0 else 0.0

    def describe(self) -> str:
        n = len(self.references)
        if not self.used:
            return (f"not normalised: {n} in-run reference(s) in common, fewer than {MIN_REFERENCES} "
                    f"(one volatile reference must not scale every ratio)")
        shown = ", ".join(f"{k.split('/')[1]} {k.split('/')[4]} B {r:.2f}x" for k, r in self.references[:5])
        more = f", ... ({n} in all)" if n > 5 else ""
        return (f"every ratio divided by {self.factor:.3f} [95% {self.low:.3f}-{self.high:.3f}], the median "
                f"head/base of {n} in-run references ({shown}{more})")


def reference_factor(old: dict[str, Result], new: dict[str, Result], confidence: float = 0.95) -> Normalisation:
    """The robust load factor between two runs: the median of the references' head / base.

    Its interval is the distribution-free interval of a median (order statistics of the sorted
    log ratios, binomial): with few references it is wide, and that width is added to every
    case's uncertainty.
    """
    ratios = []
    for key in sorted(old.keys() & new.keys()):
        if is_reference(old[key]) and is_reference(new[key]):
            m = new[key].primary
            r = _median_ratio(new[key].samples.get(m), old[key].samples.get(m))
            if r is not None:
                ratios.append((key, r))
    if len(ratios) < MIN_REFERENCES:
        return Normalisation(1.0, 1.0, 1.0, tuple(ratios), False)
    logs = np.sort([math.log(r) for _, r in ratios])
    n = logs.size
    centre = float(np.median(logs))
    # order statistics j, k with P(X_(j) <= median <= X_(k)) >= confidence
    j = max(_binom_half_quantile((1 - confidence) / 2, n) - 1, 0)
    lo, hi = float(logs[j]), float(logs[n - 1 - j])
    return Normalisation(math.exp(centre), math.exp(min(lo, centre)), math.exp(max(hi, centre)), tuple(ratios), True)


def _binom_half_quantile(p: float, n: int) -> int:
    """The smallest j with P(Binomial(n, 1/2) <= j) >= p (exact, by summing)."""
    total = 0.0
    for j in range(n + 1):
        total += math.comb(n, j) / 2 ** n
        if total >= p:
            return j
    return n
